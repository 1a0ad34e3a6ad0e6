"""Triton Inference Server engine, through PyTriton (the `triton` extra, nvidia-pytriton==0.7.0).

    from aitgen.serving.triton import start
    server = start("build/mlp", http_port=8000, grpc_port=8001, max_batch=16, instances=2)
    ...                                   # KServe v2 over HTTP and gRPC, Triton's dynamic batcher
    server.stop()

PyTriton runs tritonserver and, per model instance, a Triton Python-backend stub that forwards each
batch to a callable in this process; each of the K instances calls `Model.run` on a container
loaded with num_runtimes=K, so K batches run at once. Where the model's inputs and outputs all lead
with the same dynamic dim, Triton stacks requests along it (max_batch_size = rows a call);
otherwise batching is off and every dim is declared as the model bounds it (-1: bound per call).

Two facts about this environment decide whether Triton can run, both checked in `check_environment`
before anything starts (docs/serving.md has the evidence):

1. The stub is prebuilt per Python minor version and links `libpython3.X.so.1.0` by soname, while
   PyTriton puts this interpreter's bin/ first on PATH so that the stub's embedded interpreter
   finds this environment's stdlib and site-packages. Without more, the dynamic loader takes the
   *system* libpython (Debian's 3.11.2 here) and runs it over this interpreter's stdlib (pyenv's
   3.11.7): 3.11.7's multiprocessing.resource_tracker calls `RLock._recursion_count()`, which
   3.11.2's C `_thread` lacks, so loading the model fails with
   AttributeError: '_thread.RLock' object has no attribute '_recursion_count'.
   Fix: put this interpreter's own shared libpython first on LD_LIBRARY_PATH for tritonserver,
   so the stub runs the same patch release as the stdlib it loads (`_stub_library_path`).
2. nvidia-pytriton 0.7.0 requires numpy<2, and it means it: its stub's pybind11 reads arrays with
   numpy 1's C layout, so under numpy 2 every output reaches Triton with the wrong byte size
   ("output tensor shape does not match size of output"). The Triton engine therefore needs an
   environment with numpy<2 (the `triton` extra pins it; keep it apart from a numpy-2 venv).
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import sysconfig
import threading
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from ..ir.dtype import DType
from ..runtime import artifacts
from . import batching, protocol
from .errors import EngineUnavailableError, ServingError

LOG = logging.getLogger(__name__)
PYTRITON_VERSION = "0.7.0"   # the release this module was written and tested against
_UNSUPPORTED = {DType.bfloat16: "numpy has no bfloat16 that PyTriton can carry"}


def check_environment() -> None:
    """Raise EngineUnavailableError saying why Triton cannot serve from this environment."""
    try:
        from importlib import metadata
        version = metadata.version("nvidia-pytriton")
    except Exception:  # noqa: BLE001 - metadata raises PackageNotFoundError, or worse on a broken install
        raise EngineUnavailableError('the Triton engine needs nvidia-pytriton: pip install -e ".[triton]" '
                                     "(in a virtualenv of its own: it needs numpy<2)") from None
    if int(np.__version__.split(".")[0]) >= 2:
        raise EngineUnavailableError(
            f"the Triton engine needs numpy<2 in this environment (numpy {np.__version__} here): "
            f"nvidia-pytriton {version} requires numpy<2.0 and its prebuilt Python-backend stub reads "
            "numpy 1's array layout, so under numpy 2 Triton rejects every answer ('output tensor shape "
            'does not match size of output\'). Install the extra in its own virtualenv: pip install -e ".[triton]"')
    stub = Path(__import__("pytriton").__file__).parent / "tritonserver" / "python_backend_stubs" / \
        f"{sys.version_info[0]}.{sys.version_info[1]}" / "triton_python_backend_stub"
    if not stub.is_file():
        raise EngineUnavailableError(f"nvidia-pytriton {version} ships no Python-backend stub for Python "
                                     f"{sys.version_info[0]}.{sys.version_info[1]} ({stub} is missing)")


def _stub_library_path() -> Optional[str]:
    """The folder holding this interpreter's own libpython3.X.so.1.0, or None for a static build
    (then the stub takes whatever libpython the system has; see the module docstring)."""
    soname = sysconfig.get_config_var("INSTSONAME") or sysconfig.get_config_var("LDLIBRARY")
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") or not soname:
        return None
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    for folder in (libdir, os.path.join(libdir, sysconfig.get_config_var("MULTIARCH") or "")):
        if folder and os.path.isfile(os.path.join(folder, soname)):
            return folder
    return None


@contextlib.contextmanager
def _stub_environment() -> Iterator[None]:
    """LD_LIBRARY_PATH for tritonserver (PyTriton copies os.environ when it starts the server; the
    stubs inherit the server's), restored afterwards so this process is left as it was."""
    folder = _stub_library_path()
    if folder is None:
        LOG.warning("this Python has no shared libpython; Triton's stub uses the system's, which must be "
                    "the same patch release as %s", sys.version.split()[0])
        yield
        return
    old = os.environ.get("LD_LIBRARY_PATH")
    os.environ["LD_LIBRARY_PATH"] = folder + (os.pathsep + old if old else "")
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = old


def _tensors(infos: dict[str, protocol.TensorInfo], batched: bool) -> list:
    from pytriton.model_config import Tensor
    out = []
    for t in infos.values():
        if t.dtype in _UNSUPPORTED:
            raise ServingError(f"tensor '{t.name}' is {t.dtype}: the Triton engine cannot serve it "
                               f"({_UNSUPPORTED[t.dtype]}); use the Ray engine")
        shape = t.v2_shape[1:] if batched else t.v2_shape
        out.append(Tensor(name=t.name, dtype=t.dtype.np.type, shape=tuple(shape)))
    return out


@dataclasses.dataclass
class TritonServer:
    """A running Triton (from `start`); `stop` ends tritonserver and its stubs, then the model."""
    url: str
    grpc_url: str
    name: str
    policy: batching.BatchPolicy
    _triton: object
    _model: object

    def is_alive(self) -> bool:
        return bool(self._triton.is_alive())

    def stop(self) -> None:
        try:
            self._triton.stop()
        finally:
            self._model.close()


def start(workdir: str, *, http_port: int = 8000, grpc_port: Optional[int] = None, name: Optional[str] = None,
          max_batch: int = 8, instances: int = 1, batch_wait_ms: float = 0.0,
          metrics_port: Optional[int] = None) -> TritonServer:
    """Serve `workdir` as `name` on 127.0.0.1 (HTTP http_port, gRPC grpc_port, default http_port+1;
    metrics only where metrics_port is given) and return once the model is loaded."""
    check_environment()
    if not isinstance(instances, int) or instances < 1:
        raise ServingError(f"instances must be an int >= 1, got {instances!r}")
    from pytriton.decorators import batch
    from pytriton.model_config import DynamicBatcher, ModelConfig
    from pytriton.triton import Triton, TritonConfig

    from ..runtime.model import Model

    path = artifacts.resolve_workdir(workdir)
    model = Model.load(path, num_runtimes=instances)   # one runtime per Triton model instance
    try:
        sig = protocol.ModelSignature.from_meta(model.meta, name)
        pol = batching.policy(sig, max_batch)
        inputs, outputs = _tensors(sig.inputs, pol.batchable), _tensors(sig.outputs, pol.batchable)

        @batch
        def infer(**feeds: np.ndarray) -> dict[str, np.ndarray]:
            # Triton checked datatypes and the declared dims; the bounds of dims it knows as -1 are
            # model.run's to check, and its RuntimeInputError becomes this request's error answer.
            return model.run(feeds)

        if pol.batchable:
            config = ModelConfig(max_batch_size=pol.max_rows,
                                 batcher=DynamicBatcher(max_queue_delay_microseconds=int(batch_wait_ms * 1000)))
        else:
            config = ModelConfig(batching=False)
        grpc_port = http_port + 1 if grpc_port is None else grpc_port
        cfg = TritonConfig(http_address="127.0.0.1", http_port=http_port, grpc_address="127.0.0.1",
                           grpc_port=grpc_port, allow_metrics=metrics_port is not None,
                           metrics_address="127.0.0.1" if metrics_port is not None else None,
                           metrics_port=metrics_port, exit_timeout_secs=5)
        triton = Triton(config=cfg)
        try:
            triton.bind(model_name=sig.name, infer_func=[infer] * instances, inputs=inputs, outputs=outputs,
                        config=config, strict=False)
            with _stub_environment():
                triton.run()   # starts tritonserver and waits until the model is loaded
        except BaseException:
            triton.stop()
            raise
    except BaseException:
        model.close()
        raise
    return TritonServer(f"http://127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", sig.name, pol, triton, model)


def serve_until(server: TritonServer, stop: threading.Event, poll_s: float = 0.5) -> int:
    """Block until `stop` is set (0) or tritonserver dies (1)."""
    while not stop.wait(poll_s):
        if not server.is_alive():
            return 1
    return 0
