"""How `make test`'s first phase shares the tests among pytest-xdist workers (docs/tests.md).

As with xdist's ``--dist load``, a worker that runs short takes the next test, with three
exceptions: the tests that start a Ray cluster (``tests/ray/``: no test elsewhere starts Ray)
are one unit, run in order by a single worker, so that two clusters (about 6 GB and two
engines each) never run at once; the engine tests (``tests/engine/``) are one unit, so that
one worker starts the run's warm engine (tests/support/warm_engine.py: one per pytest
process) and loads its models once, not once per worker; and each browser module is one
unit, so that its tests share one server. xdist's own ``--dist loadgroup`` would do this
but, in pytest-xdist 3.8 under pytest 9, groups nothing: it renames ``item._nodeid``,
which pytest 9 no longer reads.

``order_slow_first`` puts that unit first, the other tests that load a model next and the
browser tests after them: while one worker runs the cluster (many processes), the other
runs engine tests, so chromium's pages, whose clicks time out on an overloaded machine,
mostly run beside something lighter; the many quick tests fill the workers' last minutes
instead of one slow test running alone at the end.
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
        return nodeid


# The engine test that kills the warm worker runs first among the engine tests: the kill
# throws away every model loaded before it, and its resume's worker (the warm one after it)
# loads SmolLM2 (seeded: chunked prefill off, what the later jobs run on), the embedding
# model and the cross-encoder, so the later tests load none of those again.
KILLS_THE_WARM_WORKER = "tests/engine/test_faults.py"


def order_slow_first(items: list[pytest.Item]) -> None:
    """Reorders ``items`` in place: the cluster tests, the other tests marked ``engine``
    (:data:`KILLS_THE_WARM_WORKER` first), those marked ``browser``, then the rest; each
    group keeps its order (so a module's tests stay together)."""

    def rank(item: pytest.Item) -> int:
        if starts_a_cluster(item.nodeid):
            return 0
        if item.get_closest_marker("browser"):
            return 3
        if item.nodeid.startswith(KILLS_THE_WARM_WORKER):
            return 1
        return 2 if item.get_closest_marker("engine") else 4

    items.sort(key=rank)
