#!/usr/bin/env bash
# GPU check, one command, within 8 minutes on one H200: measure what the notebooks cite FIRST, then run the
# notebooks with those fresh figures in place (two at a time), every `gpu` test, and the whole unit suite.
#
#   bash scripts/gpu_check.sh OUTDIR
#
# Leaves in OUTDIR one archive, gpu-check.tar.gz (under 16 MB: carry it off a rented machine as one file),
# beside summary.txt (one screen: PASS/FAIL/SKIP/NOTE per step, with seconds). The archive holds:
#   summary.txt
#   reference/       SLUG-measure.json and the bench files SLUG-*.json from scripts/gpu_measure.py:
#                    copy them unchanged into gpulab/reference/ to record this GPU (SLUG: nvidia-h200, or cpu)
#   measure.log, doctor.log, doctor.json, nvidia-smi.txt, gpu-tests.log, gpu-tests.xml, unit-tests.log,
#   unit-tests.xml, pip-list.txt
#   notebooks/       each notebook's executed copy and times.json (status and seconds per notebook),
#                    notebooks.log; run through nbclient (no Jupyter server, no nbval), reading the fresh
#                    reference files (GPULAB_REFERENCE_DIR), at most two at a time so their times mean something
# Needs no network and installs nothing from it. Settings (environment variables):
#   PYTHON=EXE       interpreter (default: .venv/bin/python if present, else python3)
#   WHEELS=DIR       local wheels for the notebook step (nbclient, nbformat, ipykernel, ipywidgets and their
#                    dependencies, for this Python): installed with pip --no-index --target into a temporary
#                    folder put on PYTHONPATH, so nothing touches the system Python (no PEP 668 refusal);
#                    dependencies the system already has may be left out of DIR
#   WHEEL_PACKAGES="A B"  what to install from WHEELS (default: nbclient nbformat ipykernel ipywidgets)
#   BUDGET=S         start no step after S seconds, and cut the last ones to fit (default 470: under 8 min)
#   MEASURE_TIMEOUT=S  the measurement's own limit (default 200); it runs first, so the budget cannot starve it
#   DRY_RUN=1        small sizes even on a GPU (automatic without CUDA)
#   MEASURE_STEPS=A,B  only these steps of gpu_measure.py (default: all; a rerun updates the file in place)
#   NOTEBOOKS="A B"  notebooks to execute (default: notebooks/*.ipynb; "none": skip the step)
#   NOTEBOOK_JOBS=N  notebooks at a time (default 2)
#   UNIT_TESTS=none  skip the unit suite (default: tests/, every test not marked gpu, on all cores)
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
BUDGET="${BUDGET:-470}"
MEASURE_TIMEOUT="${MEASURE_TIMEOUT:-200}"
START=$SECONDS
FAILED=0
SUMMARY="$OUT/summary.txt"
SITE=""
: >"$SUMMARY"
REFS=""
cleanup() { [[ -n "$SITE" ]] && rm -rf "$SITE"; [[ -n "$REFS" ]] && rm -rf "$REFS"; return 0; }
trap cleanup EXIT

note() { echo "$*" | tee -a "$SUMMARY"; }

