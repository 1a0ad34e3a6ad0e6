"""`aitgen.nn` is aitgen.frontend.nn (torch-like modules): `import aitgen.nn` and
`from aitgen.nn import Linear` reach the same module object as `aitgen.nn`."""
import sys

from .frontend import nn as _nn

sys.modules[__name__] = _nn
