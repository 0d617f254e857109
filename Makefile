# The two commands a newcomer needs (each does its own set-up on a fresh machine):
#   make demo   rmqd on its embedded default + a short produce/consume demo
#   make test   lint + the test suite on pytest-xdist workers (unit, integration with real rmqd processes,
#               C++ and 5.x clients, Spark, the fault matrix's fast slice); not the slow tiers below
# Tiers (markers in pyproject.toml, the rule in tests/conftest.py):
#   make test-fast  the inner loop, under 90 s: the tests that start no process (no rmqd, no client workers,
#               no Spark, no Java): codecs, kernel, stores, filters, allocators, client logic. Tests that start
#               processes are `integration` (set automatically for the rmqd / rmqd_factory / spark fixtures,
#               else marked on the test or its module); one left unmarked fails under --fast
#   make slow   the `slow` tests: controller failover and role changes (the C++ client's too, and its push consumer
#               across a master/slave failover), crash loops, POP failover and POP invisible times across
#               restarts, timer SIGKILL, the README's Spark snippet in a fresh process
#   make faults the fault matrix: every message flow through every fault, printed as a table
#   make faults-pure   the same matrix with RMQ_PURE=1 (every rmqd on the pure-Python path)
#   make fuzz   the fuzz properties (decoders, SQL92, client peer data) with >= 1M inputs; prints count and time
#   make fuzz-asan  the compiled codec's and store append's differential properties against AddressSanitizer/UBSan builds
#   make fuzz-long  FUZZ_INPUTS (10M) mutated inputs straight into every compiled entry point, AddressSanitizer/UBSan builds
#   make java   the Java judge: RocketMQ 4.9.8's client, mqadmin and broker beside rmqd (needs ../shared/java)
#   make chaos  the nemesis (issue #31): partitions and pauses on per-node loopback addresses (nftables, as root)
# CI (.ci/run) runs make test, then make slow, make faults, make faults-pure, make chaos and make java.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# the official RocketMQ 5 Python SDK (gRPC) for the compatibility tests, in a venv of its own
VENV5  ?= .venv5
# pytest-xdist workers: tests mostly wait on daemons, so more workers than cores pay (measured on 2 cores);
# the failover and fault tiers judge recovery times, so they share the machine with fewer at once
XDIST  ?= 4
XDIST_SLOW ?= 2
PYTEST  = $(BIN)/python -m pytest -q -ra
# tests start hundreds of rmqd processes: with bytecode writes off (some environments set this) each one
# compiles rmq from source again, and pytest rewrites every test module's asserts on every run
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast slow faults faults-pure chaos chaos-deps java java-deps fuzz fuzz-asan fuzz-long install install-test lint bench clean protos

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

install: $(BIN)/python
	$(BIN)/python -m pip install -q -e ".[fast]"

# once per virtualenv, again when an install's pyproject.toml changes (entry points): the inner loop skips it;
# the compiled codec and store append (protocol/_fastframe.c, _faststore.c, issue #30) are rebuilt in place whenever their source changes
install-test: $(VENV)/.install-test $(VENV)/.fastframe

# pip's editable install builds the extension next to its source (setup.py, optional: without a compiler
# rmq runs on the pure path and rmqd's start line says "codec pure")
FAST_SOURCES = $(wildcard protocol/_fast*.c protocol/_fast*.h)
$(VENV)/.fastframe: $(FAST_SOURCES) setup.py | $(VENV)/.install-test
	$(BIN)/python -m pip install -q --no-deps -e .
	touch $@

$(VENV)/.install-test: pyproject.toml tests/fake_plugin/pyproject.toml | $(BIN)/python $(VENV5)/bin/python
	$(BIN)/python -m pip install -q -e ".[test,spark]" -e tests/fake_plugin
	@# the dashboard's browser tests drive Debian's chromium (playwright's own browser download is not used)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
	$(BIN)/python -m rmq.connectors.spark.discovery
	touch $@

$(VENV5)/bin/python:
	$(PYTHON) -m venv $(VENV5)
	$(VENV5)/bin/python -m pip install -q "rocketmq-python-client==5.1.2"

