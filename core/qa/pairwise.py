"""A pairwise judge for Compare: which of two jobs' answers to the same request is better.

Pairs are two jobs' succeeded results with the same ``custom_id`` (``core.store.compare``
pairs them). Each becomes one judge line showing "Answer 1" and "Answer 2"; a model tends
to prefer one position whatever it holds, so on exactly half of the pairs (those whose
``custom_id`` hashes lowest, so the same pairs on every run and machine) answer 1 is side B.
The line's ``metadata.swapped`` records it, and ``core.store.judged`` maps the verdict
(:data:`PAIRWISE_SCHEMA`: winner ``"1"``, ``"2"`` or ``"tie"``) back to A, B or tie.

Template variables: those of a verdict judge (core/qa/judge.py) from side A's request, with
``answer_1`` and ``answer_2`` in place of ``answer``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from core.jobs.submit import Started
from core.qa.judge import (
    JudgeError,
    JudgeSettings,
    base_context,
    compile_template,
    judge_line,
    new_check_name,
    render_all,
    submit_lines,
)
from core.schemas import JudgeLink
from core.store.compare import Side, pairs
from core.store.db import Store

PAIRWISE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "winner": {"type": "string", "enum": ["1", "2", "tie"]},
        "reason": {"type": "string", "maxLength": 160},
    },
    "required": ["winner", "reason"],
    "additionalProperties": False,
}
PAIRWISE_SYSTEM = (
    "You compare two answers to the same task. Reply with JSON only: "
    '{"winner": "1", "2" or "tie", "reason": one short sentence}.'
)
DEFAULT_PAIRWISE_TEMPLATE = """\
Which answer does the task better?
{% if system %}
Instructions the assistant was given:
{{ system }}
{% endif %}
Task:
{{ prompt }}

Answer 1:
{{ answer_1 }}

Answer 2:
{{ answer_2 }}

Judge correctness first, then completeness, then brevity. Reply "1", "2" or "tie", and
one short reason.
"""
MAX_PAIRS = 1_000_000


def _rank(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def swapped_keys(keys: Iterable[str]) -> set[str]:
    """The pairs whose sides are shown swapped: exactly half (rounded down), those whose
    key hashes lowest. Deterministic: the same keys give the same half anywhere."""
    ordered = sorted(set(keys), key=lambda k: (_rank(k), k))
    return set(ordered[: len(ordered) // 2])


def start_pairwise(
    store: Store,
    job_a: str,
    job_b: str,
    template_text: str,
    settings: JudgeSettings,
    jobs_dir: Path | None = None,
    label: Callable[[str], str] = str,
) -> Started:
    """Renders the template over the pairs of ``job_a`` and ``job_b`` (matched on
    ``custom_id``, both succeeded) and starts the pairwise judge job.

    Raises:
        JudgeError: the template does not compile or fails on some pairs, or no pair has
            two answers.
        core.jobs.submit.Refused: the model folder or the settings cannot run.
    """
    template = compile_template(template_text)
    if job_a == job_b:
        raise JudgeError(["choose two different jobs"])
    frame = pairs(store, Side(job_a), Side(job_b), "custom_id", limit=MAX_PAIRS)
    frame = frame[(frame["status_a"] == "succeeded") & (frame["status_b"] == "succeeded")]
    if frame.empty:
        raise JudgeError(["no pairs to judge: no custom_id has a succeeded answer on both sides"])
    swap = swapped_keys(frame["key"])
    contexts, metadata = [], {}
    for row in frame.to_dict("records"):
        key = str(row["key"])
        first, second = ("b", "a") if key in swap else ("a", "b")
        context = base_context(
            {"custom_id": key, "messages": row["messages_a"], "prompt": row["prompt_a"]}
        )
        context.update(
            answer_1=row[f"answer_{first}"] or "",
            answer_2=row[f"answer_{second}"] or "",
        )
        contexts.append((key, context))
        metadata[key] = {"judge_of": f"{job_a} vs {job_b}", "swapped": str(key in swap).lower()}
    model = Path(settings.model).name or "judge"
    lines = [
        judge_line(
            key, text, PAIRWISE_SCHEMA, metadata[key], model, settings.max_tokens,
            PAIRWISE_SYSTEM, "preference",
        )
        for key, text in render_all(template, contexts)
    ]  # fmt: skip
    link = JudgeLink(kind="pairwise", graded=[job_a, job_b], check=new_check_name())
    name = f"pairwise judge: {label(job_a)} vs {label(job_b)}"
    return submit_lines(lines, settings, link, template_text, name, jobs_dir)
