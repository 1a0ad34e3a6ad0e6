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
    from aitgen.cli import parse_config

    cfg = parse_config(["layers=(1, 1, 1, 1)", "width=0.25", "dtype=float16", "seq=2..64", "n=3"])
    assert cfg["layers"] == (1, 1, 1, 1) and cfg["width"] == 0.25 and cfg["dtype"] == "float16" and cfg["n"] == 3
    assert (cfg["seq"].name, cfg["seq"].lb, cfg["seq"].ub) == ("seq", 2, 64)
    with pytest.raises(SystemExit):
        parse_config(["no_equals"])
