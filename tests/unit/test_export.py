"""Exports: CSV, Parquet, JSONL (OpenAI output format), Excel; errors, samples, labels."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from core.jobs.ledger import combined_lines
from core.store import export as E
from core.store.db import Store
from core.store.results import ResultFilter
from core.store.review import Label, save_label
from core.store.samples import SampleDefinition, create_sample
from tests.support.jobs import finished_job, reused_rerun
from tests.support.results import ROWS


@pytest.fixture
def db(tmp_path: Path):
    job = finished_job(tmp_path, ROWS)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    save_label(store, job.job_id, "a", "ana", Label("pass", 5, ("short",), "fine"))
    save_label(store, job.job_id, "a", "bob", Label("fail", 2, ("tone",), "", "Yes."))
    return store, job


def test_csv_and_parquet_hold_the_filtered_results_with_labels(db, tmp_path):
    store, job = db
    f = ResultFilter(job_ids=[job.job_id], statuses=["succeeded"])
    assert E.export_results(store, f, tmp_path / "out.csv", "csv") == 3
    csv = pd.read_csv(tmp_path / "out.csv", keep_default_na=False).set_index("custom_id")
    assert list(csv.index) == ["a", "c", "d"]
    assert csv.loc["a", "review_verdicts"] == "ana=pass; bob=fail"
    assert csv.loc["a", "review_tags"] == "short, tone"
    assert csv.loc["a", "corrected_answer"] == "Yes."
    assert csv.loc["c", "answer"] == "<b>bold</b>\x07 end"
    assert E.export_results(store, f, tmp_path / "out.parquet", "parquet") == 3
    parquet = pd.read_parquet(tmp_path / "out.parquet")
    assert list(parquet["custom_id"]) == ["a", "c", "d"]
    assert json.loads(parquet.set_index("custom_id").loc["c", "metadata"])["label"] == "neg"


def test_jsonl_is_the_openai_output_file_line_for_line(db, tmp_path):
    store, job = db
    n = E.export_results(store, ResultFilter(job_ids=[job.job_id]), tmp_path / "out.jsonl", "jsonl")
    assert n == 4
    written = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    original = [json.loads(line) for line in combined_lines(job)]  # final lines, input order
    assert written == original
    assert written[2]["response"]["body"]["choices"][0]["message"]["content"].startswith("<b>")


def test_the_error_file_holds_only_failures(db, tmp_path):
    store, job = db
    assert E.export_errors(store, [job.job_id], tmp_path / "errors.jsonl") == 1
    (line,) = [json.loads(x) for x in (tmp_path / "errors.jsonl").read_text().splitlines()]
    assert line["custom_id"] == "b" and line["error"]["code"] == "engine_rejected"


def test_excel_export_drops_only_characters_excel_refuses(db, tmp_path):
    store, job = db
    assert (
        E.export_results(store, ResultFilter(job_ids=[job.job_id]), tmp_path / "x.xlsx", "xlsx")
        == 4
    )
    sheet = pd.read_excel(tmp_path / "x.xlsx").set_index("custom_id")
    assert sheet.loc["c", "answer"] == "<b>bold</b> end"


def test_excel_refuses_more_rows_than_its_cap_with_a_way_out(db, tmp_path, monkeypatch):
    store, job = db
    monkeypatch.setattr(E, "EXCEL_MAX_ROWS", 2)
    with pytest.raises(E.ExportError, match="export CSV or Parquet"):
        E.export_results(store, ResultFilter(job_ids=[job.job_id]), tmp_path / "x.xlsx", "xlsx")
    assert not (tmp_path / "x.xlsx").exists()


def test_samples_labels_and_tallies_export(db, tmp_path):
    store, job = db
    sample = create_sample(
        store, "s", SampleDefinition(filter=ResultFilter(job_ids=[job.job_id]), size=4)
    )
    assert E.export_sample(store, sample.sample_id, tmp_path / "s.csv") == 4
    frame = pd.read_csv(tmp_path / "s.csv")
    assert list(frame["position"]) == [1, 2, 3, 4]
    assert E.export_sample(store, sample.sample_id, tmp_path / "s.jsonl", "jsonl") == 4
    assert E.export_labels(store, tmp_path / "labels.parquet", "parquet") == 2
    assert set(pd.read_parquet(tmp_path / "labels.parquet")["reviewer"]) == {"ana", "bob"}
    assert E.export_tally(store, tmp_path / "tally.csv") == 1
    tally = pd.read_csv(tmp_path / "tally.csv")
    assert (tally["passed"][0], tally["failed"][0], tally["pass_rate"][0]) == (1, 1, 0.5)
    assert E.export_tally(store, tmp_path / "tally.xlsx", "xlsx") == 1


def test_every_table_export_names_each_rows_job_beside_its_id(db, tmp_path):
    """Issue 30, item 12: an exported file says which job a row is of by its name, not by
    an id alone."""
    store, job = db
    job.rename("sentiment, week 48")
    store.ingest(job)
    sample = create_sample(
        store, "s", SampleDefinition(filter=ResultFilter(job_ids=[job.job_id]), size=4)
    )
    E.export_results(store, ResultFilter(job_ids=[job.job_id]), tmp_path / "r.csv")
    E.export_sample(store, sample.sample_id, tmp_path / "s.parquet", "parquet")
    E.export_labels(store, tmp_path / "l.xlsx", "xlsx")
    E.export_tally(store, tmp_path / "t.csv")
    frames = {
        "results": pd.read_csv(tmp_path / "r.csv"),
        "sample": pd.read_parquet(tmp_path / "s.parquet"),
        "labels": pd.read_excel(tmp_path / "l.xlsx"),
        "tally": pd.read_csv(tmp_path / "t.csv"),
    }
    for what, frame in frames.items():
        assert list(frame.columns).index("job_name") == list(frame.columns).index("job_id") + 1
        assert set(frame["job_name"]) == {job.name}, what


def test_unknown_format_and_odd_file_names(db, tmp_path):
    store, job = db
    with pytest.raises(E.ExportError, match="unknown format"):
        E.export_results(store, ResultFilter(job_ids=[job.job_id]), tmp_path / "x.doc", "doc")
    odd = tmp_path / "it's a file.csv"
    assert E.export_results(store, ResultFilter(job_ids=[job.job_id]), odd, "csv") == 4
    assert odd.exists()


FORMULAS = {
    '=HYPERLINK("http://x.test","open")': "=1+1",
    "+cmd": "+SUM(A1:A9)",
    "-2": "-3 degrees",
    "@evil": "@SUM(1)",
    "plain": "\tTAB first",
}


@pytest.fixture
def formulas(tmp_path: Path):
    rows = [{"custom_id": cid, "prompt": cid, "answer": answer} for cid, answer in FORMULAS.items()]
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    save_label(store, job.job_id, "-2", "=ana", Label("pass", 5, ("=tag",), "=comment"))
    return store, job


def test_csv_and_excel_cells_never_start_a_formula(formulas, tmp_path):
    store, job = formulas
    f = ResultFilter(job_ids=[job.job_id])
    E.export_results(store, f, tmp_path / "out.csv", "csv")
    csv = pd.read_csv(tmp_path / "out.csv", keep_default_na=False)
    E.export_results(store, f, tmp_path / "out.xlsx", "xlsx")
    sheet = pd.read_excel(tmp_path / "out.xlsx", keep_default_na=False)
    E.export_labels(store, tmp_path / "labels.csv", "csv")
    labels = pd.read_csv(tmp_path / "labels.csv", keep_default_na=False)
    for table in (csv, sheet):
        for cid, answer in FORMULAS.items():
            row = table[table["prompt"].str.endswith(cid)].iloc[0]
            assert row["custom_id"] == ("'" + cid if cid != "plain" else cid)
            assert row["answer"] == "'" + answer  # the text kept, behind a quote
        assert [v for v in table["review_verdicts"] if v] == ["'=ana=pass"]
    assert list(labels["reviewer"]) == ["'=ana"] and list(labels["comment"]) == ["'=comment"]
    assert list(labels["score"]) == [5]  # numbers stay numbers
    from openpyxl import load_workbook

    cells = [c for row in load_workbook(tmp_path / "out.xlsx").active.iter_rows() for c in row]
    assert not [c.coordinate for c in cells if c.data_type == "f"]  # no live formula at all


def test_jsonl_and_parquet_keep_the_data_unchanged(formulas, tmp_path):
    store, job = formulas
    f = ResultFilter(job_ids=[job.job_id])
    E.export_results(store, f, tmp_path / "out.parquet", "parquet")
    parquet = pd.read_parquet(tmp_path / "out.parquet").set_index("custom_id")
    assert parquet.loc['=HYPERLINK("http://x.test","open")', "answer"] == "=1+1"
    E.export_results(store, f, tmp_path / "out.jsonl", "jsonl")
    ids = [json.loads(x)["custom_id"] for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert ids == list(FORMULAS)


@pytest.mark.parametrize("fmt", ["csv", "parquet", "xlsx"])
def test_each_format_says_which_answers_were_reused_and_from_which_job(tmp_path, fmt):
    """Issue 58, item 11: only JSONL kept reused_from; elsewhere a reused answer's empty
    latency_ms had no reason."""
    prompts = {f"r{i}": f"question {i}" for i in range(2)}
    first, rerun = reused_rerun(tmp_path, prompts, {"new": "another"}, seconds=(2.0, 1.0))
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(first)
    store.ingest(rerun)
    path = tmp_path / f"out.{fmt}"
    assert E.export_results(store, ResultFilter(job_ids=[rerun.job_id]), path, fmt) == 3
    read = {"csv": pd.read_csv, "parquet": pd.read_parquet, "xlsx": pd.read_excel}[fmt]
    frame = read(path).set_index("custom_id")
    columns = list(frame.columns)
    assert columns.index("reused_from") == columns.index("latency_ms") + 1  # beside it
    assert frame["reused_from"].fillna("").to_dict() == {
        "r0": first.job_id,
        "r1": first.job_id,
        "new": "",  # computed by this job
    }


def test_an_export_folder_is_its_own_and_removed_and_a_day_old_leftover_is_swept(tmp_path):
    exports = E.exports_dir(tmp_path)
    exports.mkdir()
    old_file, old_dir, fresh = exports / "job_x_results.csv", exports / "export-old", exports / "f"
    old_file.write_text("someone's filtered rows")
    old_dir.mkdir()
    (old_dir / "half.parquet").write_bytes(b"PAR1")
    fresh.write_text("another session's export, being written")
    two_days_ago = time.time() - 2 * 24 * 3600
    for stale in (old_file, old_dir):
        os.utime(stale, (two_days_ago, two_days_ago))
    with E.export_folder(tmp_path) as one, E.export_folder(tmp_path) as two:
        assert one != two and one.parent == two.parent == exports
        (one / "x.csv").write_text("one")
        (two / "x.csv").write_text("two")
        assert (one / "x.csv").read_text() == "one"
    assert sorted(p.name for p in exports.iterdir()) == ["f"]  # the fresh one stays


@pytest.fixture
def personal(tmp_path: Path):
    """A job whose prompts and answers hold an e-mail address and a card number."""
    rows = [
        {"custom_id": "p1", "answer": "I wrote to jane.doe@example.com about it.",
         "prompt": "Reply to jane.doe@example.com, card 4242 4242 4242 4242."},
        {"custom_id": "p2", "answer": "=1+1 nothing personal", "prompt": "Say hi."},
    ]  # fmt: skip
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    return store, job


@pytest.mark.parametrize("fmt", ["csv", "parquet", "xlsx", "jsonl"])
def test_a_redacted_export_holds_placeholders_in_every_text(personal, tmp_path, fmt):
    store, job = personal
    f = ResultFilter(job_ids=[job.job_id])
    path = tmp_path / f"out.{fmt}"
    assert E.export_results(store, f, path, fmt, redact=True) == 2
    if fmt == "jsonl":
        lines = [json.loads(line) for line in path.read_text().splitlines()]  # still JSON
        answer = lines[0]["response"]["body"]["choices"][0]["message"]["content"]
        assert answer == "I wrote to [EMAIL_1] about it."
    else:
        read = {"csv": pd.read_csv, "parquet": pd.read_parquet, "xlsx": pd.read_excel}[fmt]
        rows = read(path).set_index("custom_id")
        assert rows.loc["p1", "prompt"] == "Reply to [EMAIL_1], card [CARD_1]."
        assert rows.loc["p1", "answer"] == "I wrote to [EMAIL_1] about it."
        if fmt in ("csv", "xlsx"):  # still inert, as any export
            assert rows.loc["p2", "answer"] == "'=1+1 nothing personal"
    text = path.read_bytes()
    assert b"jane.doe@example.com" not in text and b"4242 4242" not in text
    E.export_results(store, f, tmp_path / f"plain.{fmt}", fmt)  # not asked: unchanged
    if fmt in ("csv", "jsonl"):
        assert b"jane.doe@example.com" in (tmp_path / f"plain.{fmt}").read_bytes()


def test_a_redacted_export_reads_local_numbers_as_the_studios_region(tmp_path, studio_home):
    from core.check.sensitive import save_phone_region

    rows = [{"custom_id": "d1", "answer": "Ruf 030 12345678 an.", "prompt": "Nummer?"}]
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    f = ResultFilter(job_ids=[job.job_id])
    for fmt in ("csv", "jsonl"):
        us = tmp_path / f"us.{fmt}"
        E.export_results(store, f, us, fmt, redact=True)  # a studio that never set one: US
        assert b"030 12345678" in us.read_bytes()
        E.export_results(store, f, tmp_path / f"de.{fmt}", fmt, redact=True, phone_region="DE")
        text = (tmp_path / f"de.{fmt}").read_text()
        assert "030 12345678" not in text and "Ruf [PHONE_1] an." in text
    studio_home.mkdir(parents=True, exist_ok=True)
    save_phone_region(studio_home, "DE")  # not given: the studio's
    E.export_results(store, f, tmp_path / "studio.csv", "csv", redact=True)
    assert "Ruf [PHONE_1] an." in (tmp_path / "studio.csv").read_text()
