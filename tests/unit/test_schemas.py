"""The typed models of job.json and status.json: old folders load, bad values are refused.

``tests/data/job_20261201_102504_e41d7b`` is a job folder written by the code as it was
before these models (dataclasses and hand-written ``from_dict``): a 3-request job on an
A/B model map and a Ray cluster, with one failed request.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.check import check_file
from core.config import REPO_ROOT
from core.jobs.folder import JobFolder, list_jobs
from core.jobs.ledger import reconcile, verify
from core.schemas import (
    FINAL_STATES,
    EngineConfig,
    JobDefaults,
    JobState,
    JobStatus,
    RaySettings,
    problems_of,
)
from core.store.db import Store
from tests.support.jobs import request_line

OLD_JOB = REPO_ROOT / "tests" / "data" / "job_20261201_102504_e41d7b"


@pytest.fixture
def old_job(tmp_path: Path) -> JobFolder:
    jobs = tmp_path / "jobs"
    shutil.copytree(OLD_JOB, jobs / OLD_JOB.name)
    [job] = list_jobs(jobs)
    return job


def test_a_job_folder_written_before_the_models_still_loads_and_reads(old_job, tmp_path):
    spec = old_job.read_spec()
    assert spec.engine == EngineConfig(model="/models/tiny", max_num_seqs=8)
    assert spec.defaults == JobDefaults(max_tokens=64, temperature=0.5)
    assert spec.ray == RaySettings(address="local", replicas=2, resources={"slot": 1})
    assert (spec.chunk_size, spec.shard_size, spec.model_map) == (4, 2, {"gpt-4o": "/models/other"})
    status = old_job.read_status()
    assert status.state is JobState.COMPLETED
    assert (status.succeeded, status.failed, status.outcome) == (2, 1, "completed_with_errors")
    assert [h["state"] for h in status.history] == ["created", "loading", "running", "completed"]
    report = reconcile(old_job)
    assert (report.requests, report.succeeded, report.failed, report.complete) == (3, 2, 1, True)
    assert verify(old_job).ok
    store = Store(tmp_path / "studio.duckdb")
    assert store.ingest(old_job) == 3
    assert store.jobs().iloc[0]["state"] == "completed with errors"


def test_unknown_keys_are_ignored_and_missing_ones_defaulted(old_job):
    data = json.loads(old_job.spec_file.read_text())
    minimal = {"job_id": data["job_id"], "created_at": data["created_at"], "engine": {}}
    minimal["engine"] = {"model": "/models/tiny", "a_setting_from_the_future": True}
    minimal["also_new"] = {"nested": [1, 2]}
    old_job.spec_file.write_text(json.dumps(minimal))
    spec = old_job.read_spec()
    assert spec.engine == EngineConfig(model="/models/tiny")
    assert (spec.defaults, spec.shard_size, spec.ray, spec.skip_invalid) == (
        JobDefaults(),
        10_000,
        None,
        False,
    )
    old_job.status_file.write_text(json.dumps({"state": "running", "new_counter": 7}))
    assert old_job.read_status().state is JobState.RUNNING


def test_status_goes_to_disk_and_back_through_the_model(tmp_path):
    job = JobFolder(tmp_path)
    status = JobStatus(total=3)
    status.enter("running", "busy")
    status.succeeded, status.failed = 2, 1
    job.write_status(status)
    on_disk = json.loads(job.status_file.read_text())
    assert on_disk["state"] == "running" and on_disk["outcome"] == "running"
    assert job.read_status() == status
    with pytest.raises(ValidationError):
        status.state = "paused"  # not a state: refused when set, not when read back later


def test_final_states_are_one_set_and_interrupted_is_never_stored():
    assert {s.value for s in FINAL_STATES} == {"completed", "failed", "cancelled", "expired"}
    assert "interrupted" not in {s.value for s in JobState}


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda: JobDefaults(max_tokens=0), "max_tokens: input should be greater than or equal"),
        (lambda: JobDefaults(top_p=0), "top_p: input should be greater than 0"),
        (lambda: JobDefaults(temperature=float("inf")), "temperature: input should be a finite"),
        (lambda: EngineConfig(model="m", dtype="int3"), "dtype: input should be 'auto'"),
        (lambda: EngineConfig(model="m", gpu_memory_utilization=1.5), "gpu_memory_utilization"),
        (lambda: EngineConfig(model="m", max_num_seqs=0), "max_num_seqs: input should be"),
        (lambda: RaySettings(address="  "), "give the Ray cluster's address"),
        (lambda: RaySettings(gpus_per_replica=1.5), "GPUs per replica is the tensor parallel"),
        (lambda: RaySettings(resources={"slot": -1}), "resources.slot: input should be"),
    ],
)
def test_settings_out_of_bounds_are_refused_with_the_field_named(make, expected):
    with pytest.raises(ValidationError) as error:
        make()
    assert expected in " ".join(problems_of(error.value))


def test_check_problems_carry_a_code_and_a_param_and_counters_read_codes(tmp_path):
    batch = tmp_path / "b.jsonl"
    lines = [request_line("a", "x"), request_line("a", "y"), '{"custom_id": "c"}']
    batch.write_text("\n".join(lines) + "\n")
    report = check_file(batch)
    problems = {p["line"]: p for p in report.to_dict()["problems"]}
    assert (problems[2]["code"], problems[2]["param"]) == ("duplicate_custom_id", "custom_id")
    assert problems[3]["code"] == "invalid_request"
    assert report.duplicates == 1
