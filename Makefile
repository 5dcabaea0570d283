# gpulab: `make lab` to learn, `make test` to check everything. Needs only Python >= 3.10 and make.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# nbval in strict mode: every code cell's output is compared unless tagged (see tests/nbval_sanitize.cfg).
NBVAL  := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=120
JOBS   ?= 2
NB     ?= notebooks/*.ipynb

.PHONY: install lab test test-browser test-unit test-notebooks notebooks report clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[test]'
	@touch $(STAMP)

# JupyterLab at the repository root (README.md and its notebook index in the file browser), notebook 01 open.
# Extra server options: make lab LAB_ARGS="--no-browser --port=8899"
lab: install
	env -u MPLBACKEND $(BIN)/jupyter lab --ServerApp.root_dir=. notebooks/01_why_gpus.ipynb $(LAB_ARGS)

# Unit, hygiene and notebook tests in one pytest run, two workers, one notebook per worker at a time.
test: install
	env -u MPLBACKEND $(BIN)/python -m pytest -n $(JOBS) --dist loadfile --ignore=tests/browser tests notebooks $(NBVAL)
	$(BIN)/python scripts/nbreport.py notebooks

test-unit: install
	$(BIN)/python -m pytest -n $(JOBS) --dist loadfile --ignore=tests/browser tests

test-notebooks: install
	env -u MPLBACKEND $(BIN)/python -m pytest -n $(JOBS) --dist loadfile notebooks $(NBVAL)

# Re-run every notebook top to bottom in place: the committed outputs come from this.
notebooks: install
	env -u MPLBACKEND $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	    --ExecutePreprocessor.timeout=300 --ExecutePreprocessor.kernel_name=python3 $(NB)
	$(BIN)/python scripts/nbreport.py notebooks

report: install
	$(BIN)/python scripts/nbreport.py notebooks

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info

# The walkthrough in a real browser: JupyterLab + headless Chromium (see tests/browser/).
# Installs Debian's chromium and the `browser` extra when missing; screenshots go to screenshots/.
test-browser: install
	bash scripts/browser_setup.sh
	GPULAB_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -p no:cacheprovider -v -s tests/browser

# Classroom kit (TEACHING.md): student copies, the pre-class check, a wheel for cloud notebooks, section timings.
.PHONY: student student-check preflight wheel timings

# Student edition of every notebook in build/student/ (solutions removed, exercises cleared).
student: install
	$(BIN)/python scripts/student.py --out build/student

# ... and run every student notebook top to bottom.
student-check: install
	env -u MPLBACKEND $(BIN)/python scripts/student.py --out build/student --check

# Will the course run on this machine? Options: make preflight PREFLIGHT_ARGS="--json report.json"
preflight: install
	$(BIN)/gpulab preflight $(PREFLIGHT_ARGS)

# dist/gpulab-VERSION-py3-none-any.whl, to install on a cloud notebook (README: a GPU for learners who have none).
wheel: install
	$(BIN)/python -m pip wheel --quiet --no-deps --wheel-dir dist .

# Run every notebook, time its sections and rewrite the class plans in TEACHING.md (on an idle machine).
timings: install
	env -u MPLBACKEND $(BIN)/python scripts/time_sections.py --write TEACHING.md
