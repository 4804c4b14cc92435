"""Samples: reproducible random draws, stratified draws, failures first; saved and reopened."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from pydantic import ValidationError

from core.store.db import Store
from core.store.results import ResultFilter
from core.store.samples import (
    SampleDefinition,
    SampleError,
    create_sample,
    draw,
    get_sample,
    list_samples,
    quotas,
    sample_items,
    samples_of_job,
)
from tests.support.jobs import finished_job


def rows(n: int = 40) -> list[dict]:
    out = []
    for i in range(n):
        failed = i % 10 == 0
        out.append(
            {
                "custom_id": f"r{i:02d}",
                "prompt": "x" * (50 if i % 2 else 500),
                "answer": None if failed else f"answer {i}",
                "finish": "length" if i % 10 == 5 else "stop",
                "metadata": {"label": ["a", "b", "c", "d"][i % 4]},
            }
        )
    return out


@pytest.fixture
def db(tmp_path: Path) -> tuple[Store, str]:
    job = finished_job(tmp_path, rows())
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    return store, job.job_id


def test_random_sample_is_reproducible_with_its_seed(db):
    store, job_id = db
    d = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=10, seed=7)
    first = list(draw(store, d)["custom_id"])
    assert len(first) == 10 == len(set(first))
    assert list(draw(store, d)["custom_id"]) == first
    other = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=10, seed=8)
    assert list(draw(store, other)["custom_id"]) != first


def test_failures_and_truncations_come_first(db):
    store, job_id = db
    d = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), method="failures_first", size=10)
    items = draw(store, d)
    assert list(items["stratum"]) == ["failed"] * 4 + ["truncated"] * 4 + ["other"] * 2


@pytest.mark.parametrize("field", ["metadata:label", "prompt_length", "finish_reason"])
def test_stratified_sample_covers_every_stratum(db, field):
    store, job_id = db
    d = SampleDefinition(
        filter=ResultFilter(job_ids=[job_id]), method="stratified", size=8, stratify_by=field
    )
    items = draw(store, d)
    assert len(items) == 8
    counts = items["stratum"].value_counts()
    assert len(counts) >= 2 and counts.min() >= 1
    if field == "metadata:label":
        assert dict(counts) == {"a": 2, "b": 2, "c": 2, "d": 2}


def test_quotas_are_proportional_with_one_each_and_never_exceed_a_stratum():
    assert quotas({"big": 90, "small": 10}, 10) == {"big": 9, "small": 1}
    assert quotas({"big": 990, "rare": 1}, 5) == {"big": 4, "rare": 1}
    assert quotas({"a": 2, "b": 1}, 50) == {"a": 2, "b": 1}


def test_a_saved_sample_reopens_with_its_definition_and_items(db, tmp_path):
    store, job_id = db
    d = SampleDefinition(
        filter=ResultFilter(job_ids=[job_id], statuses=["succeeded"]), size=5, seed=3
    )
    sample = create_sample(store, "first look", d)
    items = list(sample_items(store, sample.sample_id)["custom_id"])
    store.close()
    reopened = Store(tmp_path / "studio.duckdb")  # survives a restart
    again = get_sample(reopened, sample.sample_id)
    assert again.name == "first look" and again.size == 5
    assert again.definition == d
    assert list(sample_items(reopened, sample.sample_id)["custom_id"]) == items
    assert list(list_samples(reopened)["name"]) == ["first look"]


def test_bad_sample_requests_get_clear_messages(db):
    store, job_id = db
    with pytest.raises(SampleError, match="name"):
        create_sample(store, " ", SampleDefinition(filter=ResultFilter(job_ids=[job_id])))
    with pytest.raises(SampleError, match="no results match"):
        create_sample(
            store, "x", SampleDefinition(filter=ResultFilter(job_ids=[job_id], search="zzz"))
        )
    with pytest.raises(SampleError, match="field to stratify"):
        draw(store, SampleDefinition(filter=ResultFilter(job_ids=[job_id]), method="stratified"))
    with pytest.raises(ValidationError, match="size"):
        SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=0)
    with pytest.raises(ValidationError, match="method"):
        SampleDefinition(filter=ResultFilter(job_ids=[job_id]), method="everything")


def test_the_samples_of_a_job_are_those_drawn_from_its_results_in_list_order():
    def definition(*job_ids: str) -> str:
        d = SampleDefinition(filter=ResultFilter(job_ids=list(job_ids)))
        return json.dumps(d.model_dump(mode="json"))

    samples = pd.DataFrame(  # as list_samples gives them: newest first
        {
            "sample_id": ["s4", "s3", "s2", "s1"],
            "definition": [definition("a", "b"), definition("b"), "{}", definition("a")],
        }
    )
    assert samples_of_job(samples, "a") == ["s4", "s1"]
    assert samples_of_job(samples, "b") == ["s4", "s3"]
    assert samples_of_job(samples, "gone") == [] == samples_of_job(samples, None)
