"""Transform passes. PIPELINE is filled in by the passes work."""
