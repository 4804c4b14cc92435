"""Datasets out (issue 44 items 4 and 5): OpenAI's chat (SFT) and preference (DPO)
fine-tuning files and a Hugging Face Parquet folder, from a sample's labels and Compare's
preferences, each read back by what would read it.

The openai SDK has no type for a fine-tuning file's line (``openai.types.fine_tuning``
holds jobs and methods only), so each line is validated by a pydantic model of OpenAI's
documented line shape whose messages are the SDK's own chat message types.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path
from typing import Annotated

import datasets
import pyarrow.parquet as pq
import pytest
from openai.types.chat import ChatCompletionAssistantMessageParam, ChatCompletionMessageParam
from pydantic import BaseModel, ConfigDict, Field

from core.config import data_paths
from core.human.questions import TEXT_BYTES as MAX_TEXT_BYTES
from core.store import training as T
from core.store.compare import Side, comparison_id, save_preference
from core.store.db import Store
from core.store.export import ExportError
from core.store.results import ResultFilter
from core.store.review import Label, save_label
from core.store.samples import SampleDefinition, create_sample
from tests.support.cli import cli
from tests.support.jobs import finished_job
from tests.support.pages import job_in_home


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a field OpenAI does not know fails the file


class SftLine(_Line):
    """OpenAI's chat fine-tuning line: ``{"messages": [...]}``."""

    messages: list[ChatCompletionMessageParam] = Field(min_length=2)


class DpoInput(_Line):
    messages: list[ChatCompletionMessageParam] = Field(min_length=1)


One = Annotated[list[ChatCompletionAssistantMessageParam], Field(min_length=1, max_length=1)]


class DpoLine(_Line):
    """OpenAI's preference fine-tuning line."""

    input: DpoInput
    preferred_output: One
    non_preferred_output: One


ROWS = [
    {"custom_id": "a", "system": "Be brief.", "prompt": "Capital of France?", "answer": "Paris"},
    {"custom_id": "b", "prompt": "2+2?", "answer": "5"},  # failed: left out
    {"custom_id": "c", "prompt": "Say <b>hi</b>", "answer": '"=1+1"\n<script>x</script>'},
    {"custom_id": "d", "prompt": "Sky colour?", "answer": "Green"},  # corrected to Blue
    {"custom_id": "e", "prompt": "Unlabelled?", "answer": "yes"},
    {"custom_id": "f", "prompt": "Disputed?", "answer": "maybe"},  # ana pass, bob fail
    {"custom_id": "g", "prompt": "Broken?", "answer": None},  # request failed
]


LABELS = {
    ("a", "ana"): Label("pass", 5),
    ("a", "bob"): Label("pass", 4),
    ("b", "ana"): Label("fail", 1),
    ("c", "ana"): Label("pass", 4, ("html",)),
    ("d", "ana"): Label("pass", 3, (), "wrong colour", "Blue"),
    ("f", "ana"): Label("pass"),
    ("f", "bob"): Label("fail"),
    ("g", "bob"): Label("pass"),  # passes, but there is no answer to train on
}


def _sample_with_labels(store: Store, job_id: str) -> str:
    """A sample of the job's seven items, labelled as :data:`LABELS` says; its id."""
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=7)
    sample_id = create_sample(store, "s", definition).sample_id
    for (cid, who), label in LABELS.items():
        save_label(store, job_id, cid, who, label, sample_id)
    return sample_id


@pytest.fixture
def labelled(tmp_path: Path):
    job = finished_job(tmp_path, ROWS)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    return store, job, _sample_with_labels(store, job.job_id)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_sft_holds_the_passing_items_with_their_answers_and_counts_the_rest(labelled, tmp_path):
    store, _, sample_id = labelled
    out = T.export_sft(store, sample_id, tmp_path / "sft.jsonl")
    lines = _lines(tmp_path / "sft.jsonl")
    for line in lines:
        SftLine.model_validate(line)
    by_prompt = {line["messages"][-2]["content"]: line["messages"] for line in lines}
    assert set(by_prompt) == {"Capital of France?", "Say <b>hi</b>", "Sky colour?"}
    assert by_prompt["Capital of France?"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris"},
    ]
    # the reviewer's corrected answer replaces the model's; text is kept as it was
    assert by_prompt["Sky colour?"][-1] == {"role": "assistant", "content": "Blue"}
    assert by_prompt["Say <b>hi</b>"][-1]["content"] == '"=1+1"\n<script>x</script>'
    assert out.written == 3
    assert out.left_out == {
        "labelled fail": 1,
        "not labelled": 1,
        "reviewers disagree": 1,
        "request failed, no corrected answer": 1,
    }
    assert "3 examples written" in out.describe() and "4 left out" in out.describe()


