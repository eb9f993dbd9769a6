# stave: `make demo` and `make test` are the whole set-up; both build .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The stamp is rebuilt when the dependency pins or the native part change, so a stale venv is refreshed, not trusted.
STAMP := $(VENV)/.stave-installed
# constraints.txt holds the exact torch/torchvision of the dev venv and CI; pyproject.toml only the supported range.
CONSTRAINTS := -c constraints.txt
# `make compat`: the fast tests on the oldest torch stave declares (pyproject.toml), in a venv of its own.
# COMPAT_PIP_FLAGS=--isolated makes pip ignore a machine's pip config (one that offers a CPU-only torch
# file beside which PyPI's torchvision does not load); docs/install.md has the run and its result.
COMPAT_VENV ?= .venv-compat
COMPAT_TORCH ?= torch==2.13.0 torchvision==0.28.0
COMPAT_PIP_FLAGS ?=

.PHONY: venv demo test test-fast compat bench bench-scenarios clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py constraints.txt $(wildcard src/stave/_native/*.c src/stave/_native/*.h)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet $(CONSTRAINTS) -e '.[dev]'
	@touch $(STAMP)

$(VENV)/.stave-bench-installed: $(STAMP)
	$(PY) -m pip install --quiet $(CONSTRAINTS) -e '.[dev,bench]'
	@touch $@

demo: venv
	$(VENV)/bin/stave demo

test: venv
	$(PY) -m pytest -q

test-fast: venv
	$(PY) -m pytest -q -m "not slow and not dist"

# torch goes in first and stave's install must leave it alone (the same order as a user's own environment).
compat:
	rm -rf $(COMPAT_VENV)
	$(PYTHON) -m venv $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pip install $(COMPAT_PIP_FLAGS) --quiet $(COMPAT_TORCH)
	$(COMPAT_VENV)/bin/python -m pip install --quiet -e '.[dev]'
	$(COMPAT_VENV)/bin/python -c 'import sys, torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__); sys.exit(not torch.__version__.startswith("$(word 2,$(subst ==, ,$(word 1,$(COMPAT_TORCH))))"))'
	$(COMPAT_VENV)/bin/python -m pytest -q -m "not slow and not dist" -p no:cacheprovider

bench: venv $(VENV)/.stave-bench-installed
	$(PY) -m benchmarks.run_all

# The scenario matrix (issue 14): hours on a 2-core machine; results in benchmarks/results/, table in docs/benchmarks.md.
bench-scenarios: venv
	PYTHONPATH=src $(PY) benchmarks/scenarios.py --write-docs

clean:
	rm -rf $(VENV) $(COMPAT_VENV) build *.egg-info src/*.egg-info .pytest_cache
