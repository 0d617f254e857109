# The two commands a newcomer needs (each does its own set-up on a fresh machine):
#   make demo   rmqd on its embedded default + a short produce/consume demo
#   make test   the whole test suite (lint, unit, integration with real rmqd processes, C++ client, Spark)
#   make fuzz   the fuzz properties (decoders, SQL92, client peer data) with >= 1M inputs; prints count and time
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: demo test fuzz install install-test lint bench clean

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

# Same properties as in `make test` (profile rmq-quick), here with FUZZ_EXAMPLES examples each (profile
# rmq-fuzz, see rmq.testing.fuzz). The total counts every passing generated input.
FUZZ_EXAMPLES ?= 50000
FUZZ_TESTS = tests/protocol/test_fuzz_frames.py tests/protocol/test_fuzz_messages.py \
             tests/plugins/replication/test_frames.py \
             tests/client/test_fuzz_peer_data.py tests/plugins/filters/test_sql92_fuzz.py
fuzz: install-test
	@start=$$(date +%s); \
	RMQ_FUZZ=1 RMQ_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -ra --timeout=0 \
		--hypothesis-show-statistics $(FUZZ_TESTS) > $(VENV)/fuzz.log 2>&1; rc=$$?; \
	grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" $(VENV)/fuzz.log | tail -8; \
	[ $$rc -eq 0 ] || tail -80 $(VENV)/fuzz.log; \
	awk '/during generate phase/ {g = 1} g && $$3 ~ /^passing/ {n += $$2; g = 0} \
		END {printf "fuzz: %d inputs", n}' $(VENV)/fuzz.log; \
	echo " in $$(( $$(date +%s) - start )) s (statistics: $(VENV)/fuzz.log)"; \
	exit $$rc

bench: install-test
	$(BIN)/python bench/store.py --quick
	$(BIN)/python bench/broker.py --quick

clean:
	rm -rf $(VENV) rmq-store
