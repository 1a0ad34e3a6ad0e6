"""Code generation: lower ops to kernel specs, render templates, compile and link (build.py, locate.py)."""
