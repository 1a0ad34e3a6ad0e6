#!/usr/bin/env bash
# Native checks of a built model outside Python:
#   (a) build a small model with Python (element-wise ops, plus GEMM / layernorm / softmax /
#       attention / gather whichever have CPU kernels) and record Python's outputs for one input;
#   (b) build examples/cpp with cmake, run it on the same input, compare with Python's outputs, and
#       check that a bad input is refused (exit 2, the input named) rather than crashing;
#   (c) the same with the model library AND the example built with -fsanitize=address,undefined,
#       run with leak detection on and UBSan halting on the first report: any report fails.
# Needs python with aitgen installed, cmake >= 3.16 and g++ (which ships libasan/libubsan).
#   scripts/native_checks.sh            # KEEP_TMP=1 keeps the work directory for a look afterwards
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-python}"
CXX_BIN="${CXX:-g++}"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/aitgen-native.XXXXXX")"
if [[ "${KEEP_TMP:-0}" == 1 ]]; then
  trap 'echo "native_checks: work directory kept: $WORK"' EXIT
else
  trap 'rm -rf "$WORK"' EXIT
fi
export AITGEN_CACHE_DIR="${AITGEN_CACHE_DIR:-$WORK/cache}"
JOBS="$(nproc 2>/dev/null || echo 2)"

step() { echo "== native_checks: $*"; }
fail() { echo "native_checks: FAILED: $*" >&2; exit 1; }

for tool in cmake "$CXX_BIN" "$PY"; do
  command -v "$tool" >/dev/null || fail "'$tool' is not on PATH"
done
"$PY" -c "import aitgen" || fail "python cannot import aitgen (pip install -e . first)"

# Python side: build the model into $1 (extra compile/link flags after it), write the input and
# Python's outputs under $1/io. Kept in one place so the plain and sanitized builds match.
cat > "$WORK/model.py" <<'PYEOF'
import os
import sys
from pathlib import Path

# Under the sanitizer step this process runs with libasan preloaded (a sanitized library can only
# be dlopen'ed into a process whose first library is the ASan runtime); the compilers and ninja
# it starts must not inherit that.
os.environ.pop("LD_PRELOAD", None)

import numpy as np

import aitgen as ag
from aitgen import ops
from aitgen.codegen.lower import supported_kinds

workdir, extra = Path(sys.argv[1]), sys.argv[2:]
K = supported_kinds("cpu") | {ag.OpKind.RESHAPE}   # a view: lowered to nothing, never registered
rng = np.random.default_rng(0)
batch = ag.IntVar("batch", 1, 8)
D = 16
x = ag.Tensor([batch, D], name="x")
const = lambda name, *shape, scale=1.0: ag.constant((rng.standard_normal(shape) * scale).astype(np.float32), name=name)

h = ops.gelu(x * const("scale", D) + const("shift", D))
used = ["elementwise"]
if ag.OpKind.GEMM in K:
    h = ops.linear(h, const("w1", 32, D, scale=0.25), const("b1", 32))
    h = ops.linear(ops.relu(h), const("w2", D, 32, scale=0.2), const("b2", D)) + x
    used.append("gemm")
if ag.OpKind.LAYERNORM in K:
    h = ops.layernorm(h, const("ln_w", D), const("ln_b", D))
    used.append("layernorm")
outputs = {"y": h, "y_half": ops.cast(h, "float16"), "flag": ops.greater(h, x)}
if ag.OpKind.SOFTMAX in K:
    outputs["p"] = ops.softmax(h, axis=-1)
    used.append("softmax")
if ag.OpKind.ATTENTION in K:
    q = ops.reshape(h, [batch, 2, 2, 4])      # [batch, heads, seq, head_dim]
    outputs["att"] = ops.scaled_dot_product_attention(q, q * 0.5, q, causal=True)
    used.append("attention")
