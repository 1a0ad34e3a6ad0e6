"""User names never become code: every name reaches generated C++ through one escaping function
(codegen/cstring.py), as a "%s" argument, never a format; a NUL (or a non-str) is refused when the
name is given; and any other Unicode name works end to end under the user's spelling.

The end-to-end tests carry a command-injection payload (it runs `touch CANARY` if pasted raw into
model.cpp) as an IntVar name, an input name, an op name and, with a comment break-out, the model
name; the canary must not exist after compile, run and failing runs. Numbers are compared with
the oracle at rtol 1e-6 / atol 1e-6 (float32, the same element-wise math on both sides)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import aitgen as ag
from aitgen import ops
from aitgen.codegen.cstring import c_string_literal
from aitgen.codegen.render import environment
from aitgen.errors import AitgenError, GraphError, InvalidNameError, RuntimeInputError

TOL = dict(rtol=1e-6, atol=1e-6)

# Everything a C literal or comment could trip on, and names a user could well pick.
HOSTILE = ['q"uote', "back\\slash", "trail\\", "new\nline", "cr\rreturn", "tab\t", "%n%s%x%d%%",
           "*/ /* //", "??=??/??'??(", "emoji😀🚀", "汉字名", "../../etc/passwd", "/abs/path", "C:\\x\\y",
           "\u202e\u00e9\u0301", "\x7f\x01\x1f", "é1234", "\\x41", "", " ", "int", "a" * 300]


def injection(canary) -> str:
    """Closes the snprintf literal and call, runs a command, and reopens a call, if pasted raw."""
    return f'b", 0); }} popen("touch {canary}", "r"); if (0) {{ std::snprintf(err, errlen, "'


def comment_breakout(canary) -> str:
    """Ends a // comment (a newline; a CR; a trailing backslash splices the next line) and adds a
    static constructor that runs a command, if pasted raw."""
    return f'm\n#include <cstdlib>\nstatic int k = std::system("touch {canary}");\r//\\'


# -- the escaping function ---------------------------------------------------------------------

def decode_c_literal(lit: str) -> bytes:
    """The bytes a C compiler makes of `lit`, for the escapes c_string_literal may write; any other
    construct (an unescaped quote, a non-printable char, another escape) fails the test."""
    assert len(lit) >= 2 and lit[0] == '"' and lit[-1] == '"', lit
    out, i = bytearray(), 1
    while i < len(lit) - 1:
        c = lit[i]
        assert 0x20 <= ord(c) < 0x7F and c != '"', f"raw {c!r} in {lit!r}"
        if c == "\\":
            nxt = lit[i + 1]
            if nxt in '"\\?':
                out.append(ord(nxt))
                i += 2
            else:
                digits = lit[i + 1:i + 4]
                assert len(digits) == 3 and all(d in "01234567" for d in digits), f"escape {lit[i:i + 4]!r}"
                out.append(int(digits, 8))
                i += 4
        else:
            assert c != "?" or lit[i - 1] == "\\", "an unescaped ? could start a trigraph"
            out.append(ord(c))
            i += 1
    return bytes(out)


@pytest.mark.parametrize("s", HOSTILE)
def test_literal_decodes_to_the_utf8_bytes(s):
    assert decode_c_literal(c_string_literal(s)) == s.encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\0")))
def test_literal_round_trips_any_text(s):
    assert decode_c_literal(c_string_literal(s)) == s.encode("utf-8")


@pytest.mark.parametrize("bad", ["a\x00b", "\x00", "lone\ud83d", b"bytes", 7, None])
def test_literal_refuses_nul_surrogates_and_non_str(bad):
    with pytest.raises(InvalidNameError):
        c_string_literal(bad)


def test_templates_have_the_filter():
    assert environment().from_string("x = {{ s | cstr }};").render(s='a"b\n') == 'x = "a\\"b\\012";'


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_gxx_reads_every_literal_back_and_no_comment_breaks_out(tmp_path):
    canary = tmp_path / "CANARY"
    texts = HOSTILE + [injection(canary), comment_breakout(canary), "".join(map(chr, range(1, 256))),
                       "".join(chr(c) for c in range(0x80, 0x3000, 7))]
    lits = [c_string_literal(s) for s in texts]
    # Each literal also sits in a // comment followed by a counted line: a literal that ended the
    # comment early, or spliced the next line into it, changes the count or the program.
    body = "".join(f"  // {lit}\n  ++lines;\n" for lit in lits)
    table = ",\n".join(f"    {lit}" for lit in lits)
    src = tmp_path / "lits.cpp"
    src.write_text(f"""#include <cstdio>
