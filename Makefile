# Two commands set up a fresh machine: `make demo` (main job) and `make test` (whole suite).
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
SPECS   := $(wildcard specs/*.yaml)

.PHONY: install demo test test-gpu render compile wheels device-check clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[torch,test]'
	touch $(STAMP)

install: $(STAMP)

# The main job: validate, render every shipped spec, compile every variant for every target.
demo: install
	$(BIN)/kgen validate $(SPECS)
	$(BIN)/kgen render $(SPECS)
	$(BIN)/kgen compile $(SPECS)

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) .whl build *.egg-info
