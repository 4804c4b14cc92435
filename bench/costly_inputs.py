"""Benchmark: inputs built to cost, timed (the tests assert only what they do).

    .venv/bin/python bench/costly_inputs.py

Each figure is measured twice in one run, on an input 10x larger than the other, and the
ratio of the two times is printed: about 10 means the work grows with the input, about
100 that it grows with its square (the defect these inputs once found). The machine's
load moves both times alike, so the ratio is what to read.

- schema refs: ``core.qa.json_schema.check_refs`` on a schema of N $refs into a part
  holding N more (3,000 each took 12 s when every $ref walked the schema again).
- yaml aliases: ``core.qa.rules.load_rules`` refusing a billion-laughs file (goal: refused
  before it expands, in well under a second).
- backtracking pattern: grading a 40,000-character answer against ``^(a+)+$``.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.qa.json_schema import check_refs  # noqa: E402
from core.qa.rules import RulesError, load_rules  # noqa: E402


def seconds(work: Callable[[], object], repeat: int = 3) -> float:
    """The best of ``repeat`` runs: the least disturbed by the rest of the machine."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def refs_schema(n: int) -> dict:
    holders = {f"p{i}": {"$ref": "#/$defs/b"} for i in range(n)}
    users = {f"q{i}": {"$ref": "#/$defs/a"} for i in range(n)}
    return {"$defs": {"a": {"properties": holders}, "b": {}}, "properties": users}


def alias_bomb(levels: int) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    return "rules: []\nbomb:\n" + "\n".join("  " + line for line in lines) + "\n"


def refused(text: str) -> None:
    try:
        load_rules(text)
    except RulesError:
        return
    raise SystemExit("the alias bomb was not refused")


def grade_backtracking(length: int) -> None:
    from core.qa import grading
    from core.store.db import Store

    rules = load_rules(
        "rules:\n  - name: a_run\n    type: json_schema\n"
        "    schema: {type: string, pattern: '^(a+)+$'}\n"
    )
    with tempfile.TemporaryDirectory() as work:
        store = Store(Path(work) / "s.duckdb")
        store.execute("INSERT INTO jobs (job_id, folder, state) VALUES ('j', '/x', 'completed')")
        store.execute(
            "INSERT INTO results (job_id, custom_id, status, answer) "
            "VALUES ('j', 's', 'succeeded', ?)",
            [json.dumps("a" * length + "b")],
        )
        grading.grade(store, ["j"], rules)
        store.close()


def report(name: str, small: Callable[[], object], large: Callable[[], object]) -> None:
    a, b = seconds(small), seconds(large)
    print(f"{name}: {a * 1000:.1f} ms, 10x the input {b * 1000:.1f} ms, ratio {b / a:.1f}")


def main() -> None:
    report("schema refs (300 / 3,000)", lambda: check_refs(refs_schema(300)),
           lambda: check_refs(refs_schema(3000)))  # fmt: skip
    report("yaml alias bomb (10**8 / 10**9 values)", lambda: refused(alias_bomb(8)),
           lambda: refused(alias_bomb(9)))  # fmt: skip
    report("backtracking pattern (4,000 / 40,000 characters)",
           lambda: grade_backtracking(4000), lambda: grade_backtracking(40000))  # fmt: skip


if __name__ == "__main__":
    main()
