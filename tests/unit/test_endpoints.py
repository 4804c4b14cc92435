"""One table of endpoints (core/endpoints.py): every part of an endpoint, in every layer,
is keyed by its urls, so an endpoint is never half served."""

from __future__ import annotations

import dataclasses
import json
import typing

import pytest

from core.check.engine_requests import (
    KINDS,
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    GeneratedRequest,
    PooledRequest,
    ScoreRequest,
)
from core.check.fast_path import FastChatLine
from core.check.requests import PARSERS, parse_request
from core.check.sampling import RequestError
from core.endpoints import BATCH_API_URLS, ENDPOINTS, FAST_PATH_URLS, POOLING_URLS
from core.run.outputs import BODIES
from core.schemas import JobDefaults
from tests.support.conformance import SDK_TYPES, vllm_types


def test_each_endpoint_has_a_parser_and_an_output_body():
    assert list(PARSERS) == list(ENDPOINTS)
    assert list(BODIES) == list(ENDPOINTS)
    assert list(KINDS) == list(ENDPOINTS)


# A valid body of each endpoint, and the kind of request its lines become.
BODIES_BY_URL = {
    "/v1/chat/completions": ({"messages": [{"role": "user", "content": "Hi"}]}, ChatRequest),
    "/v1/completions": ({"prompt": "Once upon a time"}, CompletionRequest),
    "/v1/responses": ({"input": "Hi", "instructions": "Be brief."}, ChatRequest),
    "/v1/embeddings": ({"input": ["a", [1, 2]], "encoding_format": "base64"}, EmbeddingRequest),
    "/v1/score": ({"queries": ["q"], "documents": ["a", "b"]}, ScoreRequest),
    "/v1/rerank": ({"query": "q", "documents": ["a", "b"], "top_n": 1}, ScoreRequest),
}


def test_each_endpoint_has_a_body_here():
    assert list(BODIES_BY_URL) == list(ENDPOINTS)


@pytest.mark.parametrize("url", list(ENDPOINTS))
def test_each_endpoints_lines_become_its_kind_of_request(url):
    body, kind = BODIES_BY_URL[url]
    request = parse_request(url, "a", {"model": "m", **body}, JobDefaults(max_tokens=9))
    assert type(request) is kind is KINDS[url]
    assert (request.custom_id, request.url, request.model) == ("a", url, "m")
    # Pooled or generated as the table says: vectors and scores have no sampling.
    assert isinstance(request, PooledRequest) == ENDPOINTS[url].pooled
    assert isinstance(request, GeneratedRequest) != ENDPOINTS[url].pooled


@pytest.mark.parametrize("url", list(ENDPOINTS))
def test_each_kind_crosses_to_a_ray_replica_as_json_and_back_the_same(url):
    from core.run.ray_cluster import request_from_dict, request_to_dict

    body, kind = BODIES_BY_URL[url]
    request = parse_request(url, "a", {"model": "m", **body}, JobDefaults(max_tokens=9))
    back = request_from_dict(json.loads(json.dumps(request_to_dict(request))))
    assert type(back) is kind and back == request


def test_a_kind_has_no_field_of_another_and_is_built_by_keywords_only():
    chat = ChatRequest(custom_id="a", messages=[], sampling={})
    assert chat.url == "/v1/chat/completions"
    for name in ("inputs", "prompt", "queries", "encoding_format"):
        with pytest.raises(AttributeError):
            setattr(chat, name, None)  # slots: no field of another kind, even set later
    with pytest.raises(TypeError):
        ChatRequest(custom_id="a", messages=[], sampling={}, inputs=["x"])
    with pytest.raises(TypeError):
        EmbeddingRequest(custom_id="a", inputs=["x"], sampling={})
    with pytest.raises(TypeError):
        CompletionRequest("a", "/v1/completions", sampling={}, prompt="x")  # positional
    fields = {kind: {f.name for f in dataclasses.fields(kind)} for kind in set(KINDS.values())}
    common = {"custom_id", "url", "model", "warnings", "defaulted", "redacted"}
    assert fields[ChatRequest] & fields[EmbeddingRequest] == common
    assert fields[CompletionRequest] & fields[ScoreRequest] == common
    assert "prompt" not in fields[ChatRequest] and "messages" not in fields[CompletionRequest]


def test_the_generated_endpoints_are_held_to_openais_and_vllms_types():
    generated = [url for url in ENDPOINTS if url not in POOLING_URLS]
    assert list(SDK_TYPES) == generated and list(vllm_types()) == generated


def test_the_fast_path_decodes_the_fast_path_endpoints_only():
    url_type = typing.get_type_hints(FastChatLine)["url"]
    assert typing.get_args(url_type) == FAST_PATH_URLS


def test_a_url_not_in_the_table_is_refused_naming_every_served_one():
    try:
        parse_request("/v1/images/generations", "a", {}, JobDefaults())
    except RequestError as exc:
        message = str(exc)
    else:
        raise AssertionError("an unknown url was parsed")
    assert "'/v1/images/generations' is not served" in message
    assert all(url in message for url in ENDPOINTS)


def test_the_batch_api_takes_openais_endpoints_not_vllms_score_and_rerank():
    from core.api.batches import ENDPOINTS as ACCEPTED

    assert ACCEPTED == BATCH_API_URLS
    assert "/v1/embeddings" in ACCEPTED and "/v1/rerank" not in ACCEPTED
