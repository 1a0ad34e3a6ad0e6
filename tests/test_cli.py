"""The `aitgen` command line: --help, inspect on a user's module.py:function, compile (a module or a
zoo model with --config), run on .npy files, bench on random inputs, and the errors each reports."""
import subprocess
import sys
import textwrap

import pytest

from aitgen.cli import main


def test_help_lists_inspect():
    out = subprocess.run([sys.executable, "-m", "aitgen", "--help"], capture_output=True, text=True, check=True)
    assert "inspect" in out.stdout


def test_inspect_prints_graph_after_pipeline_with_counts(tmp_path, capsys):
    mod = tmp_path / "mymodel.py"
    mod.write_text(textwrap.dedent("""
        import numpy as np
        import aitgen as ag
        from aitgen import ops

        def build():
            x = ag.Tensor([ag.IntVar("n", 1, 8), 4], name="x")
            w = ag.constant(np.ones(4, np.float32), name="w")
            dead = ops.exp(x)                     # unused: removed by the pipeline
            y = ops.relu(x * w + 0.0)             # x * ones and + 0 are no-ops
            return {"y": y}
    """))
    assert main(["inspect", f"{mod}:build"]) == 0
    out = capsys.readouterr().out
    assert "graph model(" in out and "return {y:" in out
    assert "# ops before passes: 3, after: 1" in out  # only the relu survives
    assert "relu" in out and "exp" not in out.split("# ops before")[0]


def test_inspect_prints_the_models_flops(capsys):
    # ResNet-50 at the benchmark's small config: 733,696 multiply-adds (tests/analysis/test_flops.py
    # checks the count against torch's counter), the same before and after the passes.
    small = ["--config", "layers=1,1,1,1", "--config", "width=8", "--config", "image_size=32",
             "--config", "num_classes=10"]
    assert main(["inspect", "zoo:resnet50", "--summary"] + small) == 0
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("# work:"))
    assert line.startswith("# work: 1.467 MFLOPs (2 per multiply-add of conv2d, gemm); other ops write 26,752 "
                           "elements before passes, 768 after"), line
    assert main(["inspect", "zoo:gpt2", "--summary", "--config", "seq=1:32", "--config", "layers=1",
                 "--config", "hidden=32", "--config", "heads=2", "--config", "vocab=100",
                 "--config", "max_position=32"]) == 0
    assert "at the upper bounds seq=32" in capsys.readouterr().out


