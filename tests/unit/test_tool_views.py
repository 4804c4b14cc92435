"""Tool calls where a result goes: Results, Review and Compare show each call as its
function and arguments (several calls, one a line), not an empty answer; exports carry the
calls; a store made before the column existed fills it from the stored lines."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pandas as pd

from core.store import compare as cmp
from core.store import results as res
from core.store.db import Store
from core.store.export import export_results
from core.store.schema import MIGRATIONS
from tests.support.tool_views import NAMED, ONE_CALL, SHOWN, TWO_CALLS, rows


def test_the_store_keeps_each_call_and_exports_it(tmp_path: Path):
    from tests.support.jobs import finished_job

    job = finished_job(tmp_path, rows(TWO_CALLS, "required"))
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    item = res.detail(store, job.job_id, "q")
    assert item["tool_calls"] == SHOWN and item["shown_answer"] == SHOWN
    assert item["answer"] == '{"city": "Oslo"}'  # the first call's arguments: what checks grade
    out = tmp_path / "out.csv"
    export_results(store, res.ResultFilter(job_ids=[job.job_id]), out, "csv")
    assert pd.read_csv(out)["tool_calls"].tolist() == [SHOWN]


def test_a_store_made_before_tool_calls_fills_them_from_its_lines(tmp_path: Path):
    from tests.support.jobs import finished_job

    job = finished_job(tmp_path, rows(TWO_CALLS, "required"))
    path = tmp_path / "old.duckdb"
    store = Store(path)
    store.ingest(job)
    store.close()
    con = duckdb.connect(str(path))  # back to the store as the last version left it
    con.execute("ALTER TABLE results DROP COLUMN tool_calls")
    version = next(i for i, sql in enumerate(MIGRATIONS, 1) if "ADD COLUMN tool_calls" in sql)
    con.execute("DELETE FROM schema_migrations WHERE version = ?", [version])
    con.close()
    store = Store(path)
    assert res.detail(store, job.job_id, "q")["tool_calls"] == SHOWN


def test_compare_pairs_read_the_calls(tmp_path: Path):
    from tests.support.jobs import finished_job

    a = finished_job(tmp_path / "a", rows(TWO_CALLS, "required"))
    b = finished_job(tmp_path / "b", rows(ONE_CALL, NAMED))
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(a)
    store.ingest(b)
    pairs = cmp.pairs(store, cmp.Side(a.job_id), cmp.Side(b.job_id))
    assert json.loads(json.dumps(pairs[["answer_a", "answer_b"]].iloc[0].tolist())) == [
        SHOWN,
        'weather({"city": "Rome"})',
    ]


def test_a_json_schema_check_grades_every_calls_arguments(tmp_path: Path):
    from core.qa import grading
    from core.qa.rules import load_rules
    from tests.support.jobs import finished_job

    bad_second = TWO_CALLS.replace('{"zone": "CET"}', '{"zone": 1}')
    job = finished_job(
        tmp_path,
        [*rows(TWO_CALLS, "required"), *rows(bad_second, "required", "bad")],
    )
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    # Each call's arguments are an object of strings: the second call of "bad" is not.
    schema = json.dumps({"type": "object", "additionalProperties": {"type": "string"}})
    rules = load_rules(f"rules:\n  - {{name: args, type: json_schema, schema: {schema}}}")
    grading.grade(store, [job.job_id], rules)
    with store.cursor() as cur:
        got = dict(cur.execute("SELECT custom_id, passed[1] FROM rule_outcomes").fetchall())
    assert got == {"q": True, "bad": False}
