"""The op catalogue: builders that add ops to a graph. Each family lives in its own file."""
import sys as _sys

from ..ir.tensor import install_operators as _install_operators
from . import registry
from .attention import *  # noqa: F401,F403
from .conv import *  # noqa: F401,F403
from .dynamic import *  # noqa: F401,F403
from .elementwise import *  # noqa: F401,F403
from .elementwise import broadcast_shapes  # noqa: F401
from .fused import *  # noqa: F401,F403
from .gather import *  # noqa: F401,F403
from .gemm import *  # noqa: F401,F403
from . import grouped  # noqa: F401 - registers GROUPED (ops/grouped.py); passes build it, not users
from .linalg import *  # noqa: F401,F403
from .linear_attention import *  # noqa: F401,F403
from .loop import *  # noqa: F401,F403
from .nms import *  # noqa: F401,F403
from .norm import *  # noqa: F401,F403
from .pool import *  # noqa: F401,F403
from . import qlinear  # noqa: F401 - registers QGEMM / QCONV2D; passes/quantize_int8.py builds them
from .reduce import *  # noqa: F401,F403
from .roi_align import *  # noqa: F401,F403
from .scan import *  # noqa: F401,F403
from .scatter import *  # noqa: F401,F403
from .softmax import *  # noqa: F401,F403
from .topk import *  # noqa: F401,F403
from .unique import *  # noqa: F401,F403
from .view import *  # noqa: F401,F403

# Tensor's operators (+, @, reshape, [...]) build these ops; ir cannot import ops, so ops hands itself over.
_install_operators(_sys.modules[__name__])
