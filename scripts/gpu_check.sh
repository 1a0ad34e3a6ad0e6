#!/usr/bin/env bash
# The GPU checks in one go, for a machine with an NVIDIA GPU, within BUDGET seconds (default 420).
# Every step has its own time box; a step that fails or runs out of time is recorded and the next
# one still runs. Results land in $OUT (default out/gpu_check; 8 files, the device tool's limit):
#   summary.json       every step: exit status, seconds, and the figures below in one place
#   gpu_tests.xml      the `gpu` pytest tier (junit)
#   gpu_vs_torch.json  bert_base (s128, b1) and resnet50 (b1), float16: aitgen vs torch eager
#   gpu_vs_compile.json the same with torch.compile
#   gemm_sweep.json    benchmarks/gpu_gemm_sweep.py: TFLOP/s vs torch.matmul
#   gpu_bandwidth.json the fused element-wise kernel's GB/s vs a device copy
#   gpu_streams.json   one multi-branch model with streams=1 and streams=4
#   gpu_check.log      everything printed
# Objects prebuilt without a GPU (scripts/gpu_prebuild.py -> .gpu_carry/cache.tar.xz) are unpacked
# into the build cache first, so the steps link rather than compile what was carried.
# Wheels in .whl/ (nvidia-cutlass, anything else missing there) are installed into /tmp/site first;
# aitgen itself runs from this checkout (PYTHONPATH). backends/cuda/README.md says how to carry them.
#   OUT=/tmp/gc bash scripts/gpu_check.sh           # QUICK=1: small configs, fewer rounds (a smoke run)
#   DRY_RUN=1 bash scripts/gpu_check.sh             # no GPU: the plan (steps, time boxes), and the smoke
#                                                   # step's build for sm_90a run on the mock device
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
OUT="${OUT:-$ROOT/out/gpu_check}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
QUICK="${QUICK:-0}"
export PYTHONUNBUFFERED=1
# A build cache that outlives the steps (the tests and the benchmarks share kernels).
export AITGEN_CACHE_DIR="${AITGEN_CACHE_DIR:-/tmp/aitgen-cache}"
# Prebuilt objects (below) are keyed by nvcc's release, not its patch build: the images differ there.
export AITGEN_CACHE_TOOL_MATCH=release
# Four test workers each start a build: without a cap that is 4 x (one job per core) nvcc processes,
# 3-4 GB each for CUTLASS sm_90a units. Four jobs per build keeps 16 cores busy within memory.
export AITGEN_BUILD_JOBS="${AITGEN_BUILD_JOBS:-4}"
LOG="$OUT/gpu_check.log"
: >"$LOG"
STEPS="$(mktemp)"
# What summary.json carries whole stays here (the device tool brings back 8 files of $OUT).
SCRATCH="$(mktemp -d)"

# summary.json from what exists so far: rewritten after every step and by the EXIT trap, so a
# time box, a kill or a crash of this script still leaves every finished step's figures.
write_summary() {
  "$PY" - "$OUT" "$STEPS" "$SCRATCH" <<'PYEOF' 2>&1
import json, sys, xml.etree.ElementTree as ET
from pathlib import Path
out, steps, scratch = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
summary = {"steps": {}}
for line in steps.read_text().splitlines():
    name, rc, secs, limit = line.split("\t")
    summary["steps"][name] = {"exit": int(rc), "seconds": int(secs), "limit": int(limit), "timed_out": rc == "124"}
for key, junit in (("gpu_smoke", scratch / "gpu_smoke.xml"), ("gpu_tests", out / "gpu_tests.xml")):
  if junit.exists():
      root = ET.parse(junit).getroot()
      suites = [root] if root.tag == "testsuite" else list(root)
      tests = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "failed": []}
      for s in suites:
          for k in ("tests", "failures", "errors", "skipped"):
              tests[k] += int(s.get(k, 0))
          for case in s.iter("testcase"):
              bad = case.find("failure") if case.find("failure") is not None else case.find("error")
              if bad is not None:
                  tests["failed"].append({"test": f"{case.get('classname')}::{case.get('name')}",
                                          "message": (bad.get("message") or "")[:300]})
      tests["passed"] = tests["tests"] - tests["failures"] - tests["errors"] - tests["skipped"]
      summary[key] = tests
