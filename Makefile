# The front door: two commands on a fresh clone, each setting up what it needs on first use.
#   make demo    a real incident on an embedded PostgreSQL, then the on-call's commands
#   make test    the test suite (an embedded PostgreSQL, or JOBCTL_TEST_DSN=... for your own)
# The virtual environment is .venv (VENV=... for another); it is made, and the project
# installed into it with every extra, when missing or older than pyproject.toml.
# `make test ARGS='tests/unit'` passes arguments to pytest. `.ci/run` runs `make test`.

VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed

.PHONY: demo test venv lint

demo: $(STAMP)
	$(VENV)/bin/jobctl demo

test: $(STAMP)
	$(VENV)/bin/pytest $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check jobctl tests
	$(VENV)/bin/ruff format --check jobctl tests
	$(VENV)/bin/mypy

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[demo,tui,doctor,test]'
	touch $@