def test_inspect_reports_a_bad_target(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "aitgen", "inspect", f"{tmp_path}/missing.py:f"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "no such file" in proc.stderr


# -- compile | run | bench ------------------------------------------------------------------------

_MODEL = """
import numpy as np
import aitgen as ag
from aitgen import ops

def build():
    n = ag.IntVar("n", 1, 8)
    x = ag.Tensor([n, 4], name="x")
    ids = ag.Tensor([n, 4], dtype="int32", name="ids")
    w = ag.constant(np.arange(4, dtype=np.float32), name="w")
    return {"y": ops.relu(x * w + 1.0), "i2": ids * 2}
"""


def _load_build(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("_cli_test_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build()


def test_compile_run_bench(tmp_path, capsys):
    import numpy as np

    import aitgen as ag

    mod = tmp_path / "mlp.py"
    mod.write_text(_MODEL)
    work = tmp_path / "build"
    assert main(["compile", f"{mod}:build", "--target", "cpu", "--workdir", str(work), "--no-fusion"]) == 0
    out = capsys.readouterr().out
    assert "kernel calls" in out and "input  x: float32 max shape [8, 4]" in out and "output i2: int32" in out
    assert (work / "model.json").exists() and (work / "report.json").exists()

    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    ids = np.arange(12, dtype=np.int32).reshape(3, 4)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ids.npy", ids)
    res = tmp_path / "res"
    assert main(["run", str(work), "--input", f"x={tmp_path / 'x.npy'}", "--input", f"ids={tmp_path / 'ids.npy'}",
                 "--out", str(res)]) == 0
    out = capsys.readouterr().out
    assert "y: float32 [3, 4]" in out and "i2: int32 [3, 4]" in out
    ref = ag.reference.run(_load_build(mod), {"x": x, "ids": ids})
    np.testing.assert_allclose(np.load(res / "y.npy"), ref["y"], rtol=1e-6)
    np.testing.assert_array_equal(np.load(res / "i2.npy"), ref["i2"])

    assert main(["bench", str(work), "--iters", "3"]) == 0
    out = capsys.readouterr().out
    assert "median" in out and "ms" in out and "x [8, 4]" in out and "ids [8, 4]" in out


def test_run_reports_bad_input_and_missing_model(tmp_path, capsys):
    import numpy as np

    mod = tmp_path / "m.py"
    mod.write_text(_MODEL)
    work = tmp_path / "build"
    assert main(["compile", f"{mod}:build", "--target", "cpu", "--workdir", str(work)]) == 0
    np.save(tmp_path / "x.npy", np.zeros((9, 4), np.float32))   # n is at most 8
    np.save(tmp_path / "ids.npy", np.zeros((9, 4), np.int32))
    capsys.readouterr()
    rc = main(["run", str(work), "--input", f"x={tmp_path / 'x.npy'}", "--input", f"ids={tmp_path / 'ids.npy'}"])
    assert rc == 2 and "RuntimeInputError" in capsys.readouterr().err
    assert main(["run", str(work), "--input", f"x={tmp_path / 'x.npy'}"]) == 2   # ids missing
    assert "missing input 'ids'" in capsys.readouterr().err
    assert main(["bench", str(tmp_path / "nowhere")]) == 2
    assert "no built model" in capsys.readouterr().err
    proc = subprocess.run([sys.executable, "-m", "aitgen", "run", str(work), "--input", "x"],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "NAME=FILE.npy" in proc.stderr


def test_compile_zoo_model_with_config_and_run(tmp_path, capsys):
    import numpy as np

    import aitgen as ag

    config = dict(layers=1, hidden=32, heads=2, intermediate=64, vocab=100, max_position=16)
    work = tmp_path / "bert"
    argv = ["compile", "zoo:bert_base", "--target", "cpu", "--workdir", str(work), "--config", "seq=1..16"]
    argv += [a for k, v in config.items() for a in ("--config", f"{k}={v}")]
    assert main(argv) == 0
    assert "input  input_ids: int64 max shape [1, 16]" in capsys.readouterr().out

    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 100, (1, 5)), "token_type_ids": np.zeros((1, 5), np.int64),
             "attention_mask": np.ones((1, 5), np.int64)}
    for k, v in feeds.items():
        np.save(tmp_path / f"{k}.npy", v.astype(np.int64))
    assert main(["run", str(work), "--out", str(tmp_path / "res")]
                + [a for k in feeds for a in ("--input", f"{k}={tmp_path / f'{k}.npy'}")]) == 0
    assert "last_hidden_state: float32 [1, 5, 32]" in capsys.readouterr().out
    _, outputs = ag.models.get("bert_base", seq=ag.IntVar("seq", 1, 16), **config)
    ref = ag.reference.run(outputs, {k: v.astype(np.int64) for k, v in feeds.items()})
    for name in ref:   # GEMM accumulation order differs from numpy's
        np.testing.assert_allclose(np.load(tmp_path / "res" / f"{name}.npy"), ref[name], rtol=1e-4, atol=1e-4)

    assert main(["bench", str(work), "--iters", "2"]) == 0   # token types and mask stay valid
    assert "median" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="nope"):
        main(["compile", "zoo:bert_base", "--workdir", str(work), "--config", "nope=1"])


def test_parse_config():
    from aitgen.cli import parse_config, parse_dims
    from aitgen.errors import UsageError

    cfg = parse_config(["layers=(1, 1, 1, 1)", "width=0.25", "dtype=float16", "seq=2..64", "n=3"])
    assert cfg["layers"] == (1, 1, 1, 1) and cfg["width"] == 0.25 and cfg["dtype"] == "float16" and cfg["n"] == 3
    assert (cfg["seq"].name, cfg["seq"].lb, cfg["seq"].ub) == ("seq", 2, 64)
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_config(["no_equals"])
    # One syntax for a dynamic dim in --config and --dim: NAME=LB:UB (LB..UB stays accepted).
    assert (parse_config(["seq=1:32"])["seq"].lb, parse_config(["seq=1:32"])["seq"].ub) == (1, 32)
    assert parse_dims(["batch=1:8", "seq = 2..16"]) == {"batch": (1, 8), "seq": (2, 16)}


# -- every user error is one typed line on stderr, with the fix ------------------------------------

def _status(argv) -> int:
    """main's exit status: returned, or (usage errors, like argparse's) raised as SystemExit."""
    try:
        return main(argv)
    except SystemExit as e:
        return e.code


def _error_line(argv, capsys, *words, status=2) -> str:
    assert _status(argv) == status
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


def test_unknown_and_unbuilt_targets_list_the_targets(tmp_path, capsys, monkeypatch):
    from aitgen._paths import backends_dir
    from aitgen.cli import targets

    ready, planned = targets.targets()
    assert {"cpu", "cuda"} <= set(ready) and all((backends_dir() / t / "backend.yaml").is_file() for t in ready)
    line = _error_line(["compile", "zoo:bert_base", "--target", "tpu", "--workdir", str(tmp_path / "w")], capsys,
                       "aitgen: UsageError: ", "unknown target 'tpu'", "auto, cpu, cuda")
    assert "not built yet" in line or not planned
    # A folder under backends/ without backend.yaml is a target that is not built yet (as rocm was).
    monkeypatch.setattr(targets, "targets", lambda: (ready, ["vulkan"]))
    _error_line(["compile", "zoo:bert_base", "--target", "vulkan", "--workdir", str(tmp_path / "w")], capsys,
                "UsageError", "target 'vulkan' is not built yet", "auto, cpu, cuda")
    monkeypatch.undo()
    # --help lists only what exists, and says what does not yet.
    with pytest.raises(SystemExit) as e:
        main(["compile", "--help"])
    assert e.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    assert "auto, " + ", ".join(ready) in help_text
    assert all(f"{t}: not built yet" in help_text or f"{t}," in help_text for t in planned)


def test_unknown_arch_lists_the_archs(tmp_path, capsys):
    work = str(tmp_path / "w")
    _error_line(["compile", "zoo:bert_base", "--target", "cuda", "--arch", "sm_75", "--workdir", work], capsys,
                "UsageError", "unknown arch 'sm_75'", "sm_80, sm_90a", "sm_90 = sm_90a")
    _error_line(["compile", "zoo:bert_base", "--target", "cpu", "--arch", "sm_80", "--workdir", work], capsys,
                "UsageError", "takes no --arch", "--target cuda")


def test_system_paths_as_workdir_or_out(tmp_path, capsys):
    _error_line(["compile", "zoo:bert_base", "--target", "cpu", "--workdir", "/proc/nope"], capsys,
                "aitgen: WorkdirError: ", "/proc")
    _error_line(["run", str(tmp_path / "nowhere"), "--out", "/proc/nope"], capsys,
                "aitgen: OutputDirError: ", "/proc/nope", "elsewhere")
    a_file = tmp_path / "f"
    a_file.write_text("")
    _error_line(["run", str(tmp_path / "nowhere"), "--out", str(a_file)], capsys, "OutputDirError", "is a file")


def test_missing_model_files_are_named(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["compile", "missing.onnx", "--workdir", "d"], ["inspect", "missing.onnx"]):
        _error_line(argv, capsys, "aitgen: UsageError: no such file: missing.onnx")
    _error_line(["compile", "missing.py:build", "--workdir", "d"], capsys, "UsageError", "no such file: missing.py")
    _error_line(["inspect", "build/nope"], capsys, "no such file or folder: build/nope", "zoo:NAME")
    (tmp_path / "m.py").write_text("def other():\n    pass\n")
    _error_line(["inspect", "m.py:build"], capsys, "m.py has no function 'build'", "it defines: other")
    _error_line(["inspect", "zoo:bert"], capsys, "unknown zoo model 'bert'", "bert_base")


def test_config_and_dim_share_one_dim_syntax_and_check_values(capsys):
    small = ["--config", "layers=1", "--config", "hidden=32", "--config", "heads=2", "--config", "intermediate=64",
             "--config", "vocab=100", "--config", "max_position=32"]
    assert main(["inspect", "zoo:bert_base", "--summary", "--config", "seq=1:32"] + small) == 0
    assert "# ops before passes" in capsys.readouterr().out
    _error_line(["inspect", "zoo:bert_base", "--config", "layers=one"], capsys,
                "UsageError", "--config layers='one'", "wants an int")
    _error_line(["inspect", "zoo:bert_base", "--config", "seq=abc"], capsys, "seq", "an int or a dynamic dim LB:UB")
    _error_line(["inspect", "zoo:bert_base", "--config", "sequence=8"], capsys,
                "zoo:bert_base has no setting 'sequence'", "seq=128")
    _error_line(["inspect", "zoo:bert_base", "--config", "seq=32:1"], capsys, "above the upper bound", "seq=1:32")
    _error_line(["inspect", "zoo:bert_base", "--config", "seq=0:32"], capsys, "at least 1")
    _error_line(["inspect", "zoo:bert_base", "--config", "seq=1:64"] + small, capsys,
                "UsageError", "zoo:bert_base", "max_position")   # a value the zoo itself refuses


def _onnx_model(path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq"])
    m = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    onnx.save(m, str(path))
    return m


def test_dim_names_and_bounds_are_checked(tmp_path, capsys):
    from aitgen.errors import UnknownDimError
    from aitgen.frontend import onnx as agonnx

    path = tmp_path / "m.onnx"
    m = _onnx_model(path)
    work = str(tmp_path / "w")
    _error_line(["compile", str(path), "--target", "cpu", "--workdir", work, "--dim", "btach=1:8"], capsys,
                "UsageError", "--dim btach", "has no such dim", "batch, seq")
    _error_line(["compile", str(path), "--workdir", work, "--dim", "batch=8:1"], capsys, "above the upper bound")
    _error_line(["compile", str(path), "--workdir", work, "--dim", "batch=0:8"], capsys, "at least 1")
    _error_line(["compile", str(path), "--workdir", work, "--dim", "batch=1-8"], capsys, "NAME=LB:UB")
    _error_line(["compile", "zoo:bert_base", "--workdir", work, "--dim", "batch=1:8"], capsys,
                "--dim applies to .onnx models only", "--config")
    # The loader refuses the name too, for Python callers.
    with pytest.raises(UnknownDimError, match="btach") as e:
        agonnx.load(m, dim_bounds={"btach": (1, 8)})
    assert e.value.unknown == ["btach"] and e.value.known == ["batch", "seq"]
    _, outs = agonnx.load(m, dim_bounds={"batch": (1, 8)})
    assert [str(d) for d in outs["y"].shape] == ["batch", "seq"] and outs["y"].shape[0].upper == 8


def test_version():
    from importlib.metadata import version

    out = subprocess.run([sys.executable, "-m", "aitgen", "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"aitgen {version('aitgen')}" and out.stderr == ""


_BIG = """
import aitgen as ag
from aitgen import ops

def build():
    y = ag.Tensor([4, 4], name="x")
    for i in range(1500):
        y = ops.tanh(y) if i % 2 else ops.exp(y)
    return {"y": y}
"""


def test_closed_stdout_is_quiet(tmp_path, capsys, monkeypatch):
    mod = tmp_path / "big.py"
    mod.write_text(_BIG)
    # In process: stdout raising EPIPE -> 141, nothing on stderr.
    class Closed:
        def write(self, s):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", Closed())
    assert main(["inspect", f"{mod}:build", "--no-fusion"]) == 141
    monkeypatch.undo()
    assert capsys.readouterr().err == ""
    # `aitgen inspect ... | head -1`: far more text than a pipe holds, the reader gone after one line.
    proc = subprocess.Popen([sys.executable, "-m", "aitgen", "inspect", f"{mod}:build", "--no-fusion"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().startswith("graph model(")
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=300) == 141 and err == "", err


def test_other_errors_are_one_typed_line(tmp_path, capsys, monkeypatch):
    from aitgen.cli.app import error_line
    from aitgen.errors import BuildError, PassError

    mod = tmp_path / "m.py"
    mod.write_text("import aitgen as ag\nfrom aitgen import ops\n\n"
                   "def shape():\n    return {'y': ops.matmul(ag.Tensor([2, 3]), ag.Tensor([4, 5]))}\n\n"
                   "def bug():\n    return 1 / 0\n\n"
                   "def stop():\n    raise KeyboardInterrupt\n")
    _error_line(["inspect", f"{mod}:shape"], capsys, "aitgen: ShapeError: ")
    line = _error_line(["inspect", f"{mod}:bug"], capsys, "aitgen: ZeroDivisionError: division by zero",
                       "AITGEN_DEBUG=1", status=1)
    assert "unexpected" in line
    assert main(["inspect", f"{mod}:stop"]) == 130
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("AITGEN_DEBUG", "1")   # the traceback, for a bug report
    with pytest.raises(ZeroDivisionError):
        main(["inspect", f"{mod}:bug"])
    # Multi-line messages: the first line, and where the rest is.
    assert error_line(PassError("fuse failed\n  passes before: a, b")) == (
        "aitgen: PassError: fuse failed (+1 line: AITGEN_DEBUG=1 shows them)")
    err = BuildError("compiling source 'k.cpp' failed (exit 1)\n  command (in /w):\n    g++ -c k.cpp\n"
                     "  k.cpp:3:1: error: 'x' was not declared")
    err.output = ["In file included from k.cpp:1:", "k.cpp:3:1: error: 'x' was not declared"]
    assert error_line(err) == ("aitgen: BuildError: compiling source 'k.cpp' failed (exit 1): k.cpp:3:1: error: "
                               "'x' was not declared (AITGEN_DEBUG=1 shows the command and the compiler's output)")


# -- progress, bench figures, output names, stale drawings ----------------------------------------

def test_build_progress_in_a_log_is_plain_lines():
    import io

    from aitgen.codegen import build as B

    log = io.StringIO()
    p = B._LogProgress(total=10, cached=4, name="model_x.so", stream=log, interval=0.0)
    for i in range(1, 7):
        p.update(i)
    p.close()
    lines = log.getvalue().splitlines()
    assert lines[0].startswith("build model_x.so: 4/10 objects (4 cached, 0 compiled), ")
    assert lines[-1].startswith("build model_x.so: 10/10 objects (4 cached, 6 compiled), ") and lines[-1].endswith(" s")
    assert "\r" not in log.getvalue()
    assert len(lines) == len(set(lines)), lines   # the closing line does not repeat the last one
    quiet = io.StringIO()
    p = B._LogProgress(total=10, cached=0, name="m", stream=quiet, interval=3600.0)
    for i in range(1, 11):
        p.update(i)
    p.close(ok=False)   # at most one line per interval; a failed build ends with its error instead
    assert len(quiet.getvalue().splitlines()) == 1


_OUTPUTS = """
import numpy as np
import aitgen as ag
from aitgen import ops

def build():
    x = ag.Tensor([ag.IntVar("n", 1, 8), 4], name="x")
    w = ag.constant(np.arange(4, dtype=np.float32), name="w")
    return {"a/b": ops.relu(x * w + 1.0), "a_b": x * 2.0}
"""


@pytest.fixture(scope="module")
def outputs_build(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("outputs")
    (tmp / "m.py").write_text(_OUTPUTS)
    assert main(["compile", f"{tmp / 'm.py'}:build", "--target", "cpu", "--workdir", str(tmp / "build")]) == 0
    return tmp


def test_compile_prints_progress_lines_in_a_log(outputs_build, capsys):
    # stderr is not a terminal here: the build reports in plain lines (a bar on a terminal).
    tmp = outputs_build
    assert main(["compile", f"{tmp / 'm.py'}:build", "--target", "cpu", "--workdir", str(tmp / "build")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err and err[-1].startswith("build model_") and " objects (" in err[-1], err


def test_run_out_gives_colliding_names_their_own_files(outputs_build, capsys):
    import numpy as np

    from aitgen.cli import output_files

    tmp = outputs_build
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp / "x.npy", x)
    assert main(["run", str(tmp / "build"), "--input", f"x={tmp / 'x.npy'}", "--out", str(tmp / "res")]) == 0
    out = capsys.readouterr().out
    files = output_files(["a/b", "a_b"])
    assert files["a_b"] == "a_b.npy" and files["a/b"] != "a_b.npy" and files["a/b"].startswith("a_b_")
    assert "a/b: float32 [3, 4]" in out and f"-> {tmp / 'res' / files['a/b']}" in out
    np.testing.assert_array_equal(np.load(tmp / "res" / files["a_b"]), x * 2)
    np.testing.assert_array_equal(np.load(tmp / "res" / files["a/b"]), np.maximum(x * np.arange(4) + 1, 0))
    assert output_files(["a_b", "a/b"]) == files                    # not a matter of order
    assert output_files(["a:b", "a/b"])["a:b"] != output_files(["a:b", "a/b"])["a/b"]
    assert output_files([".."]) == {"..": "__.npy"}


def test_bench_reports_spread_throughput_and_json(outputs_build, capsys):
    import json

    from aitgen.runtime.model import Model

    tmp = outputs_build
    with Model.load(tmp / "build") as m:
        stats = m.benchmark({"x": __import__("numpy").ones((2, 4), "float32")}, iters=5, warmup=1)
    assert {"median_ms", "mean_ms", "min_ms", "iters", "p90_ms", "p99_ms", "max_ms", "stdev_ms"} <= set(stats)
    assert stats["min_ms"] <= stats["median_ms"] <= stats["p90_ms"] <= stats["p99_ms"] <= stats["max_ms"]

    assert main(["bench", str(tmp / "build"), "--iters", "5", "--json", str(tmp / "b.json")]) == 0
    out = capsys.readouterr().out
    for word in ("median (p50)", "p90", "p99", "min", "max", "mean", "stdev", "inferences/s (batch 8)"):
        assert word in out, out
    rec = json.loads((tmp / "b.json").read_text())
    assert rec["batch"] == 8 and rec["inputs"] == {"x": {"shape": [8, 4], "dtype": "float32"}}  # n runs at 8
    assert rec["throughput_per_s"] == pytest.approx(8 * 1000 / rec["mean_ms"])
    assert {"p90_ms", "p99_ms", "max_ms", "stdev_ms", "min_ms", "median_ms"} <= set(rec)
    assert rec["cpu"]["machine"] and isinstance(rec["cpu"]["flags"], list)

    assert main(["bench", str(tmp / "build"), "--iters", "3", "--batch", "2", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)   # --json alone: nothing but the JSON on stdout
    assert rec["batch"] == 2 and rec["iters"] == 3
    _error_line(["bench", str(tmp / "build"), "--iters", "0"], capsys, "--iters must be at least 1")


def test_rebuild_removes_drawings_and_libraries_of_the_previous_build(tmp_path, capsys):
    mod = tmp_path / "m.py"
    mod.write_text(_MODEL)
    work = tmp_path / "build"
    argv = ["compile", f"{mod}:build", "--target", "cpu", "--workdir", str(work)]
    assert main(argv) == 0
    old_lib = work / "model_0123456789abcdef.so"
    for stale in (work / "graph.html", work / "memory.png", old_lib):
        stale.write_text("from an earlier build")
    keep = work / "model_notours.so"
    keep.write_text("")
    assert main(argv) == 0
    assert not (work / "graph.html").exists() and not (work / "memory.png").exists() and not old_lib.exists()
    assert keep.exists() and len(list(work.glob("model_????????????????.so"))) == 1