for name in ("gpu_vs_torch", "gemm_sweep", "gpu_bandwidth", "gpu_vs_compile", "gpu_streams"):
    p = out / f"{name}.json"
    if p.exists():
        try:
            summary[name] = json.loads(p.read_text())
        except ValueError as e:
            summary[name] = {"error": f"unreadable: {e}"}
(out / "summary.json").write_text(json.dumps(summary, indent=1))
print(json.dumps({k: v for k, v in summary.items() if k not in ("gpu_vs_torch", "gpu_vs_compile", "gemm_sweep")},
                 indent=1)[:4000])
PYEOF
}
trap 'write_summary | tee -a "$LOG"; rm -rf "$STEPS" "$SCRATCH"' EXIT
# A signal ends the script through exit, so the EXIT trap runs (a SIGKILL cannot be trapped: the
# summary written after the last finished step is what is left then).
trap 'exit 143' TERM
trap 'exit 130' INT

# step NAME SECONDS CMD...: run CMD under `timeout` (SIGINT first, so pytest still writes its report),
# log it, and record the exit status and time.
step() {
  local name="$1" limit="$2"; shift 2
  echo "== gpu_check: $name (limit ${limit}s): $*" | tee -a "$LOG"
  local t0=$SECONDS rc=0
  timeout -s INT -k 20 "$limit" "$@" >>"$LOG" 2>&1 || rc=$?
  local dt=$((SECONDS - t0))
  echo "== gpu_check: $name: exit $rc after ${dt}s$([[ $rc == 124 ]] && echo ' (time box hit)')" | tee -a "$LOG"
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$dt" "$limit" >>"$STEPS"
  write_summary >/dev/null
}

# 0. objects prebuilt on a machine without a GPU (scripts/gpu_prebuild.py, carried as .gpu_carry/):
# the steps' builds then link instead of compiling. Keys name no path of the machine that built
# them; a header that differs here is a miss, never a stale object.
# Several archives may be carried (gpu_prebuild.py --out .gpu_carry/<set>: one per run).
if compgen -G ".gpu_carry/*cache.tar.xz" >/dev/null || compgen -G ".gpu_carry/*/cache.tar.xz" >/dev/null; then
  step unpack_prebuilt 30 bash -c "mkdir -p '$AITGEN_CACHE_DIR' && for a in .gpu_carry/cache.tar.xz .gpu_carry/*/cache.tar.xz; do
    [[ -f \$a ]] && { tar -xJf \$a -C '$AITGEN_CACHE_DIR' || exit 1; }; done; find '$AITGEN_CACHE_DIR' -name '*.entry' | wc -l"
fi

# 1. carried wheels, then aitgen from this checkout
if compgen -G ".whl/*.whl" >/dev/null; then
  step install_wheels 60 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
