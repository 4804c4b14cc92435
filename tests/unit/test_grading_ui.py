"""Checks where people meet them: ``core grade``, exports with a column per rule, and the
Checks page (AppTest), Results' filter by check and the Dashboards chart."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from core.config import data_paths
from core.qa.grading import grade_jobs
from core.qa.rules import load_rules
from core.store import export as ex
from core.store.db import Store
from core.store.results import ResultFilter
from tests.support.cli import cli
from tests.support.grading import ROWS, RULES
from tests.support.pages import job_in_home

pytestmark = pytest.mark.usefixtures("studio_home")


def test_core_grade_prints_each_rules_counts_and_interval_as_json(studio_home, tmp_path):
    job_id = job_in_home(studio_home, ROWS)
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES, encoding="utf-8")
    done = cli("grade", job_id, "--rules", str(rules), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    by_name = {r["name"]: r for r in report["rules"]}
    assert list(by_name) == ["mentions_refund", "no_refusal", "label"]
    refund = by_name["mentions_refund"]
    assert (refund["passed"], refund["failed"], refund["not_graded"]) == (2, 1, 1)
    assert refund["pass_rate"] == pytest.approx(2 / 3)
    assert refund["low"] < 2 / 3 < refund["high"]
    assert refund["jobs"][job_id]["passed"] == 2
    label = by_name["label"]  # b has no label, c failed: neither is graded
    assert (label["passed"], label["failed"], label["not_graded"]) == (1, 1, 2)
    saved = data_paths().jobs / job_id / "rules.yaml"
    assert saved.read_text(encoding="utf-8") == RULES  # a rerun grades alike

    plain = cli("grade", job_id, "--rules", str(saved))
    assert plain.returncode == 0
    assert "mentions_refund" in plain.stdout and "66.7%" in plain.stdout


def test_core_grade_refuses_a_bad_rules_file_without_a_traceback(studio_home, tmp_path):
    job_id = job_in_home(studio_home, ROWS)
    rules = tmp_path / "bad.yaml"
    rules.write_text("rules:\n  - name: x\n    type: contians\n", encoding="utf-8")
    done = cli("grade", job_id, "--rules", str(rules), "--json")
    assert done.returncode == 1
    assert f"error: {rules}: line 3, rule 1 ('x'): unknown type 'contians'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (data_paths().jobs / job_id / "rules.yaml").exists()
    missing = cli("grade", "job_nope", "--rules", str(rules))
    assert missing.returncode == 1  # the rules are read first
    rules.write_text(RULES, encoding="utf-8")
    missing = cli("grade", "job_nope", "--rules", str(rules))
    assert missing.returncode == 2 and "no job job_nope" in missing.stderr


@pytest.fixture
def graded(studio_home: Path) -> tuple[Store, str]:
    job_id = job_in_home(studio_home, ROWS)
    db = Store(data_paths().database)
    db.ingest_all(data_paths().jobs)
    grade_jobs(db, [job_id], load_rules(RULES), RULES)
    yield db, job_id
    db.close()


def test_exports_have_a_column_per_rule_and_jsonl_a_checks_field(graded, tmp_path):
    db, job_id = graded
    every = ResultFilter(job_ids=[job_id])
    ex.export_results(db, every, tmp_path / "r.csv", "csv")
    table = pd.read_csv(tmp_path / "r.csv").set_index("custom_id")
    columns = ["check_mentions_refund", "check_no_refusal", "check_label"]
    assert columns == [c for c in table.columns if c.startswith("check_")]
    assert table.loc["a", columns].tolist() == [True, True, False]
    assert table.loc["c", columns].isna().all()  # the failed request: not graded
    ex.export_results(db, every, tmp_path / "r.parquet", "parquet")
    parquet = pd.read_parquet(tmp_path / "r.parquet").set_index("custom_id")
    assert parquet.loc["b", "check_no_refusal"] == False  # noqa: E712 (a real boolean)
    ex.export_results(db, every, tmp_path / "r.xlsx", "xlsx")
    excel = pd.read_excel(tmp_path / "r.xlsx").set_index("custom_id")
    assert excel.loc["d", "check_label"] == True  # noqa: E712

    ex.export_results(db, every, tmp_path / "r.jsonl", "jsonl")
    lines = [json.loads(x) for x in (tmp_path / "r.jsonl").read_text().splitlines()]
    stored = {}
    for name in ("output.jsonl", "errors.jsonl"):
        for raw in (data_paths().jobs / job_id / name).read_text().splitlines():
            stored[json.loads(raw)["custom_id"]] = json.loads(raw)
    for line in lines:  # every field of the OpenAI line kept; one field more
        checks = line.pop("checks")
        assert line == stored[line["custom_id"]]
        assert list(checks) == ["mentions_refund", "no_refusal", "label"]
    assert {line["custom_id"]: line.get("response", {}).get("status_code") for line in lines}
    by_id = {json.loads(x)["custom_id"]: json.loads(x) for x in (tmp_path / "r.jsonl").open()}
    assert by_id["b"]["checks"] == {"mentions_refund": False, "no_refusal": False, "label": None}

    failing = ResultFilter(job_ids=[job_id], checks={"no_refusal": "failed"})
    assert ex.export_results(db, failing, tmp_path / "f.csv", "csv") == 1


def test_dashboards_chart_each_rules_pass_rate(graded):
    from core.store import dashboards as dash

    db, job_id = graded
    fig = dash.checks_figure(db, dash.Scope(job_ids=[job_id]), "job")
    rates = {trace.name: list(trace.y) for trace in fig.data}
    assert rates["mentions_refund"] == [pytest.approx(2 / 3)]
    assert rates["no_refusal"] == [pytest.approx(2 / 3)]
    empty = dash.checks_figure(db, dash.Scope(job_ids=["job_other"]), "job")
    assert empty.layout.annotations[0].text == dash.NO_CHECKS
