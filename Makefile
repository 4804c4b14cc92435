# The two commands of the README (tests/unit/test_docs.py checks them): `make run` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8501
PYTEST_ARGS ?=
# Python writes a module's bytecode at its first import and reads it at every later one.
# Where the environment forbids writing it (PYTHONDONTWRITEBYTECODE, set on our CI's
# machines), every process compiled vLLM, torch and the rest from source at each start,
# twice the CPU of every import (`import vllm`: 12.7 s, against 5.6 s with its bytecode).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup run test check lint format bench plots docs screenshots

setup:
	bash scripts/setup.sh

run: setup
	$(PY) -m core serve --host $(HOST) --port $(PORT)

# pytest in two phases (scripts/test.sh): the tests not marked serial on one worker per
# core, then those marked serial alone. PYTEST_ARGS go to both. It ends with each phase's
# wall time and the 30 slowest tests.
test:
	SECONDS=0; bash scripts/setup.sh --test && $(PY) -m ruff check . && \
		PY=$(PY) PREPARED_SECONDS=$$SECONDS bash scripts/test.sh $(PYTEST_ARGS)

# The fast tier, for every change: ruff, then the unit and page tests (no engine, no
# browser, no Ray; a few minutes).
check:
	SECONDS=0; bash scripts/setup.sh --test && $(PY) -m ruff check . && \
		PY=$(PY) PREPARED_SECONDS=$$SECONDS bash scripts/test.sh --fast $(PYTEST_ARGS)

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format:
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# Benchmarks print figures (see docs/benchmarks.md); none is part of `make test`. Each
# output is also saved as bench/results/NAME.txt, which `make plots` draws.
BENCHES := throughput ingest check_throughput results_store kill_resume

bench: setup
	mkdir -p bench/results
	set -o pipefail; for name in $(BENCHES); do \
		$(PY) bench/$$name.py | tee bench/results/$$name.txt || exit 1; done
	$(PY) bench/plots.py

# The benchmarks' pictures (docs/images/bench-*.svg) from their saved output.
plots:
	$(PY) bench/plots.py

# The CLI reference (docs/cli.md) from the commands' --help; tests/unit/test_docs.py checks it.
docs:
	$(PY) scripts/cli_docs.py

# The docs' pictures: the browser tests' walk over the sample data (real engine, a few
# minutes), then the shots the docs show, made small, into docs/images/.
screenshots:
	BATCH_STUDIO_SCREENSHOTS=1 BATCH_STUDIO_SHOTS_DIR=/tmp/batch-studio-demo $(PY) -m pytest tests/browser/test_browser.py -m browser -x -q \
		-k "build_and_check or restart_cancel_kill_resume or rules_edited_and_run"
	$(PY) scripts/docs_images.py
