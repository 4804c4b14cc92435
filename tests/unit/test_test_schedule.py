"""The order `make test` runs the engine tests in (tests/support/xdist_schedule.py): the
warm worker loads each model once, so a test that loads a model beyond SmolLM2, the
embedding model and the cross-encoder, or ends the warm worker, runs after those that
need only them."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tests.support.xdist_schedule import (
    HEAVY_IMPORT_FILES,
    KILLS_THE_WARM_WORKER,
    LOAD_ANOTHER_MODEL,
    order_slow_first,
)

TESTS = Path(__file__).parents[1]
# Fixtures that mean a test loads another model into the warm worker, or ends it.
LATE_FIXTURES = {"hermes_model", "no_warm_worker"}
RESIDENT_COLD = LOAD_ANOTHER_MODEL[-1]


@dataclass
class Item:
    """What order_slow_first reads of a pytest item."""

    nodeid: str
    marker: str | None = None

    def get_closest_marker(self, name: str) -> object | None:
        return name if name == self.marker else None


def engine_tests() -> dict[str, list[str]]:
    """Each engine test's node id and the fixtures it asks for, read from the source."""
    found = {}
    for path in sorted((TESTS / "engine").glob("test_*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                nodeid = f"tests/engine/{path.name}::{node.name}"
                found[nodeid] = [a.arg for a in node.args.args]
    return found


def test_each_test_the_engine_order_names_exists():
    tests = engine_tests()
    for prefix in (KILLS_THE_WARM_WORKER, *LOAD_ANOTHER_MODEL):
        assert any(nodeid.startswith(prefix) for nodeid in tests), prefix


def test_a_test_that_loads_another_model_or_ends_the_warm_worker_is_named_in_the_order():
    late = [nodeid for nodeid, fixtures in engine_tests().items() if LATE_FIXTURES & {*fixtures}]
    assert late  # the check sees them
    unnamed = [n for n in late if not any(n.startswith(p) for p in LOAD_ANOTHER_MODEL)]
    assert not unnamed, f"add to LOAD_ANOTHER_MODEL (tests/support/xdist_schedule.py): {unnamed}"


def test_the_kill_comes_first_the_tests_on_its_models_next_and_the_resident_worker_last():
    engine = [
        "tests/engine/test_lora_engine.py::test_base_and_adapter_lines_run_in_one_engine",
        "tests/engine/test_engine_e2e.py::test_run",
        RESIDENT_COLD,
        "tests/engine/test_resident.py::test_a_typed_text",
        "tests/engine/test_queue_engine.py::test_jobs",
        KILLS_THE_WARM_WORKER + "::test_kill",
        "tests/engine/test_tool_auto_engine.py::test_auto",
        "tests/engine/test_tokens_engine.py::test_the_engine",
    ]
    items = [Item("tests/unit/test_api.py::test_a"), Item("tests/browser/test_b.py::t", "browser")]
    items.append(Item("tests/unit/test_tools.py::test_t"))  # imports vLLM
    items += [Item(nodeid, "engine") for nodeid in engine]
    items.append(Item("tests/ray/test_ray.py::test_r"))

    order_slow_first(items)  # type: ignore[arg-type]

    assert [item.nodeid for item in items] == [
        "tests/ray/test_ray.py::test_r",
        KILLS_THE_WARM_WORKER + "::test_kill",
        # the tests on SmolLM2, the embedding model and the cross-encoder, in their order
        "tests/engine/test_engine_e2e.py::test_run",
        "tests/engine/test_resident.py::test_a_typed_text",
        # then the tests that load another model, in the listed order
        "tests/engine/test_queue_engine.py::test_jobs",
        "tests/engine/test_tool_auto_engine.py::test_auto",
        "tests/engine/test_lora_engine.py::test_base_and_adapter_lines_run_in_one_engine",
        "tests/engine/test_tokens_engine.py::test_the_engine",
        RESIDENT_COLD,
        "tests/browser/test_b.py::t",
        "tests/unit/test_tools.py::test_t",
        "tests/unit/test_api.py::test_a",
    ]


def test_each_module_the_vllm_and_torch_unit_names_exists():
    for path in HEAVY_IMPORT_FILES:
        assert (TESTS.parent / path).is_file(), path
