"""Validation of output lines against the ``openai`` SDK's types and vLLM's own models.

A reader of our files parses them with one of the two: every success body must validate
as the SDK type of its url (``ChatCompletion``, ``Completion``, ``Response``) and as vLLM's
output model of that url; every failure must carry OpenAI's error object; the envelope
must validate as vLLM's ``BatchRequestOutput`` (whose body union holds chat bodies only, so
other bodies are checked apart from it).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from openai.types import BatchError, Completion, ErrorObject
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from pydantic import BaseModel

from core.endpoints import CHAT_URL, COMPLETIONS_URL, RESPONSES_URL

SDK_TYPES: dict[str, type[BaseModel]] = {
    CHAT_URL: ChatCompletion,
    COMPLETIONS_URL: Completion,
    RESPONSES_URL: Response,
}


# vLLM's models are imported when a test first asks: importing vllm (and torch) costs a
# pytest process about 5 s, which every xdist worker of `make check` paid at collection.
@cache
def vllm_types() -> dict[str, type[BaseModel]]:
    """vLLM's output model of each url."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse
    from vllm.entrypoints.openai.completion.protocol import CompletionResponse
    from vllm.entrypoints.openai.responses.protocol import ResponsesResponse

    return {
        CHAT_URL: ChatCompletionResponse,
        COMPLETIONS_URL: CompletionResponse,
        RESPONSES_URL: ResponsesResponse,
    }


def batch_output_model() -> type[BaseModel]:
    """vLLM's ``BatchRequestOutput``, the envelope of a batch output line."""
    from vllm.entrypoints.launchers.run_batch import BatchRequestOutput

    return BatchRequestOutput


def validate_line(line: dict[str, Any], url: str) -> BaseModel | None:
    """Validates one output line of a request to ``url``; returns the SDK's parse of its
    body (None for a failure). Raises pydantic's ValidationError naming what is missing."""
    body = line["response"]["body"]
    envelope = line if url == CHAT_URL or body is None else _without_body(line)
    batch_output_model().model_validate(envelope)
    if body is None:
        assert line["response"]["status_code"] >= 400
        ErrorObject.model_validate(line["error"])
        BatchError.model_validate(line["error"])
        return None
    assert line["error"] is None and line["response"]["status_code"] == 200
    vllm_types()[url].model_validate(body)
    return SDK_TYPES[url].model_validate(body)


def _without_body(line: dict[str, Any]) -> dict[str, Any]:
    return {**line, "response": {**line["response"], "body": None}}


def missing_fields(model: type[BaseModel], value: Any, prefix: str = "") -> set[str]:
    """The fields ``model`` requires that ``value`` lacks, as dotted paths, looking into
    every nested object ``value`` has (required or not) whose type is one model."""
    if isinstance(value, list):
        return {path for item in value for path in missing_fields(model, item, prefix)}
    if not isinstance(value, dict):
        return set()
    missing = set()
    for name, info in model.model_fields.items():
        if name not in value:
            if info.is_required():
                missing.add(prefix + name)
            continue
        for nested in _models_in(info.annotation):
            missing |= missing_fields(nested, value[name], f"{prefix}{name}.")
    return missing


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    args = getattr(annotation, "__args__", ()) or ()
    # A union of several models (an output item of any kind) is not ours to fill in whole.
    models = [m for arg in args for m in _models_in(arg)]
    return models if len(models) == 1 else []
