# Every target does its own set-up: a fresh clone needs only Python 3.11, Java 17 and Maven.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: setup jars test test-connect check test-unit lint demo notebooks bench soak clean

setup: $(STAMP) jars

$(STAMP): pyproject.toml requirements.lock
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c requirements.lock -e '.[spark,test]'
	touch $@

# Resolves Delta, Spark's Kafka connector and the Kafka broker from Maven Central once.
jars: $(STAMP)
	$(BIN)/python -m ingest.platform.jars

# The whole suite, what CI runs; where its time went: .ingest/test-durations.json
# (`python -m tests.timing .ingest/test-durations.json` prints it as tables).
# Two workers (pytest-xdist), each with its own broker and SparkSession; a file's tests stay on one
# worker, so a module's fixture (the cluster, the demo's tables) is built once.
test: setup
	mkdir -p .ingest
	INGEST_DURATIONS=.ingest/test-durations.json $(BIN)/python -m pytest tests -n 2 --dist loadfile

# The suite on Spark Connect (a server this process starts), in a pytest process of its own: a
# Connect server does not start beside a classic session, so `make test` leaves tests/connect out.
test-connect: setup
	$(BIN)/pip install -q -c requirements.lock -e '.[connect]'
	$(BIN)/python -m pytest tests/connect -q

# The fast loop while developing: unit and Spark tests, no broker.
check: setup
	$(BIN)/python -m pytest tests/unit tests/spark -q

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit -q

# ruff (style, imports, bugbear, pyupgrade) and mypy on ingest/; both configured in pyproject.toml
lint: $(STAMP)
	$(BIN)/pip install -q -c requirements.lock -e '.[lint]'
	$(BIN)/python -m ruff check ingest tests bench
	$(BIN)/python -m mypy

demo: setup
	$(BIN)/python -m ingest demo

# The notebooks re-run in place on a fresh demo's tables (the notebook test's own set-up),
# to be committed with their outputs, cleaned of the run's folders and times
# (tests/notebook_outputs.py).
notebooks: setup
	INGEST_WRITE_NOTEBOOKS=1 $(BIN)/python -m pytest tests/integration/test_notebooks.py \
		-k runs_top_to_bottom --basetemp /tmp/ingest-notebooks -q

bench: setup
	$(BIN)/pip install -q -c requirements.lock -e '.[bench]'
	bench/run --quick

# Not in `make test`: one continuous `ingest run` at 300 records/s for SOAK_MINUTES (its first two
# thirds with no fault, its last third with a SIGKILL every 3 minutes and a broker restart), then
# `ingest verify` and an exact count; memory and batch time of the last third of the steady phase
# against its middle third. Figures in .ingest/soak/<time>/soak.json (docs/production.md).
# An hour: make soak SOAK_MINUTES=60
SOAK_MINUTES ?= 30
soak: setup
	$(BIN)/pip install -q -c requirements.lock -e '.[bench]'
	$(BIN)/python -m bench.soak.run --minutes $(SOAK_MINUTES)

clean:
	rm -rf $(VENV) .ingest .pytest_cache
