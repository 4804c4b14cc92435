"""One table of endpoints (core/endpoints.py): every part of an endpoint, in every layer,
is keyed by its urls, so an endpoint is never half served."""

from __future__ import annotations

import typing

from core.check.fast_path import FastChatLine
from core.check.requests import PARSERS, parse_request
from core.check.sampling import RequestError
from core.endpoints import BATCH_API_URLS, ENDPOINTS, FAST_PATH_URLS, POOLING_URLS
from core.run.outputs import BODIES
from core.schemas import JobDefaults
from tests.support.conformance import SDK_TYPES, VLLM_TYPES


def test_each_endpoint_has_a_parser_and_an_output_body():
    assert list(PARSERS) == list(ENDPOINTS)
    assert list(BODIES) == list(ENDPOINTS)


def test_the_generated_endpoints_are_held_to_openais_and_vllms_types():
    generated = [url for url in ENDPOINTS if url not in POOLING_URLS]
    assert list(SDK_TYPES) == generated and list(VLLM_TYPES) == generated


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