if ag.OpKind.GATHER in K:
    ids = ag.Tensor([batch, 3], dtype="int64", name="ids")
    outputs["emb"] = ops.embedding(ids, const("table", 100, D))
    used.append("gather")

# A small BERT from the zoo rides along once every op it uses has a CPU kernel: a real graph
# (embeddings, attention with a mask, GEMM epilogues, layernorms) under the sanitizers.
_, bert = ag.models.get("bert_base", layers=1, hidden=32, heads=2, intermediate=64, vocab=100, max_position=16,
                        seq=ag.IntVar("seq", 1, 16))
if {op.kind for op in ag.Graph.from_outputs(bert).ops} <= K:
    outputs.update({f"bert_{k}": v for k, v in bert.items()})
    used.append("bert")

model = ag.compile_model(outputs, target="cpu", workdir=workdir, extra_flags=extra)
feeds = {"x": rng.standard_normal((3, D)).astype(np.float32)}
if "ids" in model.input_specs:
    feeds["ids"] = rng.integers(0, 100, (3, 3)).astype(np.int64)
if "bert" in used:
    feeds.update(input_ids=rng.integers(0, 100, (1, 7)), token_type_ids=rng.integers(0, 2, (1, 7)),
                 attention_mask=np.array([[1, 1, 1, 1, 1, 0, 0]], np.int64))
assert sorted(feeds) == sorted(model.input_specs), (sorted(feeds), sorted(model.input_specs))
got = model.run(feeds)
ref = ag.reference.run(outputs, feeds)
for k, r in ref.items():   # GEMM accumulation order differs from numpy's
    np.testing.assert_allclose(got[k].astype(np.float32), r.astype(np.float32), rtol=1e-4, atol=1e-4, err_msg=k)

io = workdir / "io"
for sub in ("in", "bad", "expected"):
    (io / sub).mkdir(parents=True, exist_ok=True)
for name, a in feeds.items():
    a.tofile(io / "in" / f"{name}.bin")
    (io / "in" / f"{name}.shape").write_text(" ".join(map(str, a.shape)) + "\n")
    # x with batch 9 is above the IntVar's bound: the model must refuse it and name x
    bad = np.zeros((9,) + a.shape[1:], a.dtype) if name == "x" else a
    bad.tofile(io / "bad" / f"{name}.bin")
    (io / "bad" / f"{name}.shape").write_text(" ".join(map(str, bad.shape)) + "\n")
for name, a in got.items():
    np.save(io / "expected" / f"{name}.npy", a)
model.close()
print(f"built {workdir.name} ({', '.join(used)}; flags {extra or 'default'}): outputs {sorted(got)}")
PYEOF

# Compare the example's --outputs directory with Python's outputs of the same library.
cat > "$WORK/compare.py" <<'PYEOF'
import re
import sys
from pathlib import Path

import numpy as np

expected, produced, printed = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]).read_text()
names = sorted(p.stem for p in expected.glob("*.npy"))
assert names, f"no expected outputs in {expected}"
for name in names:
    want = np.load(expected / f"{name}.npy")
    shape = tuple(int(v) for v in (produced / f"{name}.shape").read_text().split())
    got = np.fromfile(produced / f"{name}.bin", dtype=want.dtype).reshape(shape)
    assert got.shape == want.shape, f"{name}: shape {got.shape}, Python gave {want.shape}"
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=1e-5, atol=1e-6, err_msg=name)
    line = re.search(rf"^output {re.escape(name)} dtype=(\S+) shape=\[([0-9,]*)\] sum=(\S+)", printed, re.M)
    assert line, f"the example printed no line for output {name}"
    assert line.group(1) == str(want.dtype), (name, line.group(1), want.dtype)
    assert line.group(2) == ",".join(map(str, want.shape)), (name, line.group(2), want.shape)
    total = float(want.astype(np.float64).sum())
    assert abs(float(line.group(3)) - total) <= 1e-5 * max(1.0, abs(total)), (name, line.group(3), total)
print(f"C++ outputs match Python for {names}")
PYEOF

