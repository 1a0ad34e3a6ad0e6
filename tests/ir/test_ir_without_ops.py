"""The IR loads and works without aitgen.ops (ops builds on ir, never the reverse): Tensor's
operators and the op table reach ops only through what ops hands over when it is imported."""
from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

AITGEN = pathlib.Path(__file__).resolve().parents[2] / "aitgen"


def _run(code: str) -> str:
    # aitgen/__init__ imports everything, ops included: stand in for it with a bare package so the
    # child imports aitgen.ir and nothing it does not ask for.
    prelude = textwrap.dedent(f"""
        import sys, types
        pkg = types.ModuleType("aitgen")
        pkg.__path__ = [{str(AITGEN)!r}]
        sys.modules["aitgen"] = pkg
    """)
    r = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_ir_alone_does_not_load_ops():
    out = _run("""
        import sys
        import aitgen.ir as ir
        x = ir.Tensor([2, 3], name="x")
        try:
            x + x
        except TypeError as e:
            print("refused:", e)
        print(sorted(m for m in sys.modules if m.startswith("aitgen.ops")))
    """)
    assert "refused:" in out and "aitgen.ops" in out.splitlines()[0]
    assert out.splitlines()[-1] == "[]"


def test_importing_ops_installs_tensor_operators_and_the_op_table():
    out = _run("""
        import aitgen.ir as ir
        import aitgen.ops  # noqa: F401
        x = ir.Tensor([2, 3], name="x")
        y = (x + x).reshape(3, 2)
        g = ir.Graph.from_outputs({"y": y})
        ir.verify(g)
        print([op.kind.value for op in g.ops], y.producer.opdef.category.value)
    """)
    assert out.strip() == "['add', 'reshape'] view"