else
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi
step environment 30 bash -c "nvidia-smi; nvcc --version | tail -3; g++ --version | head -1; $PY -c 'import torch, aitgen;
from aitgen.codegen import locate; print(\"torch\", torch.__version__, torch.cuda.get_device_name());
print(\"cutlass\", locate.cutlass().version); from aitgen.runtime import device;
print(\"capability\", device.cuda_capability()); import cuda.bindings; print(\"cuda-bindings\", cuda.bindings.__version__)'"

# The steps in the order their figures matter (the issue's must-show first), each in its own time
# box, all within BUDGET seconds of the script's start (a device call may run 600 s; 420 leaves room
# for a rerun in a 15-minute lease): a step gets min(its box, what is left), and is skipped (exit 125
# in summary.json) when under 20 s is left. The gpu tier goes last and takes what is left: most of
# its ~680 units are not prebuilt, so on a first run it is the step that may not finish.
BUDGET="${BUDGET:-420}"
if [[ "$QUICK" == 1 ]]; then BENCH_ARGS=(--small --rounds 3 --iters 5); else BENCH_ARGS=(--rounds 7 --iters 20); fi
PLAN_TEXT="== gpu_check: the steps of a GPU run, in order, each in its own time box, within BUDGET=${BUDGET} s in all
  unpack_prebuilt   20 s  objects compiled here by scripts/gpu_prebuild.py (.gpu_carry/), if carried
  install_wheels    60 s  carried wheels (.whl/: nvidia-cutlass) into /tmp/site
  environment       30 s  nvidia-smi, nvcc, g++, torch, CUTLASS, cuda-bindings, the GPU's compute capability
  smoke             60 s  one case of each kernel family, float16, against the oracle (test_gpu_smoke.py)
  gpu_vs_torch      90 s  bert_base s128 b1, resnet50 b1, float16: aitgen (plain, CUDA graph) vs torch eager
  gemm_sweep        75 s  CUTLASS GEMMs vs torch.matmul (TFLOP/s), bf16/fp16, JSON after every shape
  gpu_bandwidth     30 s  the fused element-wise kernel's GB/s vs a device copy
  gpu_streams       40 s  a multi-branch model with streams=1 and streams=4 (CUDA graphs), side by side
  gpu_vs_compile    90 s  the same two models with torch.compile added (its compile is a minute a model)
  gpu_tests       rest    the gpu tier: every op kind x float32/float16/bfloat16, the small zoo, the runtime
Each step writes its JSON when it ends; summary.json is rewritten after every step and on exit."

if [[ "${DRY_RUN:-0}" == 1 ]]; then
  echo "$PLAN_TEXT" | tee -a "$LOG"
  echo "Here, without a GPU: the smoke step's build for sm_90a, run on the mock device." | tee -a "$LOG"
  step smoke_on_mock 900 "$PY" -m pytest -q -s -m cuda_compile -p no:cacheprovider \
    tests/backends/cuda/test_gpu_smoke.py -k on_the_mock
  exit 0
fi
echo "$PLAN_TEXT" >>"$LOG"

# bstep NAME BOX CMD...: `step` with the box cut to what is left of BUDGET.
bstep() {
  local name="$1" box="$2"; shift 2
  local left=$((BUDGET - SECONDS - 10))
  if ((left < 20)); then
    echo "== gpu_check: $name skipped: ${left}s of the budget left" | tee -a "$LOG"
    printf '%s\t125\t0\t0\n' "$name" >>"$STEPS"
    return
  fi
  step "$name" $((box < left ? box : left)) "$@"
}

# 2. the smoke set: one case of each kernel family, float16, against the oracle; a broken family
# shows here within a minute.
bstep smoke 60 env CUDA_LAUNCH_BLOCKING=1 "$PY" -m pytest -q -m gpu -p no:cacheprovider tests/backends/cuda/test_gpu_smoke.py \
  --junitxml="$SCRATCH/gpu_smoke.xml" -o junit_family=xunit1

# 3. end-to-end latency against torch eager (float16, the GPU's arch: sm_90a on an H200)
bstep gpu_vs_torch 90 "$PY" benchmarks/gpu_vs_torch.py --models bert_base resnet50 --precision float16 \
  "${BENCH_ARGS[@]}" --no-compile --out "$OUT/gpu_vs_torch.json"

# 4. GEMM sweep (CUTLASS vs torch.matmul)
bstep gemm_sweep 75 "$PY" benchmarks/gpu_gemm_sweep.py --out "$OUT/gemm_sweep.json"

# 5. fused element-wise bandwidth
bstep gpu_bandwidth 30 "$PY" benchmarks/gpu_bandwidth.py --out "$OUT/gpu_bandwidth.json" \
  $([[ "$QUICK" == 1 ]] && echo "--mib 128 --no-compile")

# 5b. multi-stream scheduling: one multi-branch model with streams=1 and 4, as CUDA graphs
bstep gpu_streams 40 "$PY" benchmarks/gpu_streams.py --out "$OUT/gpu_streams.json"

# 6. the same against torch.compile: last of the benchmarks, since its compile may eat its box
if [[ "$QUICK" != 1 ]]; then
  bstep gpu_vs_compile 90 "$PY" benchmarks/gpu_vs_torch.py --models bert_base resnet50 --precision float16 \
    "${BENCH_ARGS[@]}" --out "$OUT/gpu_vs_compile.json"
fi

# 7. the gpu tier: every op kind against the oracle in float32/float16/bfloat16, the small zoo, the
# runtime. --dist loadscope: a module's tests stay on one worker, so its module-scoped builds (one per
# dtype in test_gpu_ops.py) happen once. GPU_TEST_ARGS narrows the tier (e.g. -k float16).
bstep gpu_tests 600 "$PY" -m pytest -q -m gpu -n 4 --dist loadscope -p no:cacheprovider tests/backends/cuda \
  --junitxml="$OUT/gpu_tests.xml" -o junit_family=xunit1 ${GPU_TEST_ARGS:-}

echo "== gpu_check: done after ${SECONDS}s; results in $OUT"
