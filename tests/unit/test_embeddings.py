"""``/v1/embeddings`` batches: the check, the output format, and real jobs on the real
embedding model (vectors against the transformers reference, a mixed file, kill -9)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from core.check import check_file
from core.check.engine_requests import EmbeddingRequest
from core.check.requests import RequestError, parse_request
from core.config import default_embedding_model_dir, default_model_dir
from core.endpoints import EMBEDDINGS_URL
from core.run.outputs import Embeddings, success_line
from core.schemas import JobDefaults
from tests.support.conformance import batch_output_model
from tests.support.embedding_lines import decoded, embed_line, sdk_parse


def parse(**body):
    return parse_request(EMBEDDINGS_URL, "e", {"model": "m", **body}, JobDefaults())


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


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_an_embeddings_line_is_openais_and_vllms_format(encoding):
    vectors = [np.array([0.5, -0.25, 1e-8], dtype=np.float32), np.zeros(3, dtype=np.float32)]
    line = success_line("e1", "all-MiniLM-L6-v2", Embeddings(7, vectors, encoding), EMBEDDINGS_URL)

    from vllm.entrypoints.pooling.embed.protocol import EmbeddingResponse

    batch_output_model().model_validate(line)
    body = line["response"]["body"]
    EmbeddingResponse.model_validate(body)
    parsed = sdk_parse(body)
    assert parsed.usage.prompt_tokens == parsed.usage.total_tokens == 7
    for item, vector in zip(body["data"], vectors, strict=True):
        np.testing.assert_array_equal(decoded(item), vector)  # float32 round trip, exact
    assert isinstance(body["data"][0]["embedding"], str if encoding == "base64" else list)
