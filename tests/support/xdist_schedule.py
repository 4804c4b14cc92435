"""How `make test`'s first phase shares the tests among pytest-xdist workers (docs/tests.md).

As with xdist's ``--dist load``, a worker that runs short takes the next test, with four
exceptions: the tests that start a Ray cluster (``tests/ray/``: no test elsewhere starts Ray)
are one unit, run in order by a single worker, so that two clusters (about 6 GB and two
engines each) never run at once; the engine tests (``tests/engine/``) are one unit, so that
one worker starts the run's warm engine (tests/support/warm_engine.py: one per pytest
process) and loads its models once, not once per worker; each browser module is one unit,
so that its tests share one server; and the unit and page modules that import vLLM or
torch are one unit, so that one worker imports them (about 20 s), not each. xdist's own
``--dist loadgroup`` would do this but, in pytest-xdist 3.8 under pytest 9, groups
nothing: it renames ``item._nodeid``, which pytest 9 no longer reads.

``order_slow_first`` (in ``make test``'s first phase, and in any run on xdist workers, as
``make check``'s) puts the Ray unit first, the other tests that load a model next, the
browser tests after them, then the unit of vLLM's and torch's importers: while one worker
runs the cluster (many processes), the other runs engine tests, so chromium's pages, whose
clicks time out on an overloaded machine, mostly run beside something lighter; the many
quick tests fill the workers' last minutes instead of one slow test running alone at the
end.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadScopeScheduling

# the prefixes of the files that start a Ray cluster or instance
CLUSTER_FILES = ("tests/ray/",)
CLUSTER = "ray-cluster"  # the unit's name
ENGINE_FILES = "tests/engine/"
ENGINE = "engine"  # the unit's name
BROWSER_FILES = "tests/browser/"
# The unit and page modules whose tests import vLLM or torch (about 20 s of imports in a
# process, the tests' own run aside): one unit, so that one worker pays for the import, not
# every worker that draws one of their tests. A module that starts importing them belongs
# here (`python -X importtime`, or sys.modules after its tests, tells).
HEAVY_IMPORTS = "vllm-and-torch"  # the unit's name
HEAVY_IMPORT_FILES = (
    "tests/unit/test_conformance.py",
    "tests/unit/test_endpoints.py",
    "tests/unit/test_tools.py",
    "tests/unit/test_tool_auto.py",
    "tests/unit/test_scoring.py",
    "tests/unit/test_embeddings.py",
    "tests/unit/test_tokens.py",
    "tests/unit/test_cpu_threads.py",
    "tests/unit/test_cross_encoder.py",
    "tests/pages/test_cross_encoder_pages.py",
)


def starts_a_cluster(nodeid: str) -> bool:
    return nodeid.startswith(CLUSTER_FILES)


class SharingTestsTogether(LoadScopeScheduling):
    """``--dist load`` with the Ray cluster tests as one unit, the engine tests as one
    (they share the warm engine of the worker that runs them), and each browser module as
    one (its tests share one Streamlit server per worker: split over two workers, a
    module would start two)."""

    def _split_scope(self, nodeid: str) -> str:
        if starts_a_cluster(nodeid):
            return CLUSTER
        if nodeid.startswith(ENGINE_FILES):
            return ENGINE
        if nodeid.startswith(BROWSER_FILES):
            return nodeid.split("::", 1)[0]
        if nodeid.startswith(HEAVY_IMPORT_FILES):
            return HEAVY_IMPORTS
        return nodeid


# The engine tests' order, so that the warm worker (tests/support/warm_engine.py: 8 GiB of
# models, the least recently used unloaded first; one copy of a model folder at a time)
# loads each model once. First the test that kills it: the kill throws away every model
# loaded before, and its resume's worker (the warm one after it) loads SmolLM2 (seeded:
# chunked prefill off, the engine every later SmolLM2 job runs on), the embedding model and
# the cross-encoder. Then every engine test not named here: they need only those three.
KILLS_THE_WARM_WORKER = "tests/engine/test_faults.py"
# Then, in this order, the tests that load another model (each makes the least recently
# used give way, so none of them may come before a test that needs what it unloads).
LOAD_ANOTHER_MODEL = (
    # SmolLM2 with a tools template (hermes_model), beside SmolLM2; then the same folder.
    "tests/engine/test_queue_engine.py",
    "tests/engine/test_tool_auto_engine.py",
    # Base lines on the loaded SmolLM2 first, then SmolLM2 with LoRA, which replaces it.
    "tests/engine/test_lora_engine.py",
    # SmolLM2 with a template of its own.
    "tests/engine/test_tokens_engine.py",
    # Ends the warm worker (no_warm_worker) for a cold one of its own: nothing after it
    # (marked serial, so it runs apart in `make test`; last where a phase is run by hand).
    "tests/engine/test_resident.py::test_models_stay_loaded_between_jobs_and_a_budget_set_on_the_running_worker_unloads_the_lru",
)


def engine_rank(nodeid: str) -> int:
    """An engine test's place among the engine tests: 0 for the kill, 1 for the tests on the
    models its resume loads, then 2, 3, ... in :data:`LOAD_ANOTHER_MODEL`'s order."""
    if nodeid.startswith(KILLS_THE_WARM_WORKER):
        return 0
    for i, prefix in enumerate(LOAD_ANOTHER_MODEL):
        if nodeid.startswith(prefix):
            return 2 + i
    return 1


def order_slow_first(items: list[pytest.Item]) -> None:
    """Reorders ``items`` in place: the cluster tests, the other tests marked ``engine`` (in
    :func:`engine_rank`'s order), those marked ``browser``, the unit of vLLM's and torch's
    importers (:data:`HEAVY_IMPORT_FILES`), then the rest; each group keeps its order (so a
    module's tests stay together)."""

    def rank(item: pytest.Item) -> tuple[int, int]:
        if starts_a_cluster(item.nodeid):
            return 0, 0
        if item.get_closest_marker("browser"):
            return 2, 0
        if item.get_closest_marker("engine"):
            return 1, engine_rank(item.nodeid)
        if item.nodeid.startswith(HEAVY_IMPORT_FILES):
            return 3, 0
        return 4, 0

    items.sort(key=rank)