def test_dpo_lines_follow_the_preferred_side_and_skip_ties_and_disagreements(tmp_path):
    def job(folder: str, answers: dict[str, str | None], model: str):
        rows = [{"custom_id": c, "prompt": f"q {c}", "answer": a} for c, a in answers.items()]
        return finished_job(tmp_path / folder, rows, model=model)

    a = job("a", {"q1": "short", "q2": "A two", "q3": "A3", "q4": "A4", "q5": None}, "tiny")
    b = job("b", {"q1": "much better", "q2": "B two", "q3": "B3", "q4": "B4", "q5": "B5"}, "big")
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(a)
    store.ingest(b)
    sa, sb = Side(a.job_id), Side(b.job_id)
    cmp = comparison_id(sa, sb, "custom_id")
    for key, who, choice in [
        ("q1", "ana", "B"),
        ("q1", "bob", "B"),
        ("q2", "ana", "A"),
        ("q3", "ana", "tie"),
        ("q4", "ana", "A"),
        ("q4", "bob", "B"),
        ("q5", "ana", "B"),
    ]:
        pair = {"custom_id_a": key, "custom_id_b": key}
        save_preference(store, cmp, key, who, choice, pair, sa, sb)
    out = T.export_dpo(store, tmp_path / "dpo.jsonl", cmp)
    lines = _lines(tmp_path / "dpo.jsonl")
    for line in lines:
        DpoLine.model_validate(line)
    assert [(x["preferred_output"][0]["content"], x["non_preferred_output"][0]["content"])
            for x in lines] == [("much better", "short"), ("A two", "B two")]  # fmt: skip
    assert lines[0]["input"]["messages"] == [{"role": "user", "content": "q q1"}]
    assert out.left_out == {
        "a tie": 1,
        "reviewers disagree": 1,
        "an answer failed or is missing": 1,
    }
    with pytest.raises(ExportError, match="no preference saved in comparison 'cmp_nope'"):
        T.export_dpo(store, tmp_path / "none.jsonl", "cmp_nope")
    assert not (tmp_path / "none.jsonl").exists()


def test_the_parquet_folder_loads_in_datasets_with_its_labels_and_card(labelled, tmp_path):
    store, job, sample_id = labelled
    job.rename("*v2* | <b>x</b>")  # a name is text in the card, never Markdown or HTML
    store.ingest(job)
    folder = tmp_path / "ds"
    out = T.export_dataset(store, sample_id, folder)
    assert out.written == 7 and not out.left_out
    cache = str(tmp_path / "hf-cache")  # not the user's ~/.cache
    loaded = datasets.load_dataset("parquet", data_dir=str(folder), split="train", cache_dir=cache)
    rows = {row["custom_id"]: row for row in loaded}
    assert len(rows) == 7
    assert rows["a"]["final_label"] == "pass" and rows["a"]["mean_score"] == 4.5
    assert [(x["reviewer"], x["verdict"]) for x in rows["a"]["labels"]] == [
        ("ana", "pass"),
        ("bob", "pass"),
    ]
    assert rows["f"]["final_label"] is None  # ana pass, bob fail: no final label
    assert rows["e"]["labels"] is None and rows["e"]["final_label"] is None
    assert rows["d"]["corrected_answer"] == "Blue" and rows["d"]["answer"] == "Green"
    assert json.loads(rows["a"]["messages"])[0] == {"role": "system", "content": "Be brief."}
    assert pq.read_table(folder / "train.parquet").num_rows == 7
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert "| pass | 4 |" in card  # a, c, d, g
    assert "| \\(reviewers disagree\\) | 1 |" in card and "| \\(not labelled\\) | 1 |" in card
    # both labelled a (pass, pass) and f (pass, fail): alpha 1 - 3 * 2 / (2 * 3 * 1) = 0
    assert "| ana | bob | 2 | 0\\.00 \\(95% CI" in card
    assert f"`{job.job_id}` (\\*v2\\* \\| \\<b\\>x\\</b\\>)" in card and "tiny" in card
    assert "- ana: 5 labels" in card and "- bob: 3 labels" in card


def test_the_pages_dataset_download_is_the_folder_zipped(labelled, tmp_path):
    store, _, sample_id = labelled
    name, data, outcome = T.download(store, sample_id, "dataset", tmp_path)
    assert name == f"{sample_id}-dataset.zip" and outcome.written == 7
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        assert sorted(bundle.namelist()) == [
            f"{sample_id}-dataset/README.md",
            f"{sample_id}-dataset/train.parquet",
        ]
        table = pq.read_table(io.BytesIO(bundle.read(f"{sample_id}-dataset/train.parquet")))
    assert table.num_rows == 7


