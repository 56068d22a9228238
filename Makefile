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

.PHONY: course test lint lab kernel install exercises clean wheelhouse image book

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Reinstall when the dependency list changes. torch is pinned in pyproject.toml.
$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev,book]'
	touch $(STAMP)

install: $(STAMP)

# A Jupyter kernel named for the course, pointing at this venv (per user, no root needed).
# GOMP_SPINCOUNT: how long torch's idle OpenMP threads spin before they sleep. libgomp's default (300,000) is
# fastest alone and collapses beside other jobs (a shared login node; make test beside make course): NeuMF's
# batch-256 step took 25x its quiet time beside 4 busy processes on 2 cores, 6x with 10,000, which costs
# 1.1-1.3x quiet (ci/bench_openmp.py measures both on this machine). `make kernel GOMP_SPINCOUNT=...` sets another.
GOMP_SPINCOUNT ?= 10000
kernel: $(STAMP)
	$(PY) -m ipykernel install --user --name $(KERNEL) --display-name "Python (large-batch course)" \
	  --env GOMP_SPINCOUNT $(GOMP_SPINCOUNT) >/dev/null
	@echo "Jupyter kernel '$(KERNEL)' registered for $(PY)"

course: kernel
	@mkdir -p runs
	$(PY) ci/run_notebooks.py --kernel $(KERNEL) --out runs/$(TS) notebooks
	@ln -sfn $(TS) runs/latest && echo "Executed lessons and summary: runs/$(TS) (also runs/latest)"

# ci/browser-deps.sh: Debian's chromium for the browser tests, installed once when root (else they skip);
# ci/book-deps.sh: Debian's libjs-mathjax for the book's test, the same way.
test: $(STAMP)
	@bash ci/browser-deps.sh
	@bash ci/book-deps.sh
	bash ci/test.sh

# The linter (ruff, pinned in the dev extra, configured in pyproject.toml): `make test` fails on what it
# finds; `make lint` fixes what it can fix by itself and lists the rest.
lint: $(STAMP)
	$(VENV)/bin/ruff check --fix course_lib tests ci notebooks solutions exercises

# Learner notebooks are generated from the solved ones; tests fail when they drift.
exercises: $(STAMP)
	$(PY) ci/make_exercises.py

# For an offline GPU node: every dependency except torch, as wheels, into wheelhouse/ (run it
# where PyPI is reachable; copy the folder with the checkout). WHEEL_PYTHON is the GPU node's
# Python (default: this venv's); ci/gpu-check.sh installs from the folder with no index.
WHEEL_PYTHON ?= $(shell $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
wheelhouse: $(STAMP)
	@mkdir -p wheelhouse
	$(PY) ci/requirements.py > wheelhouse/requirements.txt
	$(PY) -m pip download --quiet --dest wheelhouse --only-binary=:all: --python-version $(WHEEL_PYTHON) \
	  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
	  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -r wheelhouse/requirements.txt
	@echo "wheelhouse/: $$(ls wheelhouse/*.whl | wc -l) wheels for Python $(WHEEL_PYTHON) (torch not included: the GPU node's own)"

# The course as an OCI image (CPU), built with podman from Debian's packages and PyPI's wheels (container/build.sh);
# its last line is the image's name. container/course.def turns it into an Apptainer .sif (docs/instructors.md).
image: $(STAMP)
	@bash ci/container-deps.sh
	@PY=$(PY) bash container/build.sh

# The course as a static site that works offline: docs/ with the executed lessons of the latest `make course`
# (runs/latest; else make test's smoke copies, ci/executed), never executing one. Sphinx and myst-nb come from the
# book extra, MathJax from Debian's libjs-mathjax. Writes build/book/html and build/book/course-book.zip (for an
# LMS or an offline node); its last line is the path of the built index.html.
book: $(STAMP)
	@bash ci/book-deps.sh
	$(PY) ci/build_book.py

lab: kernel
	$(VENV)/bin/jupyter lab --notebook-dir=.

clean:
	rm -rf ci/executed .pytest_cache build/book
