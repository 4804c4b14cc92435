"""``/v1/embeddings`` batches: the check, the output format, and real jobs on the real
embedding model (vectors against the transformers reference, a mixed file, kill -9)."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
from openai.types import CreateEmbeddingResponse
from vllm.entrypoints.launchers.run_batch import BatchRequestOutput
from vllm.entrypoints.pooling.embed.protocol import EmbeddingResponse

from core.check import check_file
from core.check.engine_requests import EmbeddingRequest
from core.check.requests import RequestError, parse_request
from core.config import REPO_ROOT, data_paths, default_embedding_model_dir, default_model_dir
from core.endpoints import EMBEDDINGS_URL
from core.jobs.folder import cancel
from core.jobs.inbox import process_file
from core.jobs.ledger import reconcile, verify
from core.plan.estimate import estimate
from core.plan.pricing import PriceTable
from core.run.outputs import Embeddings, success_line
from core.schemas import JobDefaults
from tests.conftest import run_cli
from tests.test_embedding_model import reference_vectors
from tests.test_faults import wait_for
from tests.warm_engine import started_job


def embed_line(custom_id: str, **body) -> dict:
    body = {"model": "text-embedding-3-small", **body}
    return {"custom_id": custom_id, "method": "POST", "url": EMBEDDINGS_URL, "body": body}


def parse(**body):
    return parse_request(EMBEDDINGS_URL, "e", {"model": "m", **body}, JobDefaults())


def sdk_parse(body: dict) -> CreateEmbeddingResponse:
    """The SDK's parse of a body: its type holds float lists, and the SDK decodes base64
    itself before parsing (as ``client.embeddings.create`` does), so we do too."""
    data = [{**item, "embedding": decoded(item).tolist()} for item in body["data"]]
    return CreateEmbeddingResponse.model_validate({**body, "data": data})


def decoded(item: dict) -> np.ndarray:
    """A data item's vector, whichever way it was written."""
    value = item["embedding"]
    if isinstance(value, str):
        return np.frombuffer(base64.b64decode(value), dtype="<f4")
    return np.asarray(value, dtype=np.float32)


# -- the check ------------------------------------------------------------------------------


def test_every_input_shape_openai_takes_becomes_a_list_of_inputs():
    assert parse(input="one").inputs == ["one"]
    assert parse(input=["a", "b"]).inputs == ["a", "b"]
    assert parse(input=[101, 7592, 102]).inputs == [[101, 7592, 102]]
    assert parse(input=[[1, 2], [3]]).inputs == [[1, 2], [3]]
    request = parse(input="x", encoding_format="base64", user="u1")
    assert (request.encoding_format, request.warnings) == ("base64", [])
    assert isinstance(request, EmbeddingRequest)
    assert parse(input="x", temperature=0).warnings == [
        "body.temperature is not a field of an embeddings request; it is ignored"
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({}, "body.input is missing"),
        ({"input": ""}, "body.input[0] is empty"),
        ({"input": ["ok", ""]}, "body.input[1] is empty"),
        ({"input": ["ok", 5]}, "body.input[1] must be a non-empty string or a list of token"),
        ({"input": [[1, -2]]}, "body.input[0] must be a non-empty string or a list of token"),
        ({"input": ["x"] * 2049}, "body.input has 2,049 items; at most 2,048"),
        ({"input": "x", "encoding_format": "int8"}, "body.encoding_format must be 'float'"),
        ({"input": "x", "dimensions": 0}, "body.dimensions must be at least 1"),
    ],
)
def test_bad_embeddings_bodies_name_the_field(body, message):
    with pytest.raises(RequestError) as info:
        parse(**body)
    assert message in str(info.value)
    assert info.value.param in ("body.input", "body.encoding_format", "body.dimensions")


