# The two commands README.md promises; both create/verify the pinned
# environment in .venv first (idempotent, seconds when it is up to date).
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PYTEST_ARGS ?=
# Test workers (pytest-xdist): one per core of a 2-core CI machine; each
# worker's torch takes its share of the cores (tests/conftest.py).
WORKERS ?= 2

.PHONY: env demo test

env:
	VENV=$(VENV) bash tools/setup_env.sh

demo: env
	$(PYTHON) tools/demo.py

test: env
	$(PYTHON) -m pytest -q -n $(WORKERS) --dist worksteal $(PYTEST_ARGS)
