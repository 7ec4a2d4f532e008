# The two commands README.md promises; both create/verify the pinned
# environment in .venv first (idempotent, seconds when it is up to date).
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: env demo test

env:
	VENV=$(VENV) bash tools/setup_env.sh

demo: env
	$(PYTHON) tools/demo.py

test: env
	$(PYTHON) -m pytest -q $(PYTEST_ARGS)
