"""README.md as a test: its Python and shell blocks run as written, and its figures are what the
commands it names print.

Blocks. Every ```python and ```bash block of README.md is one test case, named by its number among
the README's fenced blocks, its language and its first line, so a failure names the snippet. Each
runs in a fresh temporary directory (cwd: `workdir="build/mlp"` lands there) in a subprocess with a
timeout; `python` and `aitgen` are this interpreter's. A block must be complete as written; one that
starts with `# continues the block above` runs after the previous block of its language, as one
program. Files a block names but does not make come from fixtures made first: `model.onnx` (a tiny
ONNX model: input_ids [batch, seq] -> Gather -> Relu -> hidden) and `ids.npy`; a block that names
`examples/` sees the repository's examples/ and backends/ there. Skipped, with the reason:
  - a block needing an extra that is not installed (torch, onnx, ...: found from its imports and
    fixtures; cmake and g++ for the C++ tour);
  - set-up blocks (`pip install ...`): .ci/run runs README command 1 and 2 from a clean clone;
  - `aitgen serve` blocks (the serve extra; they start servers that run until stopped);
  - `--target cuda` blocks (CUDA builds take minutes: the cuda_compile tier; running needs a GPU).
A skipped block's `aitgen ...` commands are still parsed by the CLI's parser, so their flags follow
the code.
A Python block whose first line is `# examples/NAME.py: ...` is that file, checked verbatim.

Figures. A ```text block whose first line is `$ COMMAND` quotes COMMAND's output: the slow tier runs
COMMAND and compares (`scripts/readme_figures.py` builds full-size BERT-base and ResNet-50 twice each:
36 s with a cold kernel cache on 2 shared cores, and the default tier's blocks already take up to two
minutes cold). The default tier checks that every figure the
README's (and docs/compiler.md's, docs/onnx.md's) prose gives in MiB, launches, unique kernels or
ops is one of the quoted output's, so the quote is the one source of each; and the ONNX figures
against their sources (supported_ops(), tests/conformance/results/conformance.md).
"""
from __future__ import annotations

import ast
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PROSE_DOCS = [README, ROOT / "docs" / "compiler.md", ROOT / "docs" / "onnx.md"]
CONTINUES = "# continues the block above"
RUNNABLE = ("python", "bash")
BLOCK_TIMEOUT = 600          # seconds; a cold kernel cache compiles each kernel once
FIGURES_TIMEOUT = 1800

# Modules that come with an extra, and what an import of them (or of the importer) needs.
EXTRA_MODULES = {"torch": "torch", "onnx": "onnx", "onnxruntime": "bench", "matplotlib": "viz",
                 "ray": "serve", "pytriton": "serve"}
IMPORTERS = {"aitgen.frontend.onnx": "onnx", "aitgen.frontend.torch": "torch"}


@dataclass(frozen=True)
class Block:
    number: int     # 1-based, among all fenced blocks of the file
    lang: str
    line: int       # line of the opening fence
    text: str       # as written
    code: str       # what runs: the blocks it continues, then its text

    @property
    def first_line(self) -> str:
        lines = [ln.strip() for ln in self.text.splitlines() if ln.strip() and ln.strip() != CONTINUES]
        return lines[0] if lines else ""

    @property
    def id(self) -> str:
        line = self.first_line if self.first_line.startswith("#") else re.sub(r"\s+#.*$", "", self.first_line)
        return f"{self.number:02d}-{self.lang}-{' '.join(line.split())[:60]}"


def parse_blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    fence = re.compile(r"^```(\S*)\s*$")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = fence.match(lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].rstrip() != "```":
            j += 1
        if j == len(lines):
            raise ValueError(f"line {i + 1}: a code fence that is never closed")
        lang, body = m.group(1), "\n".join(lines[i + 1:j]) + "\n"
        code = body
        if body.lstrip().startswith(CONTINUES):
            prev = next((b for b in reversed(blocks) if b.lang == lang), None)
            if prev is None:
                raise ValueError(f"line {i + 1}: '{CONTINUES}' but no {lang} block comes before it")
            code = prev.code + body
        blocks.append(Block(len(blocks) + 1, lang, i + 1, body, code))
        i = j + 1
    return blocks


def prose(text: str) -> str:
    """The text outside fenced blocks."""
    return re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.M | re.S)


BLOCKS = parse_blocks(README.read_text())
RUN_BLOCKS = [b for b in BLOCKS if b.lang in RUNNABLE]
QUOTED_OUTPUTS = [b for b in BLOCKS if b.lang == "text" and b.text.startswith("$ ")]


