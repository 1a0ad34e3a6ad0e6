"""Model zoo: get(name, **config) -> (inputs, outputs)."""
