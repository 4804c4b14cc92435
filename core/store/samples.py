"""Samples of results to review: random with a seed, stratified, or failures first.

A sample is saved with its definition (filter, method, size, seed, field) and its items, so
reopening it shows the same items even after more results arrive. The random order is
``md5(seed, job_id, custom_id)``: the same definition over the same results draws the same
sample on any machine, whatever the storage order.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

import pandas as pd
from pydantic import Field, ValidationError

from core.human.files import SampleDeleted, SampleItem, SampleRecord, append, now_utc
from core.human.owners import record_owner
from core.schemas import Model, problems_of
from core.store.db import Store
from core.store.results import FROM, ResultFilter, metadata_path, where
from core.store.schema import SHOWN_ANSWER_SQL

Method = Literal["random", "stratified", "failures_first"]
METHODS: tuple[str, ...] = get_args(Method)
# Stratify-by choices -> SQL; "metadata:<key>" is handled apart (the key is a parameter).
STRATA: dict[str, str] = {
    "model": "coalesce(r.model, '(none)')",
    "finish_reason": "coalesce(r.finish_reason, '(none)')",
    "status": "r.status",
    "prompt_version": "coalesce(r.prompt_version, '(none)')",
    "prompt_length": (
        "CASE WHEN length(r.prompt) IS NULL THEN '(none)' "
        "WHEN length(r.prompt) < 200 THEN 'a: under 200 chars' "
        "WHEN length(r.prompt) < 1000 THEN 'b: 200-999 chars' "
        "WHEN length(r.prompt) < 4000 THEN 'c: 1000-3999 chars' "
        "ELSE 'd: 4000+ chars' END"
    ),
}
MAX_STRATA = 200
MAX_SIZE = 10_000


class SampleError(ValueError):
    """A sample definition that cannot be drawn; the message says why."""


class SampleDefinition(Model):
    """How a sample is drawn; saved with the sample (JSON through pydantic).

    Attributes:
        filter: the results to draw from.
        method: ``random``, ``stratified`` or ``failures_first``.
        size: how many items.
        seed: the random seed (same seed, same results: same sample).
        stratify_by: for ``stratified``: a key of :data:`STRATA` or ``metadata:<key>``.
    """

    filter: ResultFilter
    method: Method = "random"
    size: int = Field(50, ge=1, le=MAX_SIZE)
    seed: int = 0
    stratify_by: str | None = None


@dataclass
class Sample:
    """A saved sample."""

    sample_id: str
    name: str
    definition: SampleDefinition
    size: int
    created_at: Any = None
    strata: dict[str, int] = field(default_factory=dict)


def _stratum(stratify_by: str | None, params: list[Any]) -> str:
    if stratify_by is None:
        raise SampleError("choose a field to stratify by")
    if stratify_by.startswith("metadata:"):
        params.append(metadata_path(stratify_by.removeprefix("metadata:")))
        return "coalesce(r.metadata ->> ?, '(none)')"
    if stratify_by not in STRATA:
        raise SampleError(f"cannot stratify by {stratify_by!r}")
    return STRATA[stratify_by]


def quotas(counts: dict[str, int], size: int) -> dict[str, int]:
    """Splits ``size`` over strata in proportion to their counts, at least one each where
    possible (largest remainders get the leftovers), never more than a stratum holds."""
    total = sum(counts.values())
    if total == 0 or size <= 0:
        return dict.fromkeys(counts, 0)
    size = min(size, total)
    exact = {k: size * n / total for k, n in counts.items()}
    out = {k: min(counts[k], max(1, int(v))) for k, v in exact.items()}
    while sum(out.values()) > size:  # the minimum of one each overshot: trim the largest
        biggest = max(out, key=lambda k: out[k])
        out[biggest] -= 1
    order = sorted(counts, key=lambda k: exact[k] - int(exact[k]), reverse=True)
    while sum(out.values()) < size:
        grew = False
        for k in order:
            if sum(out.values()) < size and out[k] < counts[k]:
                out[k] += 1
                grew = True
        if not grew:
            break
    return out


def draw(store: Store, definition: SampleDefinition) -> pd.DataFrame:
    """The sample's items (``job_id``, ``custom_id``, ``stratum``) in review order."""
    d = definition  # its method and size are checked by the model's constraints
    clause, params = where(d.filter)
    rand = "md5(concat_ws(':', ?, r.job_id, r.custom_id))"
    seed = str(int(d.seed))
    if d.method == "random":
        sql = f"""SELECT r.job_id, r.custom_id, NULL AS stratum {FROM} {clause}
                  ORDER BY {rand} LIMIT ?"""
        return store.query(sql, [*params, seed, d.size])
    if d.method == "failures_first":
        stratum = (
            "CASE WHEN r.status = 'failed' THEN 'failed' "
            "WHEN r.finish_reason = 'length' THEN 'truncated' ELSE 'other' END"
        )
        sql = f"""SELECT r.job_id, r.custom_id, {stratum} AS stratum {FROM} {clause}
                  ORDER BY CASE stratum WHEN 'failed' THEN 0 WHEN 'truncated' THEN 1 ELSE 2 END,
                           {rand} LIMIT ?"""
        return store.query(sql, [*params, seed, d.size])
    stratum_params: list[Any] = []
    stratum = _stratum(d.stratify_by, stratum_params)
    counts = store.query(
        f"SELECT {stratum} AS s, count(*) AS n {FROM} {clause} GROUP BY s",
        [*stratum_params, *params],
    )
    if len(counts) > MAX_STRATA:
        raise SampleError(
            f"{d.stratify_by} has {len(counts):,} values; stratify by a field with at most "
            f"{MAX_STRATA}"
        )
    quota = quotas(dict(zip(counts["s"], counts["n"], strict=True)), d.size)
    sql = f"""
        WITH hashed AS (
            SELECT r.job_id, r.custom_id, {stratum} AS stratum, {rand} AS h {FROM} {clause}
        ), ranked AS (  -- the hash is computed once per row, not once per use
            SELECT *, row_number() OVER (PARTITION BY stratum ORDER BY h) AS rn FROM hashed
        )
        SELECT job_id, custom_id, stratum FROM ranked
        WHERE rn <= coalesce(map_extract(MAP(?, ?), stratum)[1], 0)
        ORDER BY h
    """
    keys = [str(k) for k in quota]
    params_all = [*stratum_params, seed, *params, keys, [int(v) for v in quota.values()]]
    return store.query(sql, params_all)


