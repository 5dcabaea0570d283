# gpulab: `make lab` to learn, `make test` to check everything. Needs only Python >= 3.10 (and make).
# Every target runs `python course.py TARGET`, which holds the commands; without make (Windows) run
# `py course.py TARGET` directly. `python course.py TARGET --dry-run` prints what a target runs.
PYTHON ?= python3
COURSE := $(PYTHON) course.py
JOBS   ?= 2
NB     ?= notebooks/*.ipynb

.PHONY: install lab test test-browser test-unit test-notebooks notebooks report clean

install:
	$(COURSE) install

# JupyterLab at the repository root (README.md and its notebook index in the file browser), notebook 01 open.
# Extra server options: make lab LAB_ARGS="--no-browser --port=8899". The Chinese edition: make lab ZH=1
lab:
	$(COURSE) lab $(if $(ZH),--zh )-- $(LAB_ARGS)

# Unit, hygiene and notebook tests in one pytest run, two workers, one notebook per worker at a time.
test:
	$(COURSE) test --jobs $(JOBS)

test-unit:
	$(COURSE) test-unit --jobs $(JOBS)

test-notebooks:
	$(COURSE) test-notebooks --jobs $(JOBS)

# Re-run every notebook top to bottom in place: the committed outputs come from this.
notebooks:
	$(COURSE) notebooks $(NB)

report:
	$(COURSE) report

clean:
	$(COURSE) clean

# The walkthrough in a real browser: JupyterLab + headless Chromium (see tests/browser/).
# Installs Debian's chromium and the `browser` extra when missing; screenshots go to screenshots/.
test-browser:
	$(COURSE) test-browser

# Classroom kit (TEACHING.md): student copies and the answer key, the pre-class check, a wheel, section timings.
.PHONY: student student-check answers preflight wheel timings

# Student edition in build/student/ and build/student.zip (solutions removed, exercises cleared), and the
# teacher's answer key build/answers.md (kept out of the student edition).
student:
	$(COURSE) student

# ... and run every student notebook top to bottom.
student-check:
	$(COURSE) student-check

# Only the answer key.
answers:
	$(COURSE) answers

# Will the course run on this machine? Options: make preflight PREFLIGHT_ARGS="--json report.json"
preflight:
	$(COURSE) preflight -- $(PREFLIGHT_ARGS)

# dist/gpulab-VERSION-py3-none-any.whl, to install on a cloud notebook (README: a GPU for learners who have none).
wheel:
	$(COURSE) wheel

# Run every notebook, time its sections and rewrite the class plans in TEACHING.md (on an idle machine).
timings:
	$(COURSE) timings
