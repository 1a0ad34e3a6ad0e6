"""The `aitgen` command line: --help, and inspect on a user's module.py:function."""
import subprocess
import sys
import textwrap

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