# regenerate the gRPC code of the RocketMQ 5 endpoint from the vendored protos (needs grpcio-tools 1.85.1)
protos:
	cd plugins/grpc_proxy && ../../$(BIN)/python -m grpc_tools.protoc -Iprotos --python_out=v2 --grpc_python_out=v2 \
		apache/rocketmq/v2/definition.proto apache/rocketmq/v2/service.proto
	mv plugins/grpc_proxy/v2/apache/rocketmq/v2/*.py plugins/grpc_proxy/v2/ && rm -rf plugins/grpc_proxy/v2/apache \
		plugins/grpc_proxy/v2/definition_pb2_grpc.py
	sed -i 's/^from apache.rocketmq.v2 import/from rmq.plugins.grpc_proxy.v2 import/' plugins/grpc_proxy/v2/*_pb2*.py

demo: install
	$(BIN)/python examples/demo.py

lint: install-test
	$(BIN)/ruff check .

test: install-test
	$(BIN)/ruff check .
	$(PYTEST) -n $(XDIST) --dist loadgroup -m "not faults and not slow and not java and not chaos"

test-fast: install-test
	$(PYTEST) -n 2 --fast

slow: install-test
	$(PYTEST) -n $(XDIST_SLOW) --dist loadgroup -m slow

# The fault matrix (issue #27): every flow through every fault with real clients, then the matrix
# (cells x pass/fail, counts, recovery time). `make test` runs its fast slice (unmarked cells).
faults: install-test
	$(PYTEST) -n $(XDIST_SLOW) --dist loadgroup -m faults --timeout=600 tests/faults

# The same matrix with every rmqd (and the test process) on the pure-Python reference path (issue #30:
# the compiled data plane must pass it, and so must the path it is compared with).
faults-pure: install-test
	RMQ_PURE=1 $(PYTEST) -n $(XDIST_SLOW) --dist loadgroup -m faults --timeout=600 tests/faults

# The nemesis (issue #31): partitions and pauses on per-node loopback addresses, with nftables (as root).
chaos-deps:
	@command -v nft >/dev/null || [ -x /usr/sbin/nft ] || (apt-get update -qq && apt-get install -y -qq nftables)

# make chaos: the fixed schedules and a short soak; make chaos SECONDS=N: only the soak, for N seconds
chaos: install-test chaos-deps java-deps  # Java: the shim test and the Java clients in the histories
ifdef SECONDS
	RMQ_CHAOS_SECONDS=$(SECONDS) $(PYTEST) -p no:xdist -m chaos --timeout=$(shell expr $(SECONDS) + 900) \
		tests/nemesis/test_soak.py
else
	$(PYTEST) -p no:xdist -m chaos --timeout=900 tests/nemesis
endif

# The Java judge (issue #29): Apache RocketMQ 4.9.8's client, mqadmin and broker beside rmqd. The build lives in
# RMQ_JAVA_HOME (default ../shared/java beside the checkout, else /work/shared/java); its ensure.sh installs the JDK and Debian jars it runs on.
RMQ_JAVA_HOME ?= $(firstword $(wildcard $(abspath ../shared/java)/ensure.sh /work/shared/java/ensure.sh))
RMQ_JAVA_HOME := $(patsubst %/ensure.sh,%,$(RMQ_JAVA_HOME))
export RMQ_JAVA_HOME
java-deps:
	@if [ -f "$(RMQ_JAVA_HOME)/ensure.sh" ]; then bash -c '. "$(RMQ_JAVA_HOME)/ensure.sh"'; \
	else echo "no RocketMQ 4.9.8 build at $(RMQ_JAVA_HOME) (set RMQ_JAVA_HOME): the java tier is skipped" >&2; fi

java: install-test java-deps
	$(PYTEST) -n $(XDIST_SLOW) -m java --timeout=900 tests/compat/java

# Same properties as in `make test` (profile rmq-quick), here with FUZZ_EXAMPLES examples each (profile
# rmq-fuzz, see rmq.testing.fuzz). The total counts every passing generated input.
FUZZ_EXAMPLES ?= 50000
FUZZ_TESTS = tests/protocol/test_fuzz_frames.py tests/protocol/test_fastframe_diff.py tests/protocol/test_fastrecord_diff.py \
             tests/plugins/storage_mmap/test_faststore_diff.py tests/plugins/storage_mmap/test_faststore_cq_diff.py \
             tests/plugins/storage_mmap/test_fastsend_fuzz.py tests/plugins/storage_mmap/test_faststore_reput_diff.py \
             tests/plugins/storage_mmap/test_fastpull_fuzz.py tests/protocol/test_pulldecode_diff.py \
             tests/protocol/test_fuzz_messages.py tests/protocol/test_javaprops.py tests/plugins/grpc_proxy/test_receipt_fuzz.py \
             tests/plugins/grpc_proxy/test_port_fuzz.py \
             tests/plugins/replication/test_frames.py \
             tests/client/test_fuzz_peer_data.py tests/plugins/filters/test_sql92_fuzz.py
# $(call fuzz_run,ENV,TESTS,LOG): the properties with the rmq-fuzz profile, then the count of inputs and the time
fuzz_run = start=$$(date +%s); \
	$(1) RMQ_FUZZ=1 RMQ_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -ra --timeout=0 \
		--hypothesis-show-statistics $(2) > $(3) 2>&1; rc=$$?; \
	grep -E "^(FAILED|ERROR)|[0-9]+ (passed|failed)" $(3) | tail -8; \
	[ $$rc -eq 0 ] || tail -80 $(3); \
	awk '/during generate phase/ {g = 1} g && $$3 ~ /^passing/ {n += $$2; g = 0} \
		END {printf "fuzz: %d inputs", n}' $(3); \
	echo " in $$(( $$(date +%s) - start )) s (statistics: $(3))"
fuzz: install-test
	@$(call fuzz_run,,$(FUZZ_TESTS),$(VENV)/fuzz.log); exit $$rc

# The compiled codec's and store append's properties against AddressSanitizer/UBSan builds of them
# (RMQ_FASTFRAME / RMQ_FASTSTORE name the builds the tests load; the sanitizer runtime must be preloaded).
FUZZ_ASAN_TESTS = tests/protocol/test_fastframe_diff.py tests/protocol/test_fastrecord_diff.py \
                  tests/plugins/storage_mmap/test_faststore_diff.py \
                  tests/plugins/storage_mmap/test_faststore_cq_diff.py tests/plugins/storage_mmap/test_fastsend_fuzz.py \
                  tests/plugins/storage_mmap/test_faststore_reput_diff.py tests/plugins/storage_mmap/test_fastpull_fuzz.py \
                  tests/protocol/test_pulldecode_diff.py tests/protocol/test_beatdecode_diff.py
EXT_SUFFIX = $(shell $(BIN)/python -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
PY_INCLUDE = $(shell $(BIN)/python -c "import sysconfig; print(sysconfig.get_paths()['include'])")
fuzz-asan: install-test
	@d=$$(mktemp -d); so=$$d/_fastframe$(EXT_SUFFIX); so2=$$d/_faststore$(EXT_SUFFIX); \
	for m in _fastframe _faststore; do gcc -shared -fPIC -std=c11 -O1 -g -fsanitize=address,undefined \
		-fno-sanitize-recover=undefined -fno-omit-frame-pointer -I$(PY_INCLUDE) protocol/$$m*.c \
		-o $$d/$$m$(EXT_SUFFIX) || { rm -rf $$d; exit 1; }; done; \
	$(call fuzz_run,RMQ_FASTFRAME=$$so RMQ_FASTSTORE=$$so2 LD_PRELOAD=$$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0 \
		UBSAN_OPTIONS=print_stacktrace=1,$(FUZZ_ASAN_TESTS),$(VENV)/fuzz-asan.log); \
	rm -rf $$d; exit $$rc

# The mutation driver (rmq.testing.fuzzdrive): FUZZ_INPUTS inputs into the compiled entry points of the sanitizer
# builds (kept in $(VENV)/fuzz-asan for the replay command it prints), FUZZ_JOBS workers; a crashing input is
# saved under $(VENV)/fuzz-crashes. `make test` runs 20k inputs of it on the plain build (tests/protocol/test_fuzzdrive.py).
FUZZ_INPUTS ?= 10000000
FUZZ_JOBS ?= 2
ASAN_DIR = $(VENV)/fuzz-asan
$(ASAN_DIR)/.built: $(FAST_SOURCES) | $(VENV)/.install-test
	mkdir -p $(ASAN_DIR)
	for m in _fastframe _faststore; do gcc -shared -fPIC -std=c11 -O1 -g -fsanitize=address,undefined \
		-fno-sanitize-recover=undefined -fno-omit-frame-pointer -I$(PY_INCLUDE) protocol/$$m*.c \
		-o $(ASAN_DIR)/$$m$(EXT_SUFFIX) || exit 1; done
	touch $@
fuzz-long: install-test $(ASAN_DIR)/.built
	$(BIN)/python -m rmq.testing.fuzzdrive --inputs $(FUZZ_INPUTS) --jobs $(FUZZ_JOBS) --asan $(ASAN_DIR) \
		--crash-dir $(VENV)/fuzz-crashes

bench: install-test
	$(BIN)/python bench/store.py --quick
	$(BIN)/python bench/broker.py --quick

clean:
	rm -rf $(VENV) $(VENV5) rmq-store
