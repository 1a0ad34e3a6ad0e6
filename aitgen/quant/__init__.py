"""int8 post-training quantisation: calibration (calibrate.py); the pass is passes/quantize_int8.py
and the int8 ops ops/qlinear.py."""
from .calibrate import METHODS, ActScale, check_feeds, observe  # noqa: F401