def needed_modules(block: Block) -> set[str]:
    needs = set()
    if block.lang == "python":
        for node in ast.walk(ast.parse(block.code)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for name in names:
                needs |= {mod for prefix, mod in IMPORTERS.items() if name == prefix or name.startswith(prefix + ".")}
                if name.split(".")[0] in EXTRA_MODULES:
                    needs.add(name.split(".")[0])
    if "model.onnx" in block.code:
        needs.add("onnx")   # the fixture is made with onnx.helper
    return needs


def skip_reason(block: Block) -> str | None:
    code = block.code
    if re.search(r"^\s*aitgen serve\b", code, re.M):
        missing = [m for m in ("ray", "pytriton") if importlib.util.find_spec(m) is None]
        if missing:
            return f"needs the serve extra (pip install -e \".[serve]\"): {', '.join(missing)} not installed"
        return "starts servers that run until stopped: not run by this test"
    if re.search(r"^\s*pip install\b", code, re.M):
        return "set-up commands: .ci/run runs README commands 1 and 2 from a clean clone"
    if re.search(r"--target[ =]cuda\b", code):
        return ("a CUDA build takes minutes (pytest -m cuda_compile builds the zoo for sm_80/sm_90a) and "
                "running one needs a GPU (scripts/gpu_check.sh)")
    if re.search(r"^\s*cmake\b", code, re.M):
        missing = [t for t in ("cmake", "g++") if shutil.which(t) is None]
        if missing:
            return f"the C++ tour needs {' and '.join(missing)} on PATH"
    return None


def aitgen_commands(code: str) -> list[list[str]]:
    """The `aitgen ...` commands of a shell block, as argument lists (comments dropped, lines joined
    at a trailing backslash, split at && and ;)."""
    commands = []
    for line in code.replace("\\\n", " ").splitlines():
        lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lex.whitespace_split = True   # words as the shell splits them; ; & | still separate
        argv: list[str] = []
        for tok in [*lex, ";"]:
            if tok and set(tok) <= set(";&|"):
                if argv and argv[0] == "aitgen":
                    commands.append(argv[1:])
                argv = []
            else:
                argv.append(tok)
    return commands


def check_flags(block: Block) -> None:
    """Each `aitgen` command of a block that is not run still parses with the CLI's parser, so its
    flags follow the code (nothing is built, served or started)."""
    from aitgen.cli import build_parser

    for argv in aitgen_commands(block.code):
        refused = None
        try:
            build_parser().parse_args(argv)
        except SystemExit as e:   # --version and --help exit 0
            refused = None if e.code in (0, None) else f"exit {e.code}"
        except Exception as e:  # noqa: BLE001 - the CLI's UsageError, or whatever it raises
            refused = str(e)
        if refused:
            fail_with(block, None, f"has `aitgen {shlex.join(argv)}`, which the CLI refuses: {refused}")


def make_onnx_model(path: Path) -> None:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((100, 8)).astype(np.float32), "table")
    nodes = [helper.make_node("Gather", ["table", "input_ids"], ["emb"]), helper.make_node("Relu", ["emb"], ["hidden"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info("hidden", TensorProto.FLOAT, ["batch", "seq", 8])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def prepare(block: Block, work: Path) -> None:
    if "model.onnx" in block.code:
        make_onnx_model(work / "model.onnx")
    if "ids.npy" in block.code:
        np.save(work / "ids.npy", np.random.default_rng(1).integers(0, 100, (2, 5)))
    if "examples/" in block.code:
        # examples/cpp's CMakeLists finds the C API header at ../../backends.
        for name in ("examples", "backends"):
            (work / name).symlink_to(ROOT / name, target_is_directory=True)


def run_env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def fail_with(block: Block, proc: subprocess.CompletedProcess | None, why: str) -> None:
    out = "" if proc is None else (proc.stdout or "")[-4000:] + (proc.stderr or "")[-4000:]
    pytest.fail(f"README.md block {block.number} (line {block.line}, {block.lang}) {why}:\n"
                f"{block.code}\n--- output ---\n{out}", pytrace=False)


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=[b.id for b in RUN_BLOCKS])
def test_readme_block_runs(block: Block, tmp_path: Path) -> None:
    reason = skip_reason(block)
    if reason:
        check_flags(block)
        pytest.skip(reason + ("; its aitgen flags parse" if aitgen_commands(block.code) else ""))
    for mod in sorted(needed_modules(block)):
        pytest.importorskip(mod, reason=f"needs the {EXTRA_MODULES[mod]} extra "
                                        f"(pip install -e \".[{EXTRA_MODULES[mod]}]\")")
    prepare(block, tmp_path)
    env = run_env()
    if block.lang == "python":
        (tmp_path / "snippet.py").write_text(block.code)
        cmd = [sys.executable, "snippet.py"]
    else:
        if re.search(r"^\s*aitgen\b", block.code, re.M) and shutil.which("aitgen", path=env["PATH"]) is None:
            pytest.skip("the aitgen command is not installed next to this python (pip install -e .)")
        (tmp_path / "snippet.sh").write_text(block.code)
        cmd = ["bash", "-e", "-x", "-o", "pipefail", "snippet.sh"]
    try:
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail_with(block, None, f"ran past {BLOCK_TIMEOUT} s")
    if proc.returncode != 0:
        fail_with(block, proc, f"exited {proc.returncode}")


def test_readme_has_the_blocks_it_should() -> None:
    ids = [b.id for b in RUN_BLOCKS]
    assert len(ids) == len(set(ids)), f"two README blocks share an id: {ids}"
    ran = [b for b in RUN_BLOCKS if skip_reason(b) is None]
    assert any(b.lang == "python" for b in ran) and any(b.lang == "bash" for b in ran), [b.id for b in ran]
    assert len(QUOTED_OUTPUTS) == 1, "README.md quotes the output of scripts/readme_figures.py once"
    assert aitgen_commands("aitgen a --b=c 'd e'  # && aitgen x\naitgen f \\\n  --g && ls; aitgen h") == \
        [["a", "--b=c", "d e"], ["f", "--g"], ["h"]]


def test_readme_quotes_example_files_verbatim() -> None:
    quoted = 0
    for b in BLOCKS:
        m = re.match(r"# (examples/\S+\.py): ", b.text)
        if m:
            quoted += 1
            path = ROOT / m.group(1)
            assert path.exists(), f"README.md block {b.number} quotes {m.group(1)}, which does not exist"
            assert path.read_text() == b.text, f"README.md block {b.number} (line {b.line}) differs from {m.group(1)}"
    assert quoted, "the tour (examples/tour.py) is quoted in README.md"


def test_two_commands_are_what_ci_runs() -> None:
    """.ci/run runs README commands 1 and 2 verbatim: the README's block and the script agree."""
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    block = next(b for b in BLOCKS if b.lang == "bash" and "examples/run_model.py bert_base" in b.text)
    commands = [ln for ln in block.text.splitlines() if ln.strip() and not ln.startswith("#")]
    assert len(commands) == 2, commands
    for c in commands:
        assert c in ci, f".ci/run does not run README's command {c!r}"


def test_continuation_joins_the_block_above() -> None:
    text = "```python\nx = 1\n```\n\n```bash\necho\n```\n\n```python\n# continues the block above\nprint(x)\n```\n"
    a, _, c = parse_blocks(text)
    assert c.code == a.code + c.text and c.first_line == "print(x)"
    with pytest.raises(ValueError, match="no bash block"):
        parse_blocks("```bash\n# continues the block above\necho\n```\n")


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------

FIGURE = re.compile(r"(\d+(?:\.\d+)?)\s+(MiB|kernel launches|launches|unique kernels|ops)\b")


def figures(text: str) -> set[tuple[str, str]]:
    return {(n, "launches" if unit == "kernel launches" else unit) for n, unit in FIGURE.findall(text)}


def test_prose_figures_are_the_quoted_output() -> None:
    quoted = figures("".join(b.text for b in QUOTED_OUTPUTS))
    assert quoted, "the quoted output holds no figures"
    for doc in PROSE_DOCS:
        stray = sorted(figures(prose(doc.read_text())) - quoted)
        assert not stray, (f"{doc.relative_to(ROOT)} gives figures that the quoted output of "
                           f"{QUOTED_OUTPUTS[0].first_line!r} in README.md does not hold: {stray}")
    # The figures the README's prose must give, beside the command that prints them.
    readme = prose(README.read_text())
    for fig in (("89", "launches"), ("10", "unique kernels"), ("2.25", "MiB"), ("54.75", "MiB"), ("56", "launches")):
        assert fig in figures(readme), f"README.md's prose no longer gives {fig}"


@pytest.mark.slow
@pytest.mark.parametrize("block", QUOTED_OUTPUTS, ids=[b.first_line for b in QUOTED_OUTPUTS])
def test_quoted_output_is_what_the_command_prints(block: Block) -> None:
    command, *quoted = block.text.rstrip("\n").splitlines()
    argv = shlex.split(command[2:])
    if argv[0] == "python":
        argv[0] = sys.executable
    proc = subprocess.run(argv, cwd=ROOT, env=run_env(), capture_output=True, text=True, timeout=FIGURES_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    printed = proc.stdout.rstrip("\n").splitlines()
    assert printed == quoted, (f"README.md line {block.line}: `{command[2:]}` now prints\n" + "\n".join(printed)
                               + "\nupdate the quote and the figures in the prose that come from it")


def test_onnx_figures_match_their_sources() -> None:
    from aitgen.frontend.onnx import supported_ops

    ops = supported_ops()
    readme = README.read_text()
    m = re.search(r"(\d+) ONNX op types have a converter", readme)
    assert m and int(m.group(1)) == len(ops), f"README.md: {m and m.group(0)!r}, supported_ops() has {len(ops)}"
    doc = (ROOT / "docs" / "onnx.md").read_text()
    section = doc.split("## Op coverage", 1)[1].split("\n## ", 1)[0]
    listed = next(ln for ln in section.splitlines() if ln.count(", ") > 10).split(", ")
    assert listed == ops, f"docs/onnx.md's op list differs from supported_ops(): {sorted(set(listed) ^ set(ops))}"
    # The conformance headline is conformance.md's own sentence.
    results = (ROOT / "tests" / "conformance" / "results" / "conformance.md").read_text()
    headline = re.search(r"aitgen passes \d+ of the \d+ covered cases; onnxruntime passes \d+ of the same cases "
                         r"\(\d+ of all \d+\)", results)
    assert headline, "tests/conformance/results/conformance.md has no summary line"
    assert headline.group(0) in " ".join(readme.split()), f"README.md does not quote: {headline.group(0)}"
