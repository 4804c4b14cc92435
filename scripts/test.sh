#!/usr/bin/env bash
# `make test`'s pytest, in two phases (docs/tests.md); arguments go to both, e.g. -k NAME.
#
#   1. the tests not marked serial, on one pytest-xdist worker per core (at most 4: each
#      may hold a loaded model); tests/conftest.py binds each worker's engines to its core
#   2. the tests marked serial (they time something, or start a Ray cluster), alone
#
# Both phases run; a phase that selects no test (exit 5) passes unless neither selects one.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-${VENV:-.venv}/bin/python}

workers=$(nproc)
if [ "$workers" -gt 4 ]; then workers=4; fi
if [ "$workers" -lt 2 ]; then workers=0; fi  # one core: no worker processes

"$PY" -m pytest --phase parallel -n "$workers" "$@"
parallel=$?
"$PY" -m pytest --phase serial "$@"
serial=$?

if [ "$parallel" = 5 ] && [ "$serial" = 5 ]; then exit 5; fi
for status in "$parallel" "$serial"; do
  if [ "$status" != 0 ] && [ "$status" != 5 ]; then exit "$status"; fi
done
exit 0