def create_sample(
    store: Store, name: str, definition: SampleDefinition, owner: str | None = None
) -> Sample:
    """Draws a sample and saves it with its definition (and its ``owner``, the signed-in
    user who drew it: ``core.human.owners``; None without sign-in)."""
    name = name.strip()
    if not name:
        raise SampleError("give the sample a name")
    items = draw(store, definition)
    if items.empty:
        raise SampleError("no results match the filter; nothing to sample")
    return save_items(store, name, definition, items, owner)


def save_items(
    store: Store,
    name: str,
    definition: SampleDefinition,
    items: pd.DataFrame,
    owner: str | None = None,
) -> Sample:
    """Saves chosen items (``job_id``, ``custom_id``, ``stratum``; in review order) as a
    sample, e.g. the results where a person and a check disagree; ``owner`` is recorded as
    its owner (``core.human.owners``; None: no owner, anyone may change its schema)."""
    name = name.strip()
    if not name:
        raise SampleError("give the sample a name")
    if items.empty:
        raise SampleError("no items; nothing to sample")
    items = items[["job_id", "custom_id", "stratum"]]
    sample_id = f"smp_{secrets.token_hex(4)}"
    record = SampleRecord(
        sample_id=sample_id,
        name=name,
        definition=definition.model_dump(mode="json"),
        items=[
            SampleItem(job_id=j, custom_id=c, stratum=None if pd.isna(s) else str(s))
            for j, c, s in items.itertuples(index=False)
        ],
        at=now_utc(),
    )
    append(store.human_dir, record)  # the file first, whole in one line: the index follows
    if owner:
        record_owner(store.human_dir, sample_id, owner, by=owner)
    store.sync_human()
    return get_sample(store, sample_id)


def list_samples(store: Store) -> pd.DataFrame:
    """Saved samples, newest first."""
    return store.query(
        "SELECT sample_id, name, size, created_at, definition FROM samples "
        "ORDER BY created_at DESC, sample_id",
    )


def samples_of_job(samples: pd.DataFrame, job_id: str | None) -> list[str]:
    """The ids of the samples (rows of :func:`list_samples`, kept in its order: newest
    first) drawn from a job's results."""
    return [
        sample_id
        for sample_id, definition in zip(samples["sample_id"], samples["definition"], strict=True)
        if job_id in json.loads(definition).get("filter", {}).get("job_ids", [])
    ]


def samples_of_item(store: Store, job_id: str, custom_id: str) -> list[str]:
    """The ids of the samples that hold an item (a result), sorted."""
    found = store.query(
        "SELECT DISTINCT sample_id FROM sample_items WHERE job_id = ? AND custom_id = ? "
        "ORDER BY sample_id",
        [job_id, custom_id],
    )
    return list(found["sample_id"])


def get_sample(store: Store, sample_id: str) -> Sample:
    frame = store.query("SELECT * FROM samples WHERE sample_id = ?", [sample_id])
    if frame.empty:
        raise SampleError(f"no sample {sample_id!r}")
    row = frame.iloc[0]
    strata = store.query(
        "SELECT coalesce(stratum, '') AS s, count(*) AS n FROM sample_items "
        "WHERE sample_id = ? GROUP BY s ORDER BY s",
        [sample_id],
    )
    try:
        definition = SampleDefinition.model_validate_json(row["definition"])
    except ValidationError as exc:  # a hand-edited samples.jsonl: named, not a crash
        raise SampleError(
            f"sample {row['name']} ({sample_id}) in samples.jsonl has a definition that "
            f"cannot be read: {'; '.join(problems_of(exc))}"
        ) from exc
    return Sample(
        sample_id=row["sample_id"],
        name=row["name"],
        definition=definition,
        size=int(row["size"]),
        created_at=row["created_at"],
        strata={s: int(n) for s, n in zip(strata["s"], strata["n"], strict=True) if s},
    )


def sample_items(store: Store, sample_id: str) -> pd.DataFrame:
    """The sample's items in order, with their results (whole texts) and each request's
    whole conversation (``messages``, JSON text: the system prompt holds the task)."""
    return store.query(
        f"""
        SELECT i.position, i.job_id, i.custom_id, i.stratum, r.status, r.finish_reason,
               r.model, r.prompt_version, r.prompt, {SHOWN_ANSWER_SQL} AS answer,
               r.tool_calls, r.error_message,
               r.prompt_tokens, r.completion_tokens, CAST(q.messages AS VARCHAR) AS messages
        FROM sample_items i
        LEFT JOIN results r ON r.job_id = i.job_id AND r.custom_id = i.custom_id
        LEFT JOIN requests q ON q.job_id = i.job_id AND q.custom_id = i.custom_id
        WHERE i.sample_id = ?
        ORDER BY i.position
        """,
        [sample_id],
    )


def delete_sample(store: Store, sample_id: str) -> None:
    """Removes a sample and its items (reviews of its items stay: they belong to results)."""
    append(store.human_dir, SampleDeleted(sample_id=sample_id, at=now_utc()))
    store.sync_human()