# run NAME LIMIT CMD...: CMD with a timeout, its output in OUTDIR/NAME.log; record pass/fail and seconds.
run() {
    local name="$1" limit="$2"
    shift 2
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

# step NAME LIMIT CMD...: like run, but skipped once the budget is spent, and cut to what is left of it.
step() {
    local name="$1" limit="$2" elapsed=$((SECONDS - START))
    shift 2
    if ((elapsed + 10 > BUDGET)); then
        note "SKIP  $name (time budget of ${BUDGET}s used up after ${elapsed}s)"
        return 0
    fi
    ((limit > BUDGET - elapsed)) && limit=$((BUDGET - elapsed))
    run "$name" "$limit" "$@"
}

# install_wheels PY WHEELS SITE PKG...: the packages with their dependencies from WHEELS into SITE; if some
# dependency is not among the wheels (the system may have it), every wheel that fits this Python, alone.
install_wheels() {
    local py="$1" wheels="$2" site="$3" whl ok=0
    shift 3
    local pip=("$py" -m pip install --no-index --find-links "$wheels" --target "$site" --upgrade --quiet)
    echo "installing $* from $wheels into a temporary folder"
    "${pip[@]}" "$@" && return 0
    echo "not every dependency is among the wheels: installing each wheel without its dependencies"
    for whl in "$wheels"/*.whl; do
        "${pip[@]}" --no-deps "$whl" && ok=$((ok + 1)) || echo "skipped $(basename "$whl")"
    done
    echo "$ok wheel(s) installed"
    ((ok > 0))
}

missing() { local m out=(); for m in "$@"; do "$PY" -c "import $m" >/dev/null 2>&1 || out+=("$m"); done; echo "${out[*]}"; }

note "gpu_check at $(date -u +%Y-%m-%dT%H:%M:%SZ), python $("$PY" -c 'import sys; print(sys.version.split()[0])')"

# 1. The measurements, first: nothing before them can use up the time. Results are written as they come.
MEASURE_ARGS=()
[[ "${DRY_RUN:-0}" == 1 ]] && MEASURE_ARGS+=(--dry-run)
[[ -n "${MEASURE_STEPS:-}" ]] && MEASURE_ARGS+=(--only "$MEASURE_STEPS")
run measure "$MEASURE_TIMEOUT" "$PY" scripts/gpu_measure.py "$OUT" --budget $((MEASURE_TIMEOUT - 30)) "${MEASURE_ARGS[@]}"
note "      reference/: $(cd "$OUT/reference" 2>/dev/null && ls -- *.json 2>/dev/null | tr '\n' ' ')"

# 2. What this machine is (cheap).
step doctor 60 "$PY" -m gpulab doctor
timeout 60 "$PY" -m gpulab doctor --json >"$OUT/doctor.json" 2>/dev/null || rm -f "$OUT/doctor.json"
if command -v nvidia-smi >/dev/null 2>&1; then
    timeout 30 nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1 || true
fi
if "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    note "      CUDA: $("$PY" -c 'import torch; print(torch.cuda.device_count(), "x", torch.cuda.get_device_name(0))')"
else
    note "      no CUDA device: a dry run (gpu tests report as skipped, measurements are small and on the cpu)"
fi

# 3. The notebooks, through nbclient, reading the fresh reference files. Wheels (if given) go to a temporary folder on PYTHONPATH.
if [[ "${NOTEBOOKS:-}" == none ]]; then
    note "SKIP  notebooks (NOTEBOOKS=none)"
else
    read -r -a NBS <<<"${NOTEBOOKS:-$(echo notebooks/*.ipynb)}"
    if [[ -n "${WHEELS:-}" ]]; then
        if [[ ! -d "$WHEELS" ]]; then
            note "NOTE  install-wheels: WHEELS=$WHEELS is not a folder"
        elif ! "$PY" -m pip --version >/dev/null 2>&1; then
            note "NOTE  install-wheels: this Python has no pip, so the wheels cannot be installed"
        else
            SITE="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_site.XXXXXX")"
            step install-wheels 150 bash -c "$(declare -f install_wheels); install_wheels \"\$@\"" _ "$PY" "$WHEELS" "$SITE" \
                ${WHEEL_PACKAGES:-nbclient nbformat ipykernel ipywidgets}
            export PYTHONPATH="$SITE:$PYTHONPATH"
        fi
    fi
    LACK="$(missing nbclient nbformat ipykernel)"
    if [[ -n "$LACK" ]]; then
        note "SKIP  notebooks (not installed: $LACK; bring their wheels and set WHEELS=DIR)"
    else
        LACK="$(missing ipywidgets)"
        [[ -n "$LACK" ]] && note "NOTE  ipywidgets is not installed: the notebooks that import it (01, 05) will fail"
        JOBS="${NOTEBOOK_JOBS:-2}"
        # The committed reference files with this run's fresh ones over them, for the notebooks to read.
        REFS="$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_refs.XXXXXX")"
        cp gpulab/reference/*.json "$REFS"/ 2>/dev/null || true
        cp "$OUT"/reference/*.json "$REFS"/ 2>/dev/null || true
        LEFT=$((BUDGET - (SECONDS - START)))
        if ((LEFT < 60)); then
            note "SKIP  notebooks (only ${LEFT}s of the ${BUDGET}s budget left)"
        else
            # Leave the gpu tests and the unit suite about 3 minutes when the notebooks would take it all.
            NB_LIMIT=$((LEFT > 330 ? LEFT - 180 : LEFT))
            export GPULAB_REFERENCE_DIR="$REFS"
            step notebooks "$NB_LIMIT" "$PY" scripts/run_notebooks.py "$OUT/notebooks" \
                "${NBS[@]}" --jobs "$JOBS" --timeout $((NB_LIMIT - 15)) --cell-timeout 240
            unset GPULAB_REFERENCE_DIR
            [[ -f "$OUT/notebooks/times.json" ]] && grep -o '"notebook": "[^"]*"\|"status": "[^"]*"\|"seconds": [0-9.]*' \
                "$OUT/notebooks/times.json" | paste - - - | sed 's/"//g; s/^/      /' | tee -a "$SUMMARY"
        fi
    fi
fi

# 4. Every test marked gpu. Only the files that use the marker are collected, so a test module needing a
#    package this machine lacks cannot break the step.
mapfile -t GPU_FILES < <(grep -l -E 'mark\.gpu\b' tests/test_*.py || true)
if ((${#GPU_FILES[@]})); then
    step gpu-tests 180 "$PY" -m pytest -m gpu "${GPU_FILES[@]}" -p no:cacheprovider -rs -q --junitxml "$OUT/gpu-tests.xml"
else
    note "FAIL  gpu-tests (no test file under tests/ uses the gpu marker)"
    FAILED=1
fi

# 5. The whole unit suite but the gpu tests (step 4 ran those), on every core. Its own test of this script
#    runs a small dry run that must not start the suite again (UNIT_TESTS=none there).
if [[ "${UNIT_TESTS:-}" == none ]]; then
    note "SKIP  unit-tests (UNIT_TESTS=none)"
elif ! "$PY" -c 'import xdist' >/dev/null 2>&1; then
    step unit-tests 300 "$PY" -m pytest tests --ignore=tests/browser -m "not gpu" -p no:cacheprovider -q \
        --junitxml "$OUT/unit-tests.xml"
else
    step unit-tests 300 "$PY" -m pytest tests --ignore=tests/browser -m "not gpu" -p no:cacheprovider -q \
        -n "$(nproc)" --dist loadfile --junitxml "$OUT/unit-tests.xml"
fi
[[ -f "$OUT/unit-tests.log" ]] && tail -n 1 "$OUT/unit-tests.log" | sed 's/^/      /' | tee -a "$SUMMARY"
"$PY" -m pip list >"$OUT/pip-list.txt" 2>/dev/null || rm -f "$OUT/pip-list.txt"

note "total $((SECONDS - START)) s"
if ((FAILED)); then
    note "RESULT: FAILED (see the logs in the archive)"
else
    note "RESULT: OK"
fi

# 6. Everything in one archive beside the summary: the executed notebooks, the logs, the reference files.
ARCHIVE="$OUT/gpu-check.tar.gz"
TAR_RC=0  # 1: a file changed while it was read (a log still written by a stopped process); the archive is kept
tar -czf "$ARCHIVE.tmp" -C "$OUT" --exclude=gpu-check.tar.gz --exclude=gpu-check.tar.gz.tmp . || TAR_RC=$?
((TAR_RC <= 1)) && mv "$ARCHIVE.tmp" "$ARCHIVE"
SIZE=$(($( [[ -f "$ARCHIVE" ]] && wc -c <"$ARCHIVE" || echo 0) / 1024))
if ((TAR_RC > 1)); then
    note "FAIL  archive (tar exit $TAR_RC): the files are in $(basename "$OUT")/, not archived"
    FAILED=1
elif ((SIZE > 16 * 1024)); then
    note "NOTE  gpu-check.tar.gz is ${SIZE} KiB, over 16 MiB: the largest files are $(cd "$OUT" && du -a . | sort -rn | sed -n '2,4p' | awk '{print $2}' | tr '\n' ' ')"
else
    note "      archive: $(basename "$OUT")/gpu-check.tar.gz (${SIZE} KiB), this summary beside it"
fi
((FAILED)) && exit 1
exit 0
