"""torch-like modules that build aitgen graphs. Filled in by the nn frontend work."""
