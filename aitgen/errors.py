"""Typed errors. Every error names the tensor, op or node at fault."""
from __future__ import annotations


class AitgenError(Exception):
    """Base of every error aitgen raises on purpose."""


class ShapeError(AitgenError, ValueError):
    """Shapes that do not fit an op, a reshape, a state_dict entry or a runtime input."""


class DTypeError(AitgenError, TypeError):
    """Data types that an op does not accept, or that disagree between operands."""


class UnsupportedOpError(AitgenError, NotImplementedError):
    """An op (or an imported node) that this version cannot express or lower."""


class GraphError(AitgenError):
    """A graph that breaks an IR invariant (found by `aitgen.ir.verify`)."""


class MemoryPlanError(GraphError):
    """A memory plan that check_plan rejects; the message names the tensors at fault."""


class PassError(AitgenError):
    """A transform pass failed or broke the graph; the message names it and the passes before it."""


class BuildError(AitgenError):
    """A backend compile failed; carries the command and the first error lines."""


class ToolchainError(BuildError):
    """A compiler, build tool or pinned library is missing or at the wrong version.

    A BuildError subclass so a caller that handles failed builds handles an unbuildable setup too;
    the message always says how to fix it (usually a pip command).
    """


class DeviceError(AitgenError, RuntimeError):
    """No usable device for a model: no GPU, no driver, no cuda-python, or a GPU of another arch.
    The message says which and how to fix it."""


class MockDeviceError(DeviceError):
    """A run on the mock device (Model.load(dir, mock_device=True)) broke one of its checks: a
    pointer outside any live allocation, a misaligned operand, a launch past the arch's limits, an
    allocation or synchronous copy during graph capture, a race between streams. The message names
    the first failing launch; `failures` lists them all, `launches` holds the run's records."""

    def __init__(self, message: str, failures=(), launches=()):
        super().__init__(message)
        self.failures, self.launches = list(failures), list(launches)


class RuntimeInputError(AitgenError, ValueError):
    """A call to a compiled model or the oracle with bad inputs (name, dtype, rank, shape, bound)."""


class CalibrationError(RuntimeInputError):
    """precision="int8" without calibration feeds, or feeds that are not an iterable of input dicts
    matching the model's inputs (the message names the input and the feed at fault)."""


class InvalidNameError(AitgenError, ValueError):
    """A tensor, dim, input/output or model name that cannot be represented (a NUL, not a string)."""


class LimitError(ShapeError):
    """A size, offset or bound that does not fit the checked arithmetic of a build (int64, the arena);
    the message names the tensor or dim at fault."""


class TargetError(AitgenError, ValueError):
    """A target or arch that does not exist (or is not built yet): the message lists those that do."""


class WorkdirError(AitgenError, ValueError):
    """A workdir that cannot hold a build (a file, a system path, empty) or is being built by another
    process that does not let go."""


class ModelError(AitgenError, RuntimeError):
    """A built model that cannot be loaded or run for a reason other than bad input: a missing,
    malformed or tampered artefact in its workdir, or the library failing (the message says which)."""


class RuntimeInputTypeError(RuntimeInputError, TypeError):
    """A call to a compiled model with an argument of the wrong Python type (a list instead of a
    dict, a string instead of an array); also a RuntimeInputError."""


class ImportError_(AitgenError):
    """A malformed model file handed to an importer."""


def op_label(op) -> str:
    """How errors name an op: its kind and, when it has one, its name."""
    name = getattr(op, "name", None)
    kind = getattr(getattr(op, "kind", None), "value", "?")
    return f"{kind} '{name}'" if name else kind


class StateDictError(AitgenError, KeyError):
    """load_state_dict with missing or unexpected keys (shape mismatches raise ShapeError)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class UsageError(AitgenError, ValueError):
    """A command-line argument aitgen cannot use: malformed, naming a file that is not there, or
    not applying to the model given; the message says what to write instead."""


class OutputDirError(AitgenError, ValueError):
    """A folder that outputs cannot be written into (`aitgen run --out`): a file, a system path,
    or not writable."""


class UnknownDimError(ShapeError):
    """dim_bounds (the CLI's --dim) names a dim the model does not have. `unknown` lists those
    names, `known` the model's symbolic dims."""

    def __init__(self, message: str, unknown=(), known=()):
        super().__init__(message)
        self.unknown, self.known = list(unknown), list(known)


class ReferenceKernelWarning(UserWarning):
    """A kernel runs a library's reference implementation (oneDNN's "ref:any"): correct, and orders of
    magnitude slower than its jit kernels. The message names the ops and the implementation."""


class PrecisionFallbackWarning(UserWarning):
    """compile_model(precision=...) on a CPU without the instructions that make that precision fast
    (bfloat16 without AVX-512, int8 without VNNI): the build is correct, and slower than on a CPU
    that has them (bfloat16 at about float32's speed; int8 GEMMs well short of VNNI's gain). The
    message says what the CPU lacks and what runs instead."""


class ProfileFallbackWarning(UserWarning):
    """compile_model(profile=True) could not time the GEMM/conv candidates (no GPU of the build's
    arch here): the build goes on with the cached winners where present, else the heuristic's
    choice. The message says why."""
