# The two commands a newcomer needs (each does its own set-up on a fresh machine):
#   make demo   rmqd on its embedded default + a short produce/consume demo
#   make test   the whole test suite (lint, unit, integration with real rmqd processes, C++ client, Spark)
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo test install install-test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/pip install -q -e ".[fast]"

install-test: $(BIN)/python
	$(BIN)/pip install -q -e ".[test,spark]" -e tests/fake_plugin

demo: install
	$(BIN)/python examples/demo.py

lint: install-test
	$(BIN)/ruff check .

test: install-test
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -ra

bench: install-test
	$(BIN)/python bench/store.py --quick
	$(BIN)/python bench/broker.py --quick

clean:
	rm -rf $(VENV) rmq-store
