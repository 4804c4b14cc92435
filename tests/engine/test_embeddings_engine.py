"""The engine tests of tests/unit/test_embeddings.py (split from it by kind; docs/tests.md).

``/v1/embeddings`` batches: the check, the output format, and real jobs on the real
embedding model (vectors against the transformers reference, a mixed file, cancel and
resume from the inbox). Kill -9 mid-job and resume: tests/engine/test_faults.py, whose one
job of chat, embeddings and rerank lines costs one cold start for the three kinds."""

from __future__ import annotations

import json

import numpy as np
import pytest
from vllm.entrypoints.launchers.run_batch import BatchRequestOutput
from vllm.entrypoints.pooling.embed.protocol import EmbeddingResponse

from core.check import check_file
from core.config import data_paths, default_embedding_model_dir, default_model_dir
from core.jobs.folder import cancel
from core.jobs.inbox import process_file
from core.jobs.ledger import reconcile, verify
from core.plan.estimate import estimate
from core.plan.pricing import PriceTable
from tests.support.cli import run_cli
from tests.support.embedding_lines import decoded, embed_line, sdk_parse
from tests.support.embeddings import reference_vectors
from tests.support.warm_engine import started_job, wait_until

TEXTS = ["The cat sat on the mat.", "A dog barked at the mailman.", "你好，世界", "Refund, please!"]


@pytest.mark.engine
def test_a_mixed_file_runs_each_line_on_its_model_and_vectors_match_the_reference(
    warm_home, tmp_path, default_model
):
    model = default_embedding_model_dir()
    ids = [[101, 7592, 2088, 102]]  # "[CLS] hello world [SEP]"
    lines = [
        embed_line("string", input=TEXTS[0]),
        embed_line("list", input=TEXTS[1:3]),
        embed_line("base64", input=TEXTS[3], encoding_format="base64"),
        embed_line("ids", input=ids[0]),
        {
            "custom_id": "chat",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "m",
                "messages": [{"role": "user", "content": "Hi"}],
                "max_tokens": 4,
            },
        },
    ]
    batch, out = tmp_path / "mixed.jsonl", tmp_path / "out.jsonl"
    batch.write_text("".join(json.dumps(line) + "\n" for line in lines))

    result = run_cli("run", str(batch), "-o", str(out))

    assert result.returncode == 0, result.stderr[-2000:]
    got = {line["custom_id"]: line for line in map(json.loads, out.read_text().splitlines())}
    for custom_id, line in got.items():
        BatchRequestOutput.model_validate(line)
        if custom_id != "chat":
            EmbeddingResponse.model_validate(line["response"]["body"])
            sdk_parse(line["response"]["body"])
    assert got["chat"]["response"]["body"]["model"] == default_model.name
    assert got["string"]["response"]["body"]["model"] == model.name
    vectors = [decoded(item) for cid in ("string", "list", "base64") for item in
               got[cid]["response"]["body"]["data"]]  # fmt: skip
    expected = reference_vectors(model, TEXTS)
    cosines = [float(np.dot(v, e)) for v, e in zip(vectors, expected, strict=True)]
    assert min(cosines) >= 0.999, cosines
    assert [item["index"] for item in got["list"]["response"]["body"]["data"]] == [0, 1]
    assert isinstance(got["base64"]["response"]["body"]["data"][0]["embedding"], str)
    hello = reference_vectors(model, ["hello world"])[0]
    assert float(np.dot(decoded(got["ids"]["response"]["body"]["data"][0]), hello)) >= 0.999
    assert got["ids"]["response"]["body"]["usage"]["prompt_tokens"] == 4
    job = started_job(result, warm_home)
    assert job.read_spec().embedding_model == str(model)


@pytest.mark.engine
def test_an_embeddings_file_dropped_in_the_inbox_is_cancelled_and_resumed_losing_nothing(
    warm_home, tmp_path
):
    """The hot folder, cancel and resume treat an embeddings job as they do a chat job."""
    count = 1500
    lines = [
        embed_line(f"t{i:04d}", input=[f"Ticket {i}: refund", f"Ticket {i}: parcel late"])
        if i % 3 == 0
        else embed_line(f"t{i:04d}", input=f"Ticket {i}: the export fails " * 6)
        for i in range(count)
    ]
    paths = data_paths()
    dropped = paths.inbox / "tickets.jsonl"
    dropped.write_text("".join(json.dumps(line) + "\n" for line in lines))

    job = process_file(dropped, paths)  # what the inbox watcher does: check, queue, start

    assert job is not None and not dropped.exists()
    assert job.read_spec().embedding_model == str(default_embedding_model_dir())
    wait_until(job, lambda s: s.state == "running" and s.done >= 150)
    cancel(job)
    stopped = wait_until(job, lambda s: s.is_final)
    assert stopped.state == "cancelled" and 150 <= stopped.done < count
    kept = reconcile(job)
    assert kept.succeeded == stopped.done and len(kept.missing) == count - stopped.done

    result = run_cli("resume", job.job_id)

    assert result.returncode == 0, result.stderr[-2000:]
    assert reconcile(job).complete and verify(job).ok
    written = [json.loads(raw) for raw in job.output.read_text().splitlines()]
    assert sorted(line["custom_id"] for line in written) == [f"t{i:04d}" for i in range(count)]
    inputs = {line["custom_id"]: len(line["response"]["body"]["data"]) for line in written}
    assert inputs == {f"t{i:04d}": 2 if i % 3 == 0 else 1 for i in range(count)}
    # The resumed run measured the embedding model's speed: the next estimate has a time.
    report = check_file(job.input, model_folder=default_model_dir())
    result = estimate(report, PriceTable(), home=paths.home)
    [model] = result.models
    # (Its load time is 0 where the warm worker had the model loaded before this job.)
    assert model.embedding and model.tokens_per_s > 0 and model.seconds > model.load_seconds >= 0
