# stave: `make demo` and `make test` are the whole set-up; both build .venv when it is missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# The stamp is rebuilt when the dependency pins or the native part change, so a stale venv is refreshed, not trusted.
STAMP := $(VENV)/.stave-installed

.PHONY: venv demo test test-fast bench bench-scenarios clean

venv: $(STAMP)

$(STAMP): pyproject.toml setup.py $(wildcard src/stave/_native/*.c src/stave/_native/*.h)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(VENV)/.stave-bench-installed: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	@touch $@

demo: venv
	$(VENV)/bin/stave demo

test: venv
	$(PY) -m pytest -q

test-fast: venv
	$(PY) -m pytest -q -m "not slow and not dist"

bench: venv $(VENV)/.stave-bench-installed
	$(PY) -m stave.bench.run_all

# The scenario matrix (issue 14): hours on a 2-core machine; results in benchmarks/results/, table in docs/benchmarks.md.
bench-scenarios: venv
	PYTHONPATH=src $(PY) benchmarks/scenarios.py --write-docs

clean:
	rm -rf $(VENV) build *.egg-info src/*.egg-info .pytest_cache
