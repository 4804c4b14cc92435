"""Browsing results in DuckDB: filters, search taken literally, sorting, pages, detail."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.schemas import JobState, JobStatus
from core.store import results as R
from core.store.db import Store
from core.store.schema import MIGRATIONS
from tests.support.jobs import finished_job
from tests.support.results import ROWS


@pytest.fixture
def store(tmp_path: Path) -> tuple[Store, str]:
    job = finished_job(tmp_path, ROWS)
    db = Store(tmp_path / "studio.duckdb")
    db.ingest(job)
    return db, job.job_id


def ids(frame) -> list[str]:
    return list(frame["custom_id"])


def test_a_page_lists_results_in_input_order_with_request_fields(store):
    db, job_id = store
    page = R.page(db, R.ResultFilter(job_ids=[job_id]))
    assert ids(page) == ["a", "b", "c", "d"]
    row = page.set_index("custom_id").loc["c"]
    assert (row["prompt_version"], row["finish_reason"], row["model"]) == ("v2", "length", "tiny")
    # a failure has no answer body: it still shows the job's model
    assert page.set_index("custom_id").loc["b", "model"] == "tiny"
    assert R.count(db, R.ResultFilter(job_ids=[job_id])) == 4


def test_filters_narrow_by_status_finish_metadata_and_tokens(store):
    db, job_id = store
    f = R.ResultFilter
    assert ids(R.page(db, f(job_ids=[job_id], statuses=["failed"]))) == ["b"]
    assert ids(R.page(db, f(job_ids=[job_id], finish_reasons=["length"]))) == ["c"]
    assert ids(R.page(db, f(job_ids=[job_id], finish_reasons=["(none)"]))) == ["b"]
    assert ids(R.page(db, f(job_ids=[job_id], metadata={"label": "neg"}))) == ["b", "c"]
    assert ids(R.page(db, f(job_ids=[job_id], prompt_versions=["v1"]))) == ["a", "b"]
    assert ids(R.page(db, f(job_ids=[job_id], completion_tokens=(2, None)))) == ["c", "d"]
    assert ids(R.page(db, f(job_ids=[job_id], completion_tokens=(None, 4)))) == ["a", "d"]
    assert R.count(db, f(job_ids=[])) == 0


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100%", ["a"]),  # % is not a wildcard
        ("_", ["d"]),  # nor is _
        ("'quote'; DROP TABLE results; --", ["b"]),
        (".*", ["c"]),
        ("[a-z]+", ["c"]),
        ("the answer", ["d"]),  # case-insensitive
        ("<b>", ["c"]),
        ("nothing like this", []),
    ],
)
def test_search_takes_quotes_regex_and_sql_literally(store, text, expected):
    db, job_id = store
    assert ids(R.page(db, R.ResultFilter(job_ids=[job_id], search=text))) == expected
    assert R.count(db, R.ResultFilter(job_ids=[job_id])) == 4  # the table is still there


def test_a_search_counts_up_to_the_cap_then_says_more_than(store, monkeypatch):
    db, job_id = store
    monkeypatch.setattr(R, "SEARCH_COUNT_CAP", 2)
    search = R.ResultFilter(job_ids=[job_id], search="e")  # in all four rows
    assert R.count(db, search) == 4 and R.count(db, search, cap=2) == 3  # stops at cap + 1
    total = R.total(db, search)
    assert (total.n, total.exact, str(total)) == (2, False, "more than 2")
    assert total.pages(1) == 3  # one page past what was counted, to go on
    assert R.total(db, R.ResultFilter(job_ids=[job_id], search="T", match_case=True)) == R.Total(2)
    plain = R.total(db, R.ResultFilter(job_ids=[job_id], statuses=["succeeded"]))
    assert plain == R.Total(3) and str(plain) == "3" and plain.pages(2) == 2  # counted exactly


def test_a_page_that_is_not_full_gives_the_total_without_a_count(store, monkeypatch):
    db, job_id = store

    def no_count(*args, **kwargs):
        raise AssertionError("counted")

    monkeypatch.setattr(R, "count", no_count)
    search = R.ResultFilter(job_ids=[job_id], search="e")
    assert R.total(db, search, offset=2, limit=3, shown=2) == R.Total(4)
    assert R.total(db, search, offset=0, limit=50, shown=0) == R.Total(0)
    with pytest.raises(AssertionError, match="counted"):  # a full page: more may follow
        R.total(db, search, offset=0, limit=2, shown=2)
    with pytest.raises(AssertionError, match="counted"):  # past the end: count to say where
        R.total(db, search, offset=50, limit=50, shown=0)


def test_search_can_match_case_and_pick_the_field(store):
    db, job_id = store
    assert (
        ids(R.page(db, R.ResultFilter(job_ids=[job_id], search="the answer", match_case=True)))
        == []
    )
    assert (
        ids(R.page(db, R.ResultFilter(job_ids=[job_id], search="Answer", search_in="prompt"))) == []
    )
    assert ids(
        R.page(db, R.ResultFilter(job_ids=[job_id], search="Answer", search_in="answer"))
    ) == ["d"]


def test_sort_any_column_both_ways_and_refuse_unknown_ones(store):
    db, job_id = store
    f = R.ResultFilter(job_ids=[job_id])
    assert ids(R.page(db, f, sort="completion_tokens", descending=True)) == ["c", "d", "a", "b"]
    assert ids(R.page(db, f, sort="custom_id", descending=True)) == ["d", "c", "b", "a"]
    assert ids(R.page(db, f, sort="latency_ms", descending=True)) == ["c", "a", "b", "d"]
    assert ids(R.page(db, f, sort="metadata.label")) == ["b", "c", "a", "d"]  # neg, neg, pos
    assert ids(R.page(db, f, sort="metadata.label", descending=True)) == ["a", "b", "c", "d"]
    for bad in ("answer; DROP TABLE results", "metadata.", "raw"):
        with pytest.raises(ValueError, match="cannot sort by"):
            R.page(db, f, sort=bad)


def test_every_sort_option_orders_all_results_both_ways_with_missing_values_last(
    store, monkeypatch
):
    db, job_id = store
    f = R.ResultFilter(job_ids=[job_id])
    rows = R.page(db, f).to_dict("records")
    keys = R.facets(db, [job_id])["metadata_keys"]
    for row in rows:
        metadata = R.detail(db, job_id, row["custom_id"])["metadata"] or {}
        row.update({f"metadata.{key}": metadata.get(key) for key in keys})
    names = R.sort_options(keys)
    assert {"prompt_tokens", "completion_tokens", "latency_ms", "finish_reason", "model"} <= set(
        names
    ) and {"metadata", "metadata.label", "metadata.prompt_version"} <= set(names)
    for name in names:
        for descending in (False, True):
            value = {r["custom_id"]: r.get(name) for r in rows}
            present = [r["custom_id"] for r in rows if not R._missing(value[r["custom_id"]])]
            missing = [r["custom_id"] for r in rows if R._missing(value[r["custom_id"]])]
            present.sort(key=lambda cid: value[cid], reverse=descending)  # stable: input order
            got = ids(R.page(db, f, sort=name, descending=descending))
            assert got == present + missing, (name, descending)
    monkeypatch.setattr(R, "DEEP_PAGE", 0)  # the keys-first path binds the key twice
    assert ids(R.page(db, f, sort="metadata.label", limit=2, offset=2)) == ["a", "d"]


def test_pages_split_the_rows_and_deep_pages_agree(store, monkeypatch):
    db, job_id = store
    f = R.ResultFilter(job_ids=[job_id])
    assert ids(R.page(db, f, limit=2, offset=2)) == ["c", "d"]
    monkeypatch.setattr(R, "DEEP_PAGE", 0)  # the keys-first path gives the same page
    assert ids(R.page(db, f, limit=2, offset=2)) == ["c", "d"]
    assert ids(R.page(db, f, sort="completion_tokens", limit=2, offset=1)) == ["d", "c"]


def test_facets_offer_the_values_present(store):
    db, job_id = store
    facets = R.facets(db, [job_id])
    assert facets["statuses"] == ["failed", "succeeded"]
    assert facets["finish_reasons"] == ["(none)", "length", "stop"]
    assert facets["prompt_versions"] == ["v1", "v2"]
    assert facets["metadata_keys"] == ["label", "prompt_version"]
    assert R.metadata_values(db, [job_id], "label") == ["neg", "pos"]


def test_detail_has_conversation_parameters_and_raw_line(store):
    db, job_id = store
    item = R.detail(db, job_id, "c")
    assert item["messages"] == [{"role": "user", "content": "regex .* [a-z]+ (x|y)"}]
    assert item["params"]["temperature"] == 0.2
    assert item["metadata"] == {"label": "neg", "prompt_version": "v2"}
    assert item["answer"] == "<b>bold</b>\x07 end"  # kept as text, control character too
    assert item["raw"]["custom_id"] == "c"
    assert item["latency_ms"] == 2500 and R.latency_text(item["latency_ms"]) == "2.50 s"
    assert R.detail(db, job_id, "a")["latency_ms"] is None  # a line from before latency
    assert R.latency_text(None) == "not recorded" and R.latency_text(850) == "850 ms"
    assert R.detail(db, job_id, "missing") is None


def test_a_filter_survives_a_round_trip_through_json():
    f = R.ResultFilter(job_ids=["j"], statuses=["failed"], completion_tokens=(1, None), search="x")
    assert R.ResultFilter.model_validate_json(f.model_dump_json()) == f


def test_a_search_keeps_to_its_field_and_case_and_never_spans_prompt_and_answer(store):
    db, job_id = store
    f = R.ResultFilter
    assert ids(R.page(db, f(job_ids=[job_id], search="say", search_in="prompt"))) == ["a"]
    assert ids(R.page(db, f(job_ids=[job_id], search="say", search_in="answer"))) == []
    assert ids(R.page(db, f(job_ids=[job_id], search="bold", search_in="answer"))) == ["c"]
    assert ids(R.page(db, f(job_ids=[job_id], search="The Answer", match_case=True))) == ["d"]
    assert ids(R.page(db, f(job_ids=[job_id], search="the answer", match_case=True))) == []
    # "yes" ends a's prompt and is its answer: the two texts are searched apart.
    assert ids(R.page(db, f(job_ids=[job_id], search="yes\nyes"))) == []
    assert ids(R.page(db, f(job_ids=[job_id], search="yes"))) == ["a"]


def test_results_ingested_before_the_search_column_are_found_after_the_upgrade(tmp_path):
    job = finished_job(tmp_path, ROWS)
    path = tmp_path / "studio.duckdb"
    db = Store(path)
    db.ingest(job)
    # pretend the search migration never ran on these rows (later ones did)
    version = next(n for n, sql in enumerate(MIGRATIONS, 1) if "ADD COLUMN search_text" in sql)
    db.execute("ALTER TABLE results DROP COLUMN search_text")
    db.execute("ALTER TABLE requests DROP COLUMN prompt_lower")
    db.execute("DELETE FROM schema_migrations WHERE version = ?", [version])
    db.close()
    db = Store(path)
    assert ids(R.page(db, R.ResultFilter(job_ids=[job.job_id], search="BOLD"))) == ["c"]


def test_a_responses_input_list_is_found_by_its_last_user_turn(tmp_path):
    turns = [
        {"role": "user", "content": "Hello there"},
        {"role": "assistant", "content": "Hi! How can I help?"},
        {"role": "user", "content": [{"type": "input_text", "text": "Where is my parcel?"}]},
    ]
    body = {"model": "gpt-x", "input": turns, "max_output_tokens": 8}
    request = {"custom_id": "r", "method": "POST", "url": "/v1/responses", "body": body}
    job = finished_job(tmp_path, [{"custom_id": "r", "answer": "On its way", "request": request}])
    db = Store(tmp_path / "studio.duckdb")
    db.ingest(job)
    f = R.ResultFilter(job_ids=[job.job_id], search="parcel", search_in="prompt")
    found = R.page(db, f)
    assert ids(found) == ["r"] and found["prompt"][0] == "Where is my parcel?"
    assert ids(R.page(db, f.model_copy(update={"search": "how can i help"}))) == []


ODD_KEYS = [
    {"custom_id": "k1", "prompt": "p", "answer": "a", "metadata": {"$[": "open", "x": "plain"}},
    {"custom_id": "k2", "prompt": "p", "answer": "b", "metadata": {"$.x": "dotted", "x": "x2"}},
    {"custom_id": "k3", "prompt": "p", "answer": "c", "metadata": {'q"t': "quoted", "a.b": "ab"}},
]


def test_metadata_keys_are_keys_never_json_paths(tmp_path):
    from core.store import compare, samples

    db = Store(tmp_path / "studio.duckdb")
    job = finished_job(tmp_path, ODD_KEYS)
    db.ingest(job)
    f = R.ResultFilter

    def matching(metadata):
        return ids(R.page(db, f(job_ids=[job.job_id], metadata=metadata)))

    assert matching({"$[": "open"}) == ["k1"]
    assert matching({"$.x": "dotted"}) == ["k2"]  # not the field "x"
    assert matching({"$.x": "plain"}) == []
    assert matching({'q"t': "quoted"}) == matching({"a.b": "ab"}) == ["k3"]
    assert R.metadata_values(db, [job.job_id], "$[") == ["open"]
    page = R.page(db, f(job_ids=[job.job_id]), sort="metadata.$.x", descending=True)
    assert ids(page)[0] == "k2"
    definition = samples.SampleDefinition(
        filter=f(job_ids=[job.job_id]), method="stratified", size=3, stratify_by="metadata:$["
    )
    assert sorted(samples.draw(db, definition)["stratum"]) == ["(none)", "(none)", "open"]
    side = compare.Side(job_id=job.job_id, field="metadata:$.x", value="dotted")
    other = compare.Side(job_id=job.job_id, field="metadata:$[", value="open")
    assert len(compare.pairs(db, side, other, key="model")) == 1  # k2 against k1


def test_a_job_without_results_says_why_by_its_state():
    def why(state: JobState, **fields) -> str:
        return R.no_results_reason(JobStatus(state=state, **fields))

    assert "worker stopped" in why(JobState.RUNNING, heartbeat_at=None)  # interrupted
    assert "no results yet" in why(JobState.RUNNING, heartbeat_at=time.time())
    assert "no results yet" in why(JobState.QUEUED)
    assert "completed without a result" in why(JobState.COMPLETED)
    assert "cancelled before" in why(JobState.CANCELLED)
    assert "completion window ended" in why(JobState.EXPIRED)
    assert "failed before" in why(JobState.FAILED)
