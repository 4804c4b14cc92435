"""The order a job's requests reach the engine: shared prompt prefixes together, longest
answers first within them.

vLLM keeps a computed prompt prefix in its KV cache while requests that share it are in the
engine (prefix caching), so a long shared document or few-shot block is computed once for
all the questions asked of it, if those questions run together. In file order they rarely
do: a shuffled file of 40 documents with 25 questions each holds every document in the
engine at once, more than the cache keeps, and each is computed again and again.

Requests are sorted by what the model reads (the messages, or the prompt, in order), so
requests that share a beginning stand together; consecutive requests whose beginnings agree
for at least :data:`SHARED_CHARACTERS` form a group, and within a group the longest answers
(by ``max_tokens``) start first, so the group's tail is short. Results are matched by
``custom_id``, so order changes nothing a job writes: one line per request, resume and
cancel as before. Vectors and scores keep their order (nothing is generated), as do the
requests of a Ray job whose replicas read the prompts themselves (the driver has none).
"""

from __future__ import annotations

from core.check.engine_requests import (
    ChatRequest,
    CompletionRequest,
    EngineRequest,
    GeneratedRequest,
)

# Two prompts that agree this far share a block worth keeping (about 64 tokens).
SHARED_CHARACTERS = 256


def prompt_text(request: EngineRequest) -> str | None:
    """What the model reads first to last, as text (None: not a generated request)."""
    match request:
        case ChatRequest():
            tools = repr(request.tools) if request.tools else ""  # templates render them first
            turns = (f"{m.get('role')}\x01{m.get('content')}" for m in request.messages)
            return tools + "\x00".join(turns)
        case CompletionRequest():
            return request.prompt
    return None


def engine_order(requests: list[EngineRequest]) -> list[EngineRequest]:
    """``requests`` in the engine's best order (see the module's docstring)."""
    generated = [r for r in requests if isinstance(r, GeneratedRequest)]
    if len(generated) < len(requests):  # vectors or scores among them: as given
        return list(requests)
    texts = {id(r): prompt_text(r) or "" for r in generated}
    if not any(texts.values()):  # a Ray driver's requests, whose replicas read the prompts
        return list(requests)
    generated.sort(key=lambda r: texts[id(r)])
    groups: list[list[GeneratedRequest]] = []
    for request in generated:
        start = texts[id(request)][:SHARED_CHARACTERS]
        if groups and texts[id(groups[-1][0])][:SHARED_CHARACTERS] == start:
            groups[-1].append(request)
        else:
            groups.append([request])
    ordered: list[EngineRequest] = []
    for group in groups:
        ordered.extend(sorted(group, key=lambda r: -r.max_tokens))
    return ordered
