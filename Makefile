# The two commands of the README: `make run` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8501
PYTEST_ARGS ?=

.PHONY: setup run test lint format bench

setup:
	bash scripts/setup.sh

run: setup
	$(PY) -m core serve --host $(HOST) --port $(PORT)

test:
	bash scripts/setup.sh --test
	$(PY) -m ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

lint:
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

format:
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# Benchmarks print figures (see README "Benchmarks"); none is part of `make test`.
bench: setup
	$(PY) bench/throughput.py
	$(PY) bench/ingest.py
	$(PY) bench/check_throughput.py
	$(PY) bench/results_store.py
	$(PY) bench/kill_resume.py