def test_the_check_counts_inputs_with_the_embedding_models_tokenizer(tmp_path):
    path = tmp_path / "mixed.jsonl"
    lines = [
        embed_line("fits", input=["word " * 254]),  # 254 + [CLS] + [SEP] = 256: the limit
        embed_line("over", input=["fine", "word " * 255]),  # the second input is 257 tokens
        embed_line("dims", input="x", dimensions=64),
        embed_line("same-dims", input="x", dimensions=384),
        embed_line("to-chat", input="x", model="gpt-4o-mini"),  # mapped to the chat model
        {
            "custom_id": "chat",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}]},
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = check_file(
        path,
        model_folder=default_model_dir(),
        model_map={"gpt-4o-mini": str(default_model_dir())},
    )
    errors = {p.line: (p.param, p.message) for p in report.errors}
    assert sorted(errors) == [2, 3, 5]
    assert errors[2] == (
        "body.input",
        "body.input[1] has 257 tokens; all-MiniLM-L6-v2 takes at most 256 per input: shorten "
        "it or split it",
    )
    assert errors[3][0] == "body.dimensions" and "makes vectors of 384" in errors[3][1]
    assert errors[5][0] == "body.model" and "this line needs an embedding model" in errors[5][1]
    embedding = report.by_local_model[str(default_embedding_model_dir())]
    assert embedding["lines"] == 2 and embedding["prompt_tokens"] == 256 + 3
    assert embedding["max_output_tokens"] == 0 and embedding["context_length"] == 256
    assert report.model_map["text-embedding-3-small"] == str(default_embedding_model_dir())


# -- the output format ------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_an_embeddings_line_is_openais_and_vllms_format(encoding):
    vectors = [np.array([0.5, -0.25, 1e-8], dtype=np.float32), np.zeros(3, dtype=np.float32)]
    line = success_line("e1", "all-MiniLM-L6-v2", Embeddings(7, vectors, encoding), EMBEDDINGS_URL)
    BatchRequestOutput.model_validate(line)
    body = line["response"]["body"]
    EmbeddingResponse.model_validate(body)
    parsed = sdk_parse(body)
    assert parsed.usage.prompt_tokens == parsed.usage.total_tokens == 7
    for item, vector in zip(body["data"], vectors, strict=True):
        np.testing.assert_array_equal(decoded(item), vector)  # float32 round trip, exact
    assert isinstance(body["data"][0]["embedding"], str if encoding == "base64" else list)


# -- the real engine ------------------------------------------------------------------------

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
def test_an_embeddings_job_killed_mid_run_resumes_with_nothing_lost_or_twice(studio_home, tmp_path):
    count = 3000
    path, out = tmp_path / "corpus.jsonl", tmp_path / "out.jsonl"
    lines = [
        embed_line(f"d{i:04d}", input=f"Ticket {i}: the export fails " * 8) for i in range(count)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    command = [sys.executable, "-m", "core", "run", str(path), "-o", str(out), "--chunk-size", "64"]

    cli = subprocess.Popen(command, cwd=REPO_ROOT, env=os.environ.copy(), text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    job = wait_for(studio_home / "jobs", lambda s: s.state == "running" and s.done >= 200)
    os.kill(job.read_status().pid, signal.SIGKILL)
    cli.communicate(timeout=60)
    assert job.read_status().interrupted
    before = reconcile(job)
    assert 0 < len(before.missing) < count  # killed midway

    result = run_cli("resume", job.job_id)

    assert result.returncode == 0, result.stderr[-2000:]
    written = [json.loads(raw)["custom_id"] for raw in job.output.read_text().splitlines()]
    assert sorted(written) == [f"d{i:04d}" for i in range(count)]  # none lost, none twice
    assert verify(job).ok
    final = [json.loads(raw) for raw in out.read_text().splitlines()]
    assert [line["custom_id"] for line in final] == [f"d{i:04d}" for i in range(count)]
    assert all(len(decoded(line["response"]["body"]["data"][0])) == 384 for line in final)


@pytest.mark.engine
def test_an_embeddings_file_dropped_in_the_inbox_is_cancelled_and_resumed_losing_nothing(
    studio_home, tmp_path
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
    wait_for(paths.jobs, lambda s: s.state == "running" and s.done >= 150)
    cancel(job)
    stopped = wait_for(paths.jobs, lambda s: s.is_final).read_status()
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
    assert model.embedding and model.tokens_per_s > 0 and model.seconds > model.load_seconds > 0
