#!/usr/bin/env bash
# GPU check: run every `gpu` test, the notebooks under nbval (lax) and the benchmarks on this machine.
#
#   bash scripts/gpu_check.sh OUTDIR
#
# Writes into OUTDIR: summary.txt (one line per step: status, seconds), a log per step, doctor.json,
# and bench-*.json reference results exactly as `gpulab bench ... --json` wrote them (copy the GPU
# ones to gpulab/reference/ to record them). Needs no network and installs nothing from it:
#   WHEELS=DIR   install missing pure-Python packages (nbval, jupyter_client, ...) from DIR with
#                pip --no-index --find-links DIR (optional; without nbval the notebook step is skipped)
#   PYTHON=EXE   interpreter to use (default: .venv/bin/python if present, else python3)
#   BUDGET=S     stop starting new steps after S seconds (default 400, so the run stays under 8 min)
# On a CPU-only machine it does the CPU-safe parts: the gpu tests report as skipped, benchmarks run on cpu.
# Exit status: 0 when every step that ran passed, 1 otherwise (a skipped step is not a failure).
set -euo pipefail

if [[ $# -ne 1 || -z "$1" ]]; then
    echo "usage: bash scripts/gpu_check.sh OUTDIR" >&2
    exit 2
fi
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$1"
OUT="$(cd "$1" && pwd)"
cd "$ROOT"

if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -x .venv/bin/python ]]; then
    PY=.venv/bin/python
else
    PY=python3
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"   # gpulab imports from the checkout, no install needed
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1  # never reach for the network
unset MPLBACKEND                                       # it would remove figures from notebook outputs
BUDGET="${BUDGET:-400}"
START=$SECONDS
FAILED=0
SUMMARY="$OUT/summary.txt"
: >"$SUMMARY"

note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME TIMEOUT CMD...: run CMD with a timeout, its output in OUTDIR/NAME.log; record pass/fail and seconds.
step() {
    local name="$1" limit="$2"
    shift 2
    local elapsed=$((SECONDS - START))
    if ((elapsed + 10 > BUDGET)); then
        note "SKIP  $name (time budget of ${BUDGET}s used up after ${elapsed}s)"
        return 0
    fi
    ((limit > BUDGET - elapsed)) && limit=$((BUDGET - elapsed))
    local t0=$SECONDS rc=0
    echo "--- $name (timeout ${limit}s)"
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name.log" 2>&1 || rc=$?
    tail -n 3 "$OUT/$name.log" | sed 's/^/    /'
    if ((rc == 0)); then
        note "PASS  $name ($((SECONDS - t0)) s)"
    elif ((rc == 124 || rc == 137)); then
        note "FAIL  $name (timed out after ${limit} s; see $name.log)"
        FAILED=1
    else
        note "FAIL  $name (exit $rc, $((SECONDS - t0)) s; see $name.log)"
        FAILED=1
    fi
}

has() { "$PY" -c "import $1" >/dev/null 2>&1; }

note "gpu_check on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ), python: $("$PY" -c 'import sys; print(sys.version.split()[0])')"

# 1. Missing test tools from local wheels only.
if [[ -n "${WHEELS:-}" ]]; then
    if [[ -d "$WHEELS" ]]; then
        # Optional: what fails to install is noted; the notebook step below is skipped without nbval.
        : >"$OUT/install-wheels.log"
        for pkg in nbval ipykernel ipywidgets; do
            if timeout 120 "$PY" -m pip install --no-index --find-links "$WHEELS" "$pkg" \
                >>"$OUT/install-wheels.log" 2>&1; then
                note "PASS  install-wheels $pkg (from local wheels)"
            else
                note "NOTE  install-wheels $pkg failed (see install-wheels.log); going on without it"
            fi
        done
    else
        note "SKIP  install-wheels (WHEELS=$WHEELS is not a folder)"
    fi
fi

# 2. What this machine is.
CUDA=$("$PY" -c 'import torch; print(int(torch.cuda.is_available()))')
step doctor 60 "$PY" -m gpulab doctor
timeout 60 "$PY" -m gpulab doctor --json >"$OUT/doctor.json" 2>/dev/null || rm -f "$OUT/doctor.json"
if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 30 nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
fi
if ((CUDA)); then
    DEVICE=cuda
    note "CUDA available: $("$PY" -c 'import torch; print(torch.cuda.device_count(), "x", torch.cuda.get_device_name(0))')"
else
    DEVICE=cpu
    note "no CUDA device: gpu tests will report as skipped, benchmarks run on the cpu"
fi

# 3. Every test marked gpu (skipped, with reasons, where CUDA is missing). Only the files that use the
#    marker are collected, so a test module needing a package this machine lacks cannot break the step.
XDIST=()
mapfile -t GPU_FILES < <(grep -l -E 'mark\.gpu\b' tests/test_*.py || true)
if ((${#GPU_FILES[@]})); then
    step gpu-tests 240 "$PY" -m pytest -m gpu "${GPU_FILES[@]}" -p no:cacheprovider -rs -q --junitxml "$OUT/gpu-tests.xml"
else
    note "FAIL  gpu-tests (no test file under tests/ uses the gpu marker)"
    FAILED=1
fi

# 4. Every notebook, top to bottom, under nbval in lax mode (errors fail, outputs are not compared).
NOTEBOOKS=(notebooks/*.ipynb)
if [[ ! -e "${NOTEBOOKS[0]}" ]]; then
    note "SKIP  notebooks (no notebooks/*.ipynb in this checkout)"
elif has nbval && has ipykernel; then
    JOBS=$(( $(nproc) < 4 ? $(nproc) : 4 ))
    if has xdist && ((JOBS > 1)); then XDIST=(-n "$JOBS" --dist loadfile); fi
    step notebooks 300 "$PY" -m pytest --nbval-lax --nbval-current-env --nbval-cell-timeout=240 \
        -p no:cacheprovider -q "${XDIST[@]}" "${NOTEBOOKS[@]}"
else
    note "SKIP  notebooks (nbval or ipykernel is not installed; bring wheels and set WHEELS=DIR to run them)"
fi

# 5. Reference benchmarks, written as JSON exactly as the command makes them.
SLUG=$("$PY" -c '
import re, torch
name = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
print(re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "device")')
bench() { local name="$1"; shift; step "bench-$name" 120 "$PY" -m gpulab bench "$@" --json "$OUT/$SLUG-$name.json"; }
bench matmul-float32 matmul --device "$DEVICE" --dtype float32
if ((CUDA)); then
    bench matmul-float16 matmul --device cuda --dtype float16
    if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.get_device_capability(0)[0] >= 8 else 1)'; then
        bench matmul-bfloat16 matmul --device cuda --dtype bfloat16
    else
        note "SKIP  bench-matmul-bfloat16 (compute capability < 8.0: bfloat16 is only emulated)"
    fi
    bench copy-device copy --device cuda --kind device
    bench copy-h2d-pageable copy --device cuda --kind h2d
    bench copy-h2d-pinned copy --device cuda --kind h2d --pinned
    bench copy-d2h-pinned copy --device cuda --kind d2h --pinned
else
    bench copy-device copy --device cpu --kind device
fi

note "total $((SECONDS - START)) s; results and logs in $(basename "$OUT")/"
if ((FAILED)); then
    note "RESULT: FAILED (see the logs above)"
    exit 1
fi
note "RESULT: OK"