#include <cstring>
static const char* const kTexts[] = {{
{table}
}};
int main() {{
  int lines = 0;
{body}  for (const char* s : kTexts) {{ std::fwrite(s, 1, std::strlen(s), stdout); std::fputc(0, stdout); }}
  std::printf("%d", lines);
  return 0;
}}
""")
    exe = tmp_path / "lits"
    # -trigraphs: a '??=' left unescaped would turn into '#' here.
    subprocess.run(["g++", "-std=c++17", "-trigraphs", "-Wall", "-Werror", str(src), "-o", str(exe)],
                   check=True, capture_output=True, timeout=120)
    out = subprocess.run([str(exe)], check=True, capture_output=True, timeout=60).stdout
    want = b"".join(s.encode("utf-8") + b"\0" for s in texts) + str(len(texts)).encode()
    assert out == want
    assert not canary.exists()


# -- names refused when they are given ---------------------------------------------------------

@pytest.mark.parametrize("bad", ["a\x00one", "\x00", "lone\ud800", 3, b"x"])
def test_tensor_name_refused(bad):
    with pytest.raises(InvalidNameError, match="tensor name"):
        ag.Tensor([2], name=bad)
    t = ag.Tensor([2], name="ok")
    with pytest.raises(InvalidNameError, match="tensor name"):
        t.name = bad  # passes and importers rename: checked on every assignment
    assert t.name == "ok"


@pytest.mark.parametrize("bad", ["b\x00", 3, None, ("b",)])
def test_intvar_name_refused(bad):
    with pytest.raises(InvalidNameError, match="IntVar name"):
        ag.IntVar(bad, 1, 4)


def test_nul_inputs_no_longer_collapse():
    ag.Tensor([2], name="a one")
    with pytest.raises(InvalidNameError, match="NUL"):
        ag.Tensor([2], name="a\x00one")
    with pytest.raises(InvalidNameError, match="NUL"):
        ag.Tensor([2], name="a\x00two")


def test_two_inputs_under_one_name_are_refused(tmp_path):
    # Not only NUL collapses names: two distinct inputs both named "x" reached the model as one
    # input, which then read a pointer it was never given (a segfault on the first run).
    a, b = ag.Tensor([2], name="x"), ag.Tensor([2], name="x")
    with pytest.raises(GraphError, match="two graph inputs are named 'x'"):
        ag.compile_model({"y": a - b}, target="cpu", workdir=tmp_path / "m", load=False)


@pytest.mark.parametrize("key", ["y\x00a", 1, None])
def test_output_key_refused(key, tmp_path):
    x = ag.Tensor([2], name="x")
    outs = {key: ops.relu(x), "z": ops.tanh(x)}
    with pytest.raises(InvalidNameError, match="output name"):
        ag.Graph.from_outputs(outs)
    with pytest.raises(InvalidNameError, match="output name"):
        ag.reference.run(outs, {"x": np.ones(2, np.float32)})
    with pytest.raises(InvalidNameError, match="output name"):
        ag.compile_model(outs, target="cpu", workdir=tmp_path / "m", load=False)
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("name", ["m\x00", 5])
def test_model_name_refused(name, tmp_path):
    x = ag.Tensor([2], name="x")
    with pytest.raises(InvalidNameError, match="model name"):
        ag.compile_model({"y": ops.relu(x)}, target="cpu", workdir=tmp_path / "m", name=name, load=False)
    assert not (tmp_path / "m").exists()


# -- hostile names end to end --------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile_build(tmp_path_factory):
    root = tmp_path_factory.mktemp("names")
    canary = root / "CANARY"
    payload = injection(canary)
    n = ag.IntVar(payload, 1, 4)
    names = {"x": 'x😀汉字 "q" \\ %n%s%x\n\r*/??=../a/b\\', "y": payload, "z": "trail\\"}
    x = ag.Tensor([n, 3], name=names["x"])
    y = ag.Tensor([n, 3], name=names["y"])    # the same IntVar again: the "same" check
    z = ag.Tensor([n * 2], name=names["z"])   # a derived dim: checked once n is bound
    idx = ag.constant(np.array([1, 0], np.int32), name=payload + "\x7f")
    outs = {"out %n\n😀": ops.relu(x, name=payload) * 2.0 + y,
            "汉字/../..": ops.gather(ops.tanh(z), idx, name=comment_breakout(canary)),
            payload: x}                        # an input returned as an output: a copy kernel
    model = ag.compile_model(outs, target="cpu", workdir=root / "m", name=payload + comment_breakout(canary))
    yield model, outs, names, payload, canary
    model.close()


def _feeds(names, b: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {names["x"]: rng.standard_normal((b, 3)).astype(np.float32),
            names["y"]: rng.standard_normal((b, 3)).astype(np.float32),
            names["z"]: rng.standard_normal(2 * b).astype(np.float32)}


def test_hostile_names_compile_and_match_the_oracle(hostile_build):
    model, outs, names, _, canary = hostile_build
    assert sorted(model.input_specs) == sorted(names.values())
    assert sorted(model.output_specs) == sorted(outs)
    for b in (1, 4):
        feeds = _feeds(names, b, seed=b)
        got, want = model.run(feeds), ag.reference.run(outs, feeds)
        assert sorted(got) == sorted(want)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], **TOL, err_msg=repr(k))
    assert not canary.exists()


def test_hostile_names_in_runtime_errors(hostile_build):
    model, outs, names, payload, canary = hostile_build
    good = _feeds(names, 2)
    with pytest.raises(RuntimeInputError) as e:  # the IntVar outside its bounds: the "bind" check
        model.run({**good, names["x"]: np.ones((9, 3), np.float32)})
    assert names["x"] in str(e.value) and payload in str(e.value)
    with pytest.raises(RuntimeInputError) as e:  # another input disagrees on it: the "same" check
        model.run({**good, names["y"]: np.ones((3, 3), np.float32)})
    assert names["y"] in str(e.value) and payload in str(e.value)
    with pytest.raises(RuntimeInputError) as e:  # the derived dim 2*n
        model.run({**good, names["z"]: np.ones(5, np.float32)})
    assert names["z"] in str(e.value) and payload in str(e.value)
    np.testing.assert_allclose(model.run(good)["out %n\n😀"], ag.reference.run(outs, good)["out %n\n😀"], **TOL)
    assert not canary.exists()


def test_hostile_names_reload_in_another_model(hostile_build):
    model, outs, names, _, canary = hostile_build
    with ag.Model.load(model.workdir) as again:
        feeds, key = _feeds(names, 3), "汉字/../.."
        np.testing.assert_allclose(again.run(feeds)[key], ag.reference.run(outs, feeds)[key], **TOL)
    assert not canary.exists()


# -- through the ONNX importer -------------------------------------------------------------------

def _onnx_model(dim: str, input_name: str = "x"):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info(input_name, TensorProto.FLOAT, [dim, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 3])
    g = helper.make_graph([helper.make_node("Relu", [input_name], ["y"])], "g", [x], [y])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = min(m.ir_version, 10)
    return onnx, m


def test_onnx_dim_param_payload_is_data(tmp_path):
    from aitgen.frontend import onnx as agonnx
    canary = tmp_path / "CANARY"
    payload = injection(canary)
    onnx, m = _onnx_model(payload)
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    inputs, outputs = agonnx.load(str(path), dim_bounds={payload: (1, 4)})
    model = ag.compile_model(outputs, target="cpu", workdir=tmp_path / "m")
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(model.run({"x": x})["y"], ag.reference.run(outputs, {"x": x})["y"], **TOL)
    with pytest.raises(RuntimeInputError) as e:
        model.run({"x": np.ones((5, 3), np.float32)})
    assert payload in str(e.value)
    model.close()
    assert not canary.exists()


@pytest.mark.parametrize("where", ["dim", "input"])
def test_onnx_nul_name_is_a_typed_error(where):
    from aitgen.frontend import onnx as agonnx
    _, m = _onnx_model("b\x00c" if where == "dim" else "b", "x\x00y" if where == "input" else "x")
    with pytest.raises(AitgenError) as e:
        agonnx.load(m)
    assert isinstance(e.value, InvalidNameError), repr(e.value)


def test_onnx_dim_param_payload_through_the_cli(tmp_path):
    """The attacker's route end to end: `aitgen compile model.onnx` then `aitgen run` in a fresh
    process (the injected popen ran on the first run before the fix)."""
    import os
    import sys
    canary = tmp_path / "CANARY"
    onnx, m = _onnx_model(injection(canary))
    path, work = tmp_path / "m.onnx", tmp_path / "build"
    onnx.save(m, str(path))
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.save(tmp_path / "x.npy", x)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    for args in (["compile", str(path), "--target", "cpu", "--workdir", str(work)],
                 ["run", str(work), "--input", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "out")]):
        r = subprocess.run([sys.executable, "-m", "aitgen", *args], capture_output=True, text=True, env=env,
                           timeout=600)
        assert r.returncode == 0, r.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "y.npy"), np.maximum(x, 0), **TOL)
    assert not canary.exists()