def test_a_sample_with_no_passing_item_writes_nothing(tmp_path):
    job = finished_job(tmp_path, ROWS[:2])
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    sample = create_sample(
        store, "s", SampleDefinition(filter=ResultFilter(job_ids=[job.job_id]), size=2)
    )
    save_label(store, job.job_id, "a", "ana", Label("fail"))
    target = tmp_path / "sft.jsonl"
    with pytest.raises(ExportError, match=r"no item of sample .* passes .*1 labelled fail"):
        T.export_sft(store, sample.sample_id, target)
    assert list(tmp_path.glob("sft.jsonl*")) == [] and list(tmp_path.glob(".sft*")) == []


def test_an_unknown_sample_is_named(labelled, tmp_path):
    store, _, _ = labelled
    for export in (T.export_sft, T.export_dataset):
        with pytest.raises(ExportError, match="no sample 'smp_nope'"):
            export(store, "smp_nope", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_an_example_over_the_cap_is_left_out_of_sft_and_its_correction_kept_whole_in_the_dataset(
    labelled, tmp_path
):
    """A correction just under what a label keeps (1 MB: a larger one is refused at save,
    tests/unit/test_label_schemas.py) makes an example over the SFT cap with its messages."""
    store, job, sample_id = labelled
    huge = "u" * (MAX_TEXT_BYTES - 10)
    save_label(store, job.job_id, "c", "ana", Label("pass", None, (), "", huge), sample_id)
    out = T.export_sft(store, sample_id, tmp_path / "sft.jsonl")
    assert out.written == 2 and out.left_out[T.TOO_LONG] == 1
    assert all(len(x) < 1000 for x in (tmp_path / "sft.jsonl").read_text().splitlines())
    T.export_dataset(store, sample_id, tmp_path / "ds")
    table = pq.read_table(tmp_path / "ds" / "train.parquet").to_pylist()
    assert next(r for r in table if r["custom_id"] == "c")["corrected_answer"] == huge


def test_a_failed_write_leaves_the_earlier_file_whole(labelled, tmp_path, monkeypatch):
    store, _, sample_id = labelled
    target = tmp_path / "sft.jsonl"
    target.write_text("earlier\n", encoding="utf-8")

    def broken(*_):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError):
        T.export_sft(store, sample_id, target)
    assert target.read_text(encoding="utf-8") == "earlier\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".sft")] == []


def test_a_dataset_never_lands_in_a_folder_that_holds_files(labelled, tmp_path):
    store, _, sample_id = labelled
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "mine.txt").write_text("keep", encoding="utf-8")
    with pytest.raises(ExportError, match="not an empty folder"):
        T.export_dataset(store, sample_id, tmp_path / "ds")
    assert [p.name for p in (tmp_path / "ds").iterdir()] == ["mine.txt"]


def test_the_cli_exports_each_and_says_what_it_left_out(studio_home, tmp_path):
    job_id = job_in_home(studio_home, ROWS)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    sample_id = _sample_with_labels(store, job_id)
    store.close()
    sft = tmp_path / "out.jsonl"
    done = cli("export", "--what", "sft", "--sample", sample_id, "-o", str(sft))
    assert done.returncode == 0, done.stderr
    assert "3 examples written" in done.stdout and "1 reviewers disagree" in done.stdout
    assert len(sft.read_text().splitlines()) == 3
    folder = tmp_path / "ds"
    args = ("export", "--what", "dataset", "--sample", sample_id, "-o")
    done = cli(*args, str(folder), "--format", "parquet")
    assert done.returncode == 0, done.stderr
    assert "7 items written" in done.stdout and (folder / "README.md").exists()
    done = cli(*args, str(tmp_path / "x.csv"), "--format", "csv")
    assert done.returncode == 2 and "--what dataset writes parquet" in done.stderr
    assert not (tmp_path / "x.csv").exists()
    done = cli("export", "--what", "sft", "--sample", "smp_nope", "-o", str(tmp_path / "n.jsonl"))
    assert done.returncode == 2 and "no sample 'smp_nope'" in done.stderr
    assert not (tmp_path / "n.jsonl").exists()
    done = cli("export", "--what", "sft", "-o", str(tmp_path / "n.jsonl"))
    assert done.returncode == 2 and "--sample SAMPLE_ID is required" in done.stderr
