"""`aitgen compile MODEL --precision int8 --calibration FEED.npz ...`: the CLI's int8 build is the
API's (same feeds, same method: the same scales, so the same numbers), and its misuse is refused
before anything is built."""
import numpy as np
import pytest

import aitgen as ag
from aitgen.cli.app import main

_MODEL = '''
import aitgen as ag
from aitgen import nn, ops

def build():
    nn.manual_seed(0)
    x = ag.Tensor([4, 16], dtype="float32", name="x")
    return {"y": nn.Linear(32, 8)(ops.relu(nn.Linear(16, 32)(x)))}
'''


def _feeds(n=3):
    rng = np.random.default_rng(0)
    return [{"x": (rng.standard_normal((4, 16)) * (i + 1)).astype(np.float32)} for i in range(n)]


def _build_fn(path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("_int8_cli_model", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build


def test_cli_int8_build_equals_the_api_build(tmp_path, capsys):
    mod = tmp_path / "mlp.py"
    mod.write_text(_MODEL)
    feeds = _feeds()
    paths = []
    for i, f in enumerate(feeds):
        paths.append(str(tmp_path / f"feed{i}.npz"))
        np.savez(paths[-1], **f)
    work = tmp_path / "cli"
    assert main(["compile", f"{mod}:build", "--target", "cpu", "--workdir", str(work), "--precision", "int8",
                 "--calibration", *paths, "--calibration-method", "percentile"]) == 0
    x = np.random.default_rng(1).standard_normal((4, 16)).astype(np.float32)
    with ag.Model.load(work) as m:
        got = m.run({"x": x})["y"]
    api = ag.compile_model(_build_fn(mod)(), target="cpu", workdir=tmp_path / "api", precision="int8",
                           calibration=feeds, calibration_method="percentile")
    with api:
        want = api.run({"x": x})["y"]
    np.testing.assert_array_equal(got, want)   # same scales, same kernels: the same bits
    fp32 = ag.reference.run(_build_fn(mod)(), {"x": x})["y"]
    assert np.abs(got - fp32).max() <= 0.05 * np.abs(fp32).max()   # int8 error, loosely bounded
    report = (work / "report.json").read_text()
    assert '"int8"' in report


def test_cli_int8_misuse_is_refused_before_building(tmp_path, capsys):
    mod = tmp_path / "mlp.py"
    mod.write_text(_MODEL)
    feed = tmp_path / "feed.npz"
    np.savez(feed, **_feeds(1)[0])
    np.save(tmp_path / "x.npy", _feeds(1)[0]["x"])
    np.savez(tmp_path / "obj.npz", x=np.array([{"a": 1}], dtype=object))   # a pickle: never loaded
    base = ["compile", f"{mod}:build", "--target", "cpu", "--workdir", str(tmp_path / "w")]
    cases = [
        (["--precision", "int8"], "needs --calibration"),
        (["--calibration", str(feed)], "applies to --precision int8 only"),
        (["--precision", "int8", "--calibration", str(tmp_path / "none.npz")], "no such file"),
        (["--precision", "int8", "--calibration", str(tmp_path / "x.npy")], "one unnamed array"),
        (["--precision", "int8", "--calibration", str(tmp_path / "obj.npz")], "cannot read"),
    ]
    for extra, msg in cases:
        with pytest.raises(SystemExit, match=msg) as e:   # usage errors exit 2, as argparse's do
            main(base + extra)
        assert e.value.code == 2, extra
    assert not (tmp_path / "w" / "model.json").exists()
    # a feed that does not match the model's inputs: the calibration error names the input
    np.savez(tmp_path / "bad.npz", z=np.zeros((4, 16), np.float32))
    capsys.readouterr()
    assert main(base + ["--precision", "int8", "--calibration", str(tmp_path / "bad.npz")]) == 2
    assert "CalibrationError" in capsys.readouterr().err
