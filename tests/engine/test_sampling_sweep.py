"""The check against the engine, over generated combinations of sampling fields.

Every line the check calls valid must run on the real engine, and so every line the
engine would refuse must be refused by the check first (with its line number), before a
model is loaded. The combinations are generated, not listed: every pair of values of every
two fields, on each endpoint, plus seeded random combinations of many fields at once. The
values include each field's edges (zero temperature, ``n`` above one, ``min_tokens`` above
``max_tokens``, token ids at the end of the vocabulary, the largest seeds) and values past
them, which the check must refuse.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import pytest

from core.check import check_file
from core.check.scanner import scan
from core.endpoints import CHAT_URL, COMPLETIONS_URL, RESPONSES_URL
from core.schemas import JobDefaults
from tests.support.engine_child import EngineChild

VOCAB = 49_152  # SmolLM2's vocabulary: ids 0 .. 49151

# Each field's values: inside the range, at its edges, and a few past them.
FIELDS: dict[str, list[Any]] = {
    "n": [1, 2, 3, 17],
    "temperature": [0, 1e-6, 0.005, 0.7, 2, 2.5],
    "top_p": [1e-3, 0.5, 1, 0],
    "top_k": [-1, 0, 1, 40, -2],
    "min_p": [0, 0.3, 1],
    "presence_penalty": [-2, 0, 2, 2.5],
    "frequency_penalty": [-2, 2],
    "repetition_penalty": [0.1, 1, 2, 0],
    "seed": [-(2**63), -1, 0, 2**63 - 1],
    "max_tokens": [1, 3, 0],
    "min_tokens": [0, 2, 3, 9],
    "stop": ["\n", ["a", "b"], ["the", "x", "y", "z", "w"], [""]],
    "logprobs": [False, True, 3],
    "top_logprobs": [0, 5, 20, 21],
    "logit_bias": [{"0": 100}, {str(VOCAB - 1): -100}, {"5": 1.5}, {str(VOCAB): 1}, {"7": 101}],
    "response_format": [{"type": "json_object"}, {"type": "text"}],
}
# The Responses API names some fields differently.
RESPONSES_NAMES = {"max_tokens": "max_output_tokens", "response_format": "text"}
RANDOM_COMBINATIONS = 150


def body(url: str, fields: dict[str, Any]) -> dict[str, Any]:
    """A body of ``url`` with ``fields`` (named as that endpoint names them)."""
    if url == COMPLETIONS_URL:
        out: dict[str, Any] = {"model": "m", "prompt": "The capital of France is"}
    elif url == RESPONSES_URL:
        out = {"model": "m", "input": "Name a colour."}
    else:
        out = {"model": "m", "messages": [{"role": "user", "content": "Name a colour."}]}
    for name, value in fields.items():
        if url == RESPONSES_URL:
            if name == "response_format":
                value = {"format": value}
            name = RESPONSES_NAMES.get(name, name)
        out[name] = value
    return out


def combinations() -> list[tuple[str, dict[str, Any]]]:
    """Every pair of values of every two fields per endpoint, then random full mixes."""
    out = []
    for url in (CHAT_URL, COMPLETIONS_URL, RESPONSES_URL):
        for (a, values_a), (b, values_b) in itertools.combinations(FIELDS.items(), 2):
            for va, vb in itertools.product(values_a, values_b):
                out.append((url, {a: va, b: vb}))
    rng = random.Random(18)
    for _ in range(RANDOM_COMBINATIONS):
        url = rng.choice((CHAT_URL, COMPLETIONS_URL, RESPONSES_URL))
        names = rng.sample(sorted(FIELDS), rng.randint(3, len(FIELDS)))
        out.append((url, {name: rng.choice(FIELDS[name]) for name in names}))
    return out


RUN_IN_FULL = 240  # of the lines the check passes, how many run to their last token


@pytest.mark.engine
def test_every_line_the_check_passes_runs_on_the_engine(
    default_model: Path, tmp_path: Path, engine_child: EngineChild
):
    cases = combinations()
    path, valid_path = tmp_path / "sweep.jsonl", tmp_path / "valid.jsonl"
    with path.open("w") as out:
        for index, (url, fields) in enumerate(cases):
            line = {"custom_id": f"c{index}", "method": "POST", "url": url}
            out.write(json.dumps({**line, "body": body(url, fields)}) + "\n")
    defaults = JobDefaults(max_tokens=4)
    report = check_file(path, defaults, model_folder=default_model, valid_out=valid_path)
    refused = {p.line for p in report.errors}
    # The check is not vacuous: it refuses what is past the edges, and passes the rest.
    assert all(p.line > 0 and p.message for p in report.errors)
    assert 0.2 * len(cases) < len(refused) < 0.9 * len(cases)
    requests = [line.request for line in scan(valid_path, defaults)]
    assert len(requests) == len(cases) - len(refused)

    out = tmp_path / "engine.json"
    # Cold start: every line goes to vLLM's own door (add_request, then abort), which only an
    # engine in the session's engine child opens (one process for this test and the
    # cross-encoder's); no job shows it.
    found = engine_child.run(out, "door", str(valid_path), str(default_model), str(out), "--run",
                      str(RUN_IN_FULL), "--max-tokens", "4")  # fmt: skip
    assert found["admitted"] == len(requests)
    refusals = sorted(f"{why} ({cases[int(cid[1:])]})" for cid, why in found["refused"].items())
    assert refusals == [], f"{len(refusals)} lines passed the check; the engine refused"
    # A seeded share of them ran to their last token: generation refused nothing more.
    assert len(found["ran"]) == min(RUN_IN_FULL, len(requests))
    for cid, answers in found["ran"].items():
        url, fields = cases[int(cid[1:])]
        assert isinstance(answers, list), f"{answers} ({url} {fields})"
        assert len(answers) == fields.get("n", 1)  # n answers, greedy n copied included
        assert all(tokens <= fields.get("max_tokens", defaults.max_tokens) for tokens in answers)
