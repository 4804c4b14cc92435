"""Comparing answers: two jobs on custom_id, or two slices of one job on a metadata key."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from core.experiments.runs import custom_id
from core.store.compare import (
    ITEM,
    VARIANT,
    CompareError,
    Side,
    comparison_id,
    coverage,
    diff_html,
    diff_text,
    paired_keys,
    pairs,
    preference_of,
    preference_tally,
    save_preference,
    split_values,
    word_diff,
)
from core.store.db import Store
from core.store.schema import natural_key, natural_sql
from tests.support.jobs import finished_job, request_line


@pytest.fixture
def two_jobs(tmp_path: Path):
    a = finished_job(
        tmp_path / "a",
        [
            {"custom_id": "q1", "prompt": "sky?", "answer": "The sky is blue.", "tokens": 5},
            {"custom_id": "q2", "prompt": "sea?", "answer": "Wet.", "tokens": 2},
            {"custom_id": "only-a", "prompt": "x", "answer": "x"},
        ],
    )
    b = finished_job(
        tmp_path / "b",
        [
            {"custom_id": "q1", "prompt": "sky?", "answer": "The sky is very blue.", "tokens": 6},
            {"custom_id": "q2", "prompt": "sea?", "answer": None},
        ],
        model="big",
    )
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(a)
    store.ingest(b)
    return store, Side(a.job_id), Side(b.job_id)


def test_two_jobs_pair_on_custom_id_with_deltas(two_jobs):
    store, a, b = two_jobs
    frame = pairs(store, a, b).set_index("key")
    assert list(frame.index) == ["q1", "q2"]
    assert frame.loc["q1", "answer_b"] == "The sky is very blue."
    assert frame.loc["q1", "chars_delta"] == 5 and frame.loc["q1", "tokens_delta"] == 1
    assert frame.loc["q2", "status_b"] == "failed"
    assert coverage(store, a, b) == {"a": 3, "b": 2, "paired": 2}


def test_one_job_split_by_prompt_version_pairs_on_a_metadata_key(tmp_path):
    rows = [
        {
            "custom_id": f"{item}-{v}",
            "prompt": f"{item}",
            "answer": f"{item} answer {v}",
            "metadata": {"item": item, "prompt_version": v},
        }
        for item in ("i1", "i2")
        for v in ("v1", "v2")
    ]
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    assert split_values(store, job.job_id, "prompt_version") == ["v1", "v2"]
    a = Side(job.job_id, "prompt_version", "v1")
    b = Side(job.job_id, "metadata:prompt_version", "v2")
    frame = pairs(store, a, b, key="metadata:item")
    assert list(frame["key"]) == ["i1", "i2"]
    assert list(frame["custom_id_a"]) == ["i1-v1", "i2-v1"]
    assert list(frame["answer_b"]) == ["i1 answer v2", "i2 answer v2"]


def test_word_diff_marks_removed_and_added_words():
    assert diff_text("The sky is blue.", "The sky is very blue.") == "The sky is {+very +}blue."
    ops = word_diff("a b c", "a x c")
    assert ("-", "b") in ops and ("+", "x") in ops
    assert diff_text(None, "new") == "{+new+}"
    assert "".join(t for op, t in word_diff("x  y", "x y") if op != "-") == "x y"


def test_preferences_are_kept_per_reviewer_and_tallied(two_jobs):
    store, a, b = two_jobs
    cmp = comparison_id(a, b, "custom_id")
    assert cmp == comparison_id(a, b, "custom_id")
    pair = {"custom_id_a": "q1", "custom_id_b": "q1"}
    save_preference(store, cmp, "q1", "ana", "A", pair, a, b)
    save_preference(store, cmp, "q1", "ana", "B", pair, a, b)  # changes her mind
    save_preference(store, cmp, "q1", "bob", "tie", pair, a, b)
    save_preference(store, cmp, "q2", "bob", "B", pair, a, b)
    assert preference_of(store, cmp, "q1", "ana") == "B"
    assert preference_tally(store, cmp) == {"A": 0, "B": 2, "tie": 1}
    with pytest.raises(CompareError, match="reviewer"):
        save_preference(store, cmp, "q1", "", "A", pair, a, b)


def test_comparing_a_side_with_itself_is_refused(two_jobs):
    store, a, _ = two_jobs
    with pytest.raises(CompareError, match="two different"):
        pairs(store, a, a)


def test_the_coloured_diff_marks_words_and_keeps_answers_as_text():
    html = diff_html("Say <b>hi</b> now", "Say <script>x</script> now")
    assert "&lt;script&gt;x&lt;/script&gt;" in html and "<script>" not in html
    assert 'line-through">&lt;b&gt;hi&lt;/b&gt;</span>' in html  # removed, struck through
    assert '#055d20">&lt;script&gt;x&lt;/script&gt;</span>' in html  # added, in green


def test_two_jobs_say_what_differs_between_them(tmp_path: Path) -> None:
    """Issue 30, item 13: model, prompt version and parameters, before any answer."""
    from core.store.compare import job_differences

    def job(folder: str, version: str, model: str):
        rows = [{"custom_id": "q1", "answer": "x", "metadata": {"prompt_version": version}}]
        return finished_job(tmp_path / folder, rows, model=model)

    a, b, same = job("a", "v1", "tiny"), job("b", "v2", "big"), job("c", "v1", "tiny")
    store = Store(tmp_path / "studio.duckdb")
    for made in (a, b, same):
        store.ingest(made)
    differ = job_differences(store, a.read_spec(), b.read_spec()).set_index("setting")
    assert differ.loc["model"].tolist() == ["tiny", "big"]
    assert differ.loc["prompt version"].tolist() == ["v1", "v2"]
    assert "input file" not in differ.index  # both batch.jsonl
    assert job_differences(store, a.read_spec(), same.read_spec()).empty


def test_the_word_diff_keeps_removed_and_added_words_apart():
    """Issue 38, item 15: "spätZürich ist esnatürlällt": a removed word shown against the
    added one read as one word."""
    a = "Die Lieferung kam zu spät. Zürich ist es natürlich egal."
    b = "Die Lieferung kam spät an. Zürich ist es nicht egal, es gefällt."
    assert diff_text(a, b) == (
        "Die Lieferung kam [-zu spät.-]{+spät an.+} Zürich ist es [-natürlich egal.-]"
        "{+nicht egal, es gefällt.+}"
    )
    shown = re.sub(r"<[^>]+>", "", diff_html(a, b)).split()  # what the page's text reads
    assert set(shown) <= set(a.split()) | set(b.split()), shown
    for x, y in ((a, b), ("x  y", "x y"), ("a b c d", "a x c y")):  # either text, joined back
        ops = word_diff(x, y)
        assert "".join(t for op, t in ops if op != "+") == x
        assert "".join(t for op, t in ops if op != "-") == y


def test_the_request_parameter_that_differs_is_a_row_of_its_own(tmp_path: Path) -> None:
    from core.store.compare import job_differences

    def job(folder: str, temperature: float):
        line = json.loads(request_line("q1", "hi", temperature=temperature, max_tokens=64))
        return finished_job(
            tmp_path / folder, [{"custom_id": "q1", "answer": "x", "request": line}]
        )

    a, b = job("a", 0.0), job("b", 0.7)
    store = Store(tmp_path / "studio.duckdb")
    for made in (a, b):
        store.ingest(made)
    differ = job_differences(store, a.read_spec(), b.read_spec()).set_index("setting")
    assert differ.loc["request temperature"].tolist() == ["0.0", "0.7"]
    assert "request max_tokens" not in differ.index  # the same in both
    assert "request model" not in differ.index  # the model has its own row
    assert not any(name.startswith("request parameters") for name in differ.index)


def test_two_variants_of_an_experiment_pair_on_the_item_their_custom_ids_name(tmp_path):
    """An experiment's one job: a variant is the p<prompt>.m<provider> part of its lines'
    custom_ids, an item the t<test> part (core.experiments.runs.custom_id), so variant X
    and variant Y pair up test by test; a line of no experiment is in neither slice."""
    rows = [
        {"custom_id": custom_id(t, p, m), "prompt": f"q{t}", "answer": f"p{p}.m{m} on t{t}"}
        for t in range(3)
        for p, m in ((0, 0), (1, 0), (0, 1))
    ]
    rows.append({"custom_id": "t9", "prompt": "q9", "answer": "no variant"})
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    assert split_values(store, job.job_id, VARIANT) == ["p0.m0", "p0.m1", "p1.m0"]
    a, b = Side(job.job_id, VARIANT, "p0.m0"), Side(job.job_id, VARIANT, "p1.m0")
    frame = pairs(store, a, b, key=ITEM)
    assert list(frame["key"]) == ["t0", "t1", "t2"]
    assert list(frame["custom_id_a"]) == ["t0.p0.m0", "t1.p0.m0", "t2.p0.m0"]
    assert list(frame["answer_a"]) == ["p0.m0 on t0", "p0.m0 on t1", "p0.m0 on t2"]
    assert list(frame["answer_b"]) == ["p1.m0 on t0", "p1.m0 on t1", "p1.m0 on t2"]
    assert coverage(store, a, b, ITEM) == {"a": 3, "b": 3, "paired": 3}


def test_items_and_variants_sort_by_their_numbers_and_page_in_that_order(tmp_path):
    """Issue 43: keys compared as text put t10 before t2; they sort by their numbers, in
    the pairs, the keys, each page past a key, and a field's values."""
    rows = [
        {"custom_id": custom_id(t, p, 0), "prompt": f"q{t}", "answer": f"p{p} on t{t}"}
        for t in range(12)
        for p in (0, 2, 10)
    ]
    job = finished_job(tmp_path, rows)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    items = [f"t{t}" for t in range(12)]
    assert split_values(store, job.job_id, VARIANT) == ["p0.m0", "p2.m0", "p10.m0"]
    a, b = Side(job.job_id, VARIANT, "p2.m0"), Side(job.job_id, VARIANT, "p10.m0")
    assert list(pairs(store, a, b, key=ITEM)["key"]) == items
    assert paired_keys(store, a, b, ITEM) == items
    assert list(pairs(store, a, b, key=ITEM, limit=3, after="t2")["key"]) == ["t3", "t4", "t5"]
    assert list(pairs(store, a, b, key=ITEM, after="t9")["key"]) == ["t10", "t11"]


@pytest.mark.parametrize(
    "texts",
    [
        ["t10", "t2", "t1", "t0", "t100", "t09", "t9"],
        ["a", "", "a1b2", "a1b10", "a01b", "a1", "b", "10", "9", "x-2.y", "x-10.y"],
        ["7" * 120, "8" * 99, "9" * 100, "é2", "é10", "z"],
    ],
)
def test_the_natural_order_is_one_rule_in_python_and_in_sql(tmp_path, texts):
    """Numbers by value (t2 before t10), distinct texts never equal, and DuckDB's order
    the same as Python's (a page past a key is computed in Python, compared in SQL)."""
    store = Store(tmp_path / "studio.duckdb")
    frame = store.query(
        f"SELECT k, {natural_sql('k')} AS n FROM unnest(?) t(k) ORDER BY n", [texts]
    )
    assert list(frame["n"]) == [natural_key(k) for k in frame["k"]]
    assert list(frame["k"]) == sorted(texts, key=natural_key)
    assert len({natural_key(k) for k in texts}) == len(texts)
    assert sorted(["t10", "t2", "t1"], key=natural_key) == ["t1", "t2", "t10"]
