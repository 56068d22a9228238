# The two commands of the README:
#   make course   executes every lesson on this machine and writes runs/<timestamp>/
#   make test     runs the whole test suite (unit tests + every notebook, smoke profile)
# Both create .venv and install the course into it when needed.

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
KERNEL := largebatch-course
TS     := $(shell date +%Y%m%d-%H%M%S)

.PHONY: course test lab kernel install exercises clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall when the dependency list changes. torch is pinned in pyproject.toml.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

# A Jupyter kernel named for the course, pointing at this venv (per user, no root needed).
kernel: $(STAMP)
	$(PY) -m ipykernel install --user --name $(KERNEL) --display-name "Python (large-batch course)" >/dev/null
	@echo "Jupyter kernel '$(KERNEL)' registered for $(PY)"

course: kernel
	@mkdir -p runs
	$(PY) ci/run_notebooks.py --kernel $(KERNEL) --out runs/$(TS) notebooks
	@ln -sfn $(TS) runs/latest && echo "Executed lessons and summary: runs/$(TS) (also runs/latest)"

test: $(STAMP)
	bash ci/test.sh

# Learner notebooks are generated from the solved ones; tests fail when they drift.
exercises: $(STAMP)
	$(PY) ci/make_exercises.py

lab: kernel
	$(VENV)/bin/jupyter lab --notebook-dir=.

clean:
	rm -rf ci/executed .pytest_cache