# Run the example on the model in $2 (binary $1); extra environment from the caller.
check_example() {
  local bin="$1" model="$2" label="$3" out="$WORK/out-$3"
  mkdir -p "$out"
  "$bin" "$model" --inputs "$model/io/in" --outputs "$out" --iters 3 >"$out/stdout" 2>"$out/stderr" \
    || { cat "$out/stdout" "$out/stderr" >&2; fail "$label: the example failed on a good input"; }
  cat "$out/stdout"
  sanitizer_clean "$out/stderr" "$label (good input)"
  "$PY" "$WORK/compare.py" "$model/io/expected" "$out" "$out/stdout" || fail "$label: outputs differ from Python's"

  # No --inputs: every input is ones at its largest shape (valid ids and masks for the BERT too).
  "$bin" "$model" >"$out/ones.stdout" 2>"$out/ones.stderr" \
    || { cat "$out/ones.stdout" "$out/ones.stderr" >&2; fail "$label: the example failed on its default inputs"; }
  sanitizer_clean "$out/ones.stderr" "$label (default inputs)"

  local rc=0
  "$bin" "$model" --inputs "$model/io/bad" >"$out/bad.stdout" 2>"$out/bad.stderr" || rc=$?
  [[ $rc == 2 ]] || { cat "$out/bad.stderr" >&2; fail "$label: a bad input gave exit $rc, expected 2"; }
  grep -q "bad input: input 'x'" "$out/bad.stderr" || { cat "$out/bad.stderr" >&2; fail "$label: the bad input was not named"; }
  sanitizer_clean "$out/bad.stderr" "$label (bad input)"
  echo "$label: a bad input is refused: $(tr -d '\n' <"$out/bad.stderr")"
}

sanitizer_clean() {
  if grep -qE "ERROR: (Address|Leak)Sanitizer|runtime error:|SUMMARY: .*Sanitizer" "$1"; then
    cat "$1" >&2
    fail "$2: sanitizer report"
  fi
}

configure_and_build() {   # $1 build dir, then cmake -D options
  local dir="$1"; shift
  cmake -S "$ROOT/examples/cpp" -B "$dir" -DCMAKE_CXX_COMPILER="$CXX_BIN" "$@" >"$dir.log" 2>&1 \
    || { cat "$dir.log" >&2; fail "cmake configure failed"; }
  cmake --build "$dir" -j "$JOBS" >>"$dir.log" 2>&1 || { cat "$dir.log" >&2; fail "cmake build failed"; }
}

step "(a) building the model with Python"
"$PY" "$WORK/model.py" "$WORK/model"

step "(b) examples/cpp against it"
configure_and_build "$WORK/example" -DCMAKE_BUILD_TYPE=Release
check_example "$WORK/example/aitgen_run_model" "$WORK/model" plain

step "(c) AddressSanitizer + UBSan"
LIBASAN="$("$CXX_BIN" -print-file-name=libasan.so)"
[[ -f "$LIBASAN" ]] || fail "$CXX_BIN has no libasan.so ($LIBASAN)"
SAN_FLAGS=(-fsanitize=address,undefined -fno-omit-frame-pointer -g)
# Python leaks by design (interned objects live until exit): no leak checking in the build step.
LD_PRELOAD="$LIBASAN" ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$PY" "$WORK/model.py" "$WORK/model-asan" "${SAN_FLAGS[@]}"
# The flags must have reached the library, or the run below proves nothing.
SYMS="$(nm -D "$WORK"/model-asan/model_*.so)"   # not piped into grep -q: pipefail + SIGPIPE
for sym in __asan_init __ubsan_handle; do
  grep -q "$sym" <<<"$SYMS" || fail "the sanitized model library has no $sym"
done
configure_and_build "$WORK/example-asan" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DAITGEN_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  check_example "$WORK/example-asan/aitgen_run_model" "$WORK/model-asan" sanitized

step "all native checks passed"
