#!/usr/bin/env bash
# `make test`'s and `make check`'s pytest (docs/tests.md); arguments go to pytest, e.g. -k NAME.
#
#   scripts/test.sh          every test, in two phases:
#     1. the tests not marked serial, on one pytest-xdist worker per core (at most 4: each
#        may hold a loaded model); tests/conftest.py binds each worker's engines to its core
#     2. the tests marked serial (they time something), alone
#   scripts/test.sh --fast   the fast tier: tests/unit and tests/pages (no engine, no
#                            browser, no Ray), on one worker per core
#
# Every phase runs; a phase that selects no test (exit 5) passes unless none selects one.
# At the end it prints each phase's wall time and the 30 slowest tests of the run
# (scripts/test_report.py, from each phase's JUnit XML).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-${VENV:-.venv}/bin/python}
unset PYTHONDONTWRITEBYTECODE  # each module compiled once, not in every process (Makefile)

tier=all
if [ "${1:-}" = "--fast" ]; then tier=fast; shift; fi

# TEST_WORKERS overrides the count (0: no worker processes).
workers=${TEST_WORKERS:-$(nproc)}
if [ -z "${TEST_WORKERS:-}" ] && [ "$workers" -gt 4 ]; then workers=4; fi
if [ -z "${TEST_WORKERS:-}" ] && [ "$workers" -lt 2 ]; then workers=0; fi  # one core: none

reports=$(mktemp -d)
# The fast tier keeps the tests' homes (pytest's basetemp) on a RAM disk where the machine
# has one with room: the product syncs each job file and result chunk to disk, and DuckDB
# its log at each commit, which cost 2.5-7 ms each on this disk and made the unit and page
# tests wait 1.75x as long (docs/tests.md). Not every test: beside the engines, Ray's
# cluster and the browsers, memory is what runs short, and a RAM disk's files hold memory
# (all of make test on it was not faster: docs/tests.md). TEST_BASETEMP=DIR
# puts them elsewhere. Passed tests' folders go as they pass (tmp_path_retention_policy).
basetemp=${TEST_BASETEMP:-}
if [ -z "$basetemp" ] && [ "$tier" = fast ] && [ -d /dev/shm ] && [ -w /dev/shm ] &&
  [ "$(df -Pk /dev/shm | awk 'NR == 2 {print $4}')" -gt $((4 << 20)) ]; then
  basetemp=$(mktemp -d /dev/shm/batch-studio-tests.XXXXXX)
  owned_basetemp=$basetemp
fi
trap 'rm -rf "$reports" ${owned_basetemp:+"$owned_basetemp"}' EXIT
statuses=()
timings=()
# set-up and ruff, timed by the Makefile
if [ -n "${PREPARED_SECONDS:-}" ]; then timings+=("set-up+ruff=$PREPARED_SECONDS"); fi

phase() {  # NAME PYTEST-ARGS...: runs one phase, noting its status and wall time
  local name=$1 started=$SECONDS status
  shift
  "$PY" -m pytest --junitxml="$reports/$name.xml" ${basetemp:+--basetemp="$basetemp/$name"} "$@"
  status=$?
  statuses+=("$status")
  timings+=("$name=$((SECONDS - started))")
}

if [ "$tier" = fast ]; then
  phase fast tests/unit tests/pages -n "$workers" "$@"
else
  phase parallel --phase parallel -n "$workers" "$@"
  phase serial --phase serial "$@"
fi

"$PY" scripts/test_report.py "$reports" "${timings[@]}"

all_empty=1
for status in "${statuses[@]}"; do [ "$status" = 5 ] || all_empty=0; done
if [ "$all_empty" = 1 ]; then exit 5; fi
for status in "${statuses[@]}"; do
  if [ "$status" != 0 ] && [ "$status" != 5 ]; then exit "$status"; fi
done
exit 0
