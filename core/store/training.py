"""Training data from people's work: OpenAI's fine-tuning files and a Parquet dataset.

- ``sft``: OpenAI's chat fine-tuning format, one ``{"messages": [...]}`` a line: the
  request's messages as the batch line had them, then the answer as the assistant's turn
  (a reviewer's corrected answer where one was given), for a sample's items whose final
  label passes.
- ``dpo``: OpenAI's preference fine-tuning format (``input.messages``,
  ``preferred_output``, ``non_preferred_output``) from Compare's preferences.
- ``dataset``: a folder that ``datasets.load_dataset("parquet", data_dir=...)`` loads
  (``train.parquet``: every item of a sample with its labels) and its card, ``README.md``.

An item's **final label** is an owner's adjudication where one was made
(``core.store.agreement``), else its reviewers' verdict where they all gave the same one;
none where they differ. Each export counts what it left out and
why (:class:`Outcome`). Text from files and models is data: JSON carries it unchanged.
A file or folder appears whole or not at all (``core.files``: written beside, renamed).
"""

from __future__ import annotations

import io
import json
import zipfile
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.files import file_atomic, folder_atomic
from core.human.files import VERDICTS
from core.store.agreement import LEVELS, SampleAgreement, sample_agreement
from core.store.db import Store
from core.store.export import ExportError
from core.store.schema import SHOWN_ANSWER_SQL

# One example's line past this is left out: no fine-tuning context holds a text this long,
# and a provider refuses the whole file for one such line.
MAX_EXAMPLE_CHARS = 1_000_000
DATA_FILE = "train.parquet"
CARD_FILE = "README.md"

# The one rule of an item's final label, over its reviewers' latest labels (``reviews v``
# grouped by item) joined with ADJUDICATED_SQL (``a``): an owner's adjudication where one
# was made, else the verdict all reviewers gave; NULL where none labelled or they differ.
FINAL_LABEL_SQL = (
    "coalesce(any_value(a.verdict), "
    "CASE WHEN count(DISTINCT v.verdict) = 1 THEN min(v.verdict) END)"
)
# Each item's latest adjudication (core.store.agreement.adjudicate), joined as ``a``.
ADJUDICATED_SQL = """
    LEFT JOIN (SELECT job_id, custom_id, arg_max(verdict, line_no) AS verdict,
                      arg_max(adjudicator, line_no) AS adjudicator
               FROM adjudications GROUP BY ALL) a
         ON a.job_id = i.job_id AND a.custom_id = i.custom_id
"""


@dataclass
class Outcome:
    """What an export wrote, and what it left out by reason."""

    path: Path
    written: int
    left_out: Counter[str] = field(default_factory=Counter)
    unit: str = "examples"

    def counted(self) -> str:
        """What was written, e.g. "3 examples", "1 pair"."""
        unit = self.unit[:-1] if self.written == 1 else self.unit
        return f"{self.written:,} {unit}"

    def reasons(self) -> str:
        """What was left out and why, e.g. "3 not labelled, 1 labelled fail"."""
        return ", ".join(f"{n:,} {why}" for why, n in self.left_out.most_common()) or "none"

    def describe(self) -> str:
        text = f"{self.counted()} written to {self.path}"
        if not self.left_out:
            return text + "; none left out"
        return f"{text}; {sum(self.left_out.values()):,} left out: {self.reasons()}"


def _sample_exists(store: Store, sample_id: str) -> None:
    if store.query("SELECT 1 FROM samples WHERE sample_id = ?", [sample_id]).empty:
        raise ExportError(
            f"no sample {sample_id!r}: Review lists the samples (each id under its name)"
        )


def _chat_messages(messages_json: str | None) -> list[dict[str, Any]] | None:
    """The request's conversation as OpenAI's chat messages, unchanged: a chat request's
    ``messages``, a Responses input list of role turns, or a Responses input string as one
    user turn. None when the request has no conversation (a completions prompt, texts to
    embed)."""
    if messages_json is None:
        return None
    try:
        messages = json.loads(messages_json)
    except ValueError:
        return None
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if (
        isinstance(messages, list)
        and messages
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in messages)
    ):
        return messages
    return None


def _line(example: dict[str, Any]) -> str | None:
    """The example as one JSONL line (text kept as is); None when it is too long."""
    line = json.dumps(example, ensure_ascii=False)
    return None if len(line) > MAX_EXAMPLE_CHARS else line + "\n"


def _write_lines(path: Path, lines: list[str], nothing: str) -> None:
    if not lines:
        raise ExportError(f"{nothing}: nothing written")
    with file_atomic(path) as out:
        out.writelines(line.encode("utf-8") for line in lines)


TOO_LONG = f"over {MAX_EXAMPLE_CHARS:,} characters"


def export_sft(store: Store, sample_id: str, path: str | Path) -> Outcome:
    """A sample's passing items as OpenAI chat fine-tuning lines (in the sample's order).

    Raises:
        ExportError: no such sample, or no item of it passes (nothing is written then).
    """
    path = Path(path)
    _sample_exists(store, sample_id)
    rows = store.query(
        f"""
        SELECT i.position, any_value(r.status) AS status, any_value(r.answer) AS answer,
               any_value(r.tool_calls) AS tool_calls,
               any_value(CAST(q.messages AS VARCHAR)) AS messages,
               count(v.verdict) AS labels, {FINAL_LABEL_SQL} AS final,
               arg_max(v.corrected_answer, v.updated_at)
                   FILTER (WHERE v.corrected_answer IS NOT NULL) AS corrected
        FROM sample_items i
        LEFT JOIN results r ON r.job_id = i.job_id AND r.custom_id = i.custom_id
        LEFT JOIN requests q ON q.job_id = i.job_id AND q.custom_id = i.custom_id
        LEFT JOIN reviews v ON v.job_id = i.job_id AND v.custom_id = i.custom_id
        {ADJUDICATED_SQL}
        WHERE i.sample_id = ?
        GROUP BY i.position ORDER BY i.position
        """,
        [sample_id],
    )
    lines: list[str] = []
    left_out: Counter[str] = Counter()
    for row in rows.itertuples(index=False):
        why, line = _sft_line(row)
        if line is None:
            left_out[why] += 1
        else:
            lines.append(line)
    outcome = Outcome(path, len(lines), left_out)
    nothing = f"no item of sample {sample_id} passes (left out: {outcome.reasons()})"
    _write_lines(path, lines, nothing)
    return outcome


def _present(value: Any) -> bool:
    return value is not None and value == value  # NaN/NA from pandas: absent


def _sft_line(row: Any) -> tuple[str, str | None]:
    """(why the item is left out, its line): one of them is set."""
    if not row.labels:
        return "not labelled", None
    if not _present(row.final):
        return "reviewers disagree", None
    if row.final != "pass":
        return (f"labelled {row.final}" if row.final in VERDICTS else "an own label"), None
    corrected = row.corrected if _present(row.corrected) else None
    if corrected is None:
        if row.status != "succeeded":
            return "request failed, no corrected answer", None
        if _present(row.tool_calls):
            return "the answer calls a tool", None
    messages = _chat_messages(row.messages if _present(row.messages) else None)
    if messages is None:
        return "not a chat request", None
    answer = corrected if corrected is not None else row.answer
    line = _line({"messages": [*messages, {"role": "assistant", "content": answer or ""}]})
    return (TOO_LONG, None) if line is None else ("", line)


def export_dpo(store: Store, path: str | Path, comparison: str | None = None) -> Outcome:
    """Compare's preferences (of one comparison, or all) as OpenAI preference fine-tuning
    lines: per pair whose reviewers all preferred the same side, that side's answer is the
    preferred output and the other's the non-preferred one.

    Raises:
        ExportError: no pair has a preference to export (nothing is written then).
    """
    path = Path(path)
    where, params = ("WHERE comparison = ?", [comparison]) if comparison else ("", [])
    if comparison and store.query(f"SELECT 1 FROM preferences {where}", params).empty:
        raise ExportError(f"no preference saved in comparison {comparison!r}: nothing written")
    rows = store.query(
        f"""
        WITH p AS (
            SELECT comparison, key, list(DISTINCT choice) AS choices,
                   any_value(job_a) AS job_a, any_value(custom_id_a) AS custom_id_a,
                   any_value(job_b) AS job_b, any_value(custom_id_b) AS custom_id_b
            FROM preferences {where} GROUP BY comparison, key
        )
        SELECT p.choices, ra.status AS status_a, rb.status AS status_b,
               ra.answer AS answer_a, rb.answer AS answer_b,
               ra.tool_calls AS calls_a, rb.tool_calls AS calls_b,
               CAST(qa.messages AS VARCHAR) AS messages_a,
               CAST(qb.messages AS VARCHAR) AS messages_b
        FROM p
        LEFT JOIN results ra ON ra.job_id = p.job_a AND ra.custom_id = p.custom_id_a
        LEFT JOIN results rb ON rb.job_id = p.job_b AND rb.custom_id = p.custom_id_b
        LEFT JOIN requests qa ON qa.job_id = p.job_a AND qa.custom_id = p.custom_id_a
        LEFT JOIN requests qb ON qb.job_id = p.job_b AND qb.custom_id = p.custom_id_b
        ORDER BY p.comparison, p.key
        """,
        params,
    )
    lines: list[str] = []
    left_out: Counter[str] = Counter()
    for row in rows.itertuples(index=False):
        why, line = _dpo_line(row)
        if line is None:
            left_out[why] += 1
        else:
            lines.append(line)
    outcome = Outcome(path, len(lines), left_out, unit="pairs")
    scope = f"comparison {comparison}" if comparison else "the comparisons"
    nothing = f"no pair of {scope} has a preference to export (left out: {outcome.reasons()})"
    _write_lines(path, lines, nothing)
    return outcome


def _dpo_line(row: Any) -> tuple[str, str | None]:
    choices = list(row.choices)
    if len(choices) > 1:
        return "reviewers disagree", None
    if choices == ["tie"]:
        return "a tie", None
    if row.status_a != "succeeded" or row.status_b != "succeeded":
        return "an answer failed or is missing", None
    if _present(row.calls_a) or _present(row.calls_b):
        return "an answer calls a tool", None
    messages = _chat_messages(row.messages_a if _present(row.messages_a) else None)
    other = _chat_messages(row.messages_b if _present(row.messages_b) else None)
    if messages is None:
        return "not a chat request", None
    if messages != other:
        return "the two prompts differ", None
    preferred, other_answer = (
        (row.answer_a, row.answer_b) if choices == ["A"] else (row.answer_b, row.answer_a)
    )
    line = _line(
        {
            "input": {"messages": messages},
            "preferred_output": [{"role": "assistant", "content": preferred or ""}],
            "non_preferred_output": [{"role": "assistant", "content": other_answer or ""}],
        }
    )
    return (TOO_LONG, None) if line is None else ("", line)


# One row per item of a sample: the result, the request's conversation, the final label,
# and every reviewer's latest label as a list of structs.
_DATASET_SQL = f"""
    SELECT i.sample_id, i.position, i.job_id, coalesce(any_value(j.name), '') AS job_name,
           i.custom_id, any_value(i.stratum) AS stratum, any_value(r.model) AS model,
           any_value(r.prompt_version) AS prompt_version, any_value(r.status) AS status,
           any_value(r.finish_reason) AS finish_reason,
           any_value(CAST(q.messages AS VARCHAR)) AS messages,
           any_value(r.prompt) AS prompt, any_value({SHOWN_ANSWER_SQL}) AS answer,
           {FINAL_LABEL_SQL} AS final_label, any_value(a.adjudicator) AS adjudicated_by,
           arg_max(v.corrected_answer, v.updated_at)
               FILTER (WHERE v.corrected_answer IS NOT NULL) AS corrected_answer,
           avg(v.score) AS mean_score,
           list({{'reviewer': v.reviewer, 'verdict': v.verdict, 'score': v.score,
                  'tags': v.tags, 'comment': v.comment,
                  'corrected_answer': v.corrected_answer,
                  'answers': CAST(v.answers AS VARCHAR), 'labelled_at': v.updated_at}}
                ORDER BY v.reviewer) FILTER (WHERE v.reviewer IS NOT NULL) AS labels,
           any_value(r.created_at) AS answered_at
    FROM sample_items i
    JOIN results r ON r.job_id = i.job_id AND r.custom_id = i.custom_id
    LEFT JOIN requests q ON q.job_id = i.job_id AND q.custom_id = i.custom_id
    LEFT JOIN jobs j ON j.job_id = i.job_id
    LEFT JOIN reviews v ON v.job_id = i.job_id AND v.custom_id = i.custom_id
    {ADJUDICATED_SQL}
    WHERE i.sample_id = ?
    GROUP BY i.sample_id, i.position, i.job_id, i.custom_id
    ORDER BY i.position
"""


def export_dataset(store: Store, sample_id: str, folder: str | Path) -> Outcome:
    """A sample with its labels as a Hugging Face dataset folder: ``train.parquet`` and a
    dataset card (``README.md``). The folder must be new or empty; it appears complete or
    not at all (written beside it, then renamed).

    Raises:
        ExportError: no such sample, a folder that holds files, or no item with a result.
    """
    folder = Path(folder)
    _sample_exists(store, sample_id)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ExportError(f"{folder} exists and is not an empty folder: name a new one")
    counted = "SELECT count(*) AS n FROM sample_items WHERE sample_id = ?"
    items = int(store.query(counted, [sample_id])["n"].iloc[0])

    def taken(target: Path) -> bool:  # filled by someone else meanwhile: theirs stays
        if target.exists() and any(target.iterdir()):
            raise ExportError(f"{target} was filled while the dataset was written: try again")
        return False

    with folder_atomic(folder, taken) as tmp:
        tmp.mkdir(parents=True)
        target = "'" + str(tmp / DATA_FILE).replace("'", "''") + "'"
        with store.cursor() as cur:  # a read: no write waits for it
            copy = f"COPY ({_DATASET_SQL}) TO {target} (FORMAT parquet, COMPRESSION zstd)"
            written = int(cur.execute(copy, [sample_id]).fetchone()[0])
        left_out = Counter({"no result in the store": items - written} if items > written else {})
        outcome = Outcome(folder, written, left_out, unit="items")
        if not written:
            raise ExportError(f"no item of sample {sample_id} has a result: nothing written")
        (tmp / CARD_FILE).write_text(dataset_card(store, sample_id, outcome), encoding="utf-8")
    return outcome


_MD_SPECIAL = set("\\`*_{}[]()<>#+-.!|~")


def _md(text: Any) -> str:
    """A name as literal text in the card's Markdown (job names and reviewers are data)."""
    return "".join("\\" + c if c in _MD_SPECIAL else c for c in " ".join(str(text).split()))


def dataset_card(store: Store, sample_id: str, outcome: Outcome) -> str:
    """The dataset card: counts, label distribution, agreement, provenance."""
    summary = store.query(
        f"""
        WITH items AS ({_DATASET_SQL})
        SELECT coalesce(final_label, CASE WHEN labels IS NULL THEN '(not labelled)'
                                          ELSE '(reviewers disagree)' END) AS label,
               count(*) AS n
        FROM items GROUP BY 1 ORDER BY n DESC, label
        """,
        [sample_id],
    )
    jobs = store.query(
        """SELECT j.job_id, coalesce(j.name, '') AS name, j.created_at,
                  list(DISTINCT r.model ORDER BY r.model) FILTER (WHERE r.model IS NOT NULL)
                      AS models
           FROM (SELECT DISTINCT job_id FROM sample_items WHERE sample_id = ?) s
           JOIN jobs j USING (job_id)
           LEFT JOIN results r ON r.job_id = j.job_id
           GROUP BY ALL ORDER BY j.created_at""",
        [sample_id],
    )
    people = store.query(
        """SELECT v.reviewer, count(*) AS n, min(v.updated_at) AS first, max(v.updated_at) AS last
           FROM reviews v SEMI JOIN sample_items i ON i.job_id = v.job_id
                AND i.custom_id = v.custom_id AND i.sample_id = ?
           GROUP BY 1 ORDER BY 1""",
        [sample_id],
    )
    name = store.query("SELECT name FROM samples WHERE sample_id = ?", [sample_id])["name"].iloc[0]
    lines = [
        "---",
        "configs:",
        "- config_name: default",
        "  data_files:",
        "  - split: train",
        f"    path: {DATA_FILE}",
        "---",
        "",
        f"# Sample {_md(name)} (`{sample_id}`), reviewed",
        "",
        f"Exported by Batch Studio on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
        f"`{DATA_FILE}` holds one row per item of the sample: the request's messages (JSON "
        "text, as the batch line had them), the answer, every reviewer's latest label "
        "(`labels`), and `final_label`: an owner's adjudication (`adjudicated_by`) or else "
        "the verdict all its reviewers gave (empty where they differ or none labelled).",
        "",
        "## Counts",
        "",
        f"- {outcome.written:,} items",
        *(f"- {n:,} left out: {why}" for why, n in outcome.left_out.items()),
        f"- {len(people):,} reviewers, {int(people['n'].sum()) if len(people) else 0:,} labels",
        "",
        "## Final labels",
        "",
        "| label | items |",
        "|---|---|",
        *(f"| {_md(label)} | {int(n):,} |" for label, n in summary.itertuples(index=False)),
        "",
        "## Agreement",
        "",
    ]
    lines += _agreement_lines(sample_agreement(store, sample_id))
    lines += ["", "## Provenance", "", "Jobs:", ""]
    for job in jobs.itertuples(index=False):
        models = ", ".join(_md(m) for m in (job.models if job.models is not None else []))
        named = f"`{job.job_id}`" + (f" ({_md(job.name)})" if job.name else "")
        lines.append(f"- {named}, created {job.created_at:%Y-%m-%d %H:%M}, models: {models or '–'}")
    lines += ["", "Reviewers:", ""]
    for person in people.itertuples(index=False):
        lines.append(
            f"- {_md(person.reviewer)}: {int(person.n):,} labels, "
            f"{person.first:%Y-%m-%d} to {person.last:%Y-%m-%d}"
        )
    return "\n".join(lines) + "\n"


def _agreement_lines(found: SampleAgreement) -> list[str]:
    """The card's agreement: alpha per question over every reviewer, then per pair."""
    problem = found.problem()
    if problem:
        return [f"{problem}."]
    lines = [
        "Krippendorff's alpha over every reviewer (nominal for the verdict and single "
        "choices, ordinal for the score and ratings, the MASI distance for multiple "
        "choices), with a 95% bootstrap interval over items (seed 0):",
        "",
        "| question | level | alpha |",
        "|---|---|---|",
        *(
            f"| {_md(a.question)} | {LEVELS[a.level]} | {_md(a.describe())} |"
            for a in found.questions
        ),
    ]
    pairs = found.pairs[found.pairs["both labelled"] > 0]
    if len(pairs):
        titles = [a.question for a in found.questions]
        lines += [
            "",
            "Each pair of reviewers on the items both labelled:",
            "",
            "| reviewer A | reviewer B | both labelled | " + " | ".join(map(_md, titles)) + " |",
            "|---" * (3 + len(titles)) + "|",
        ]
        for row in pairs.to_dict("records"):
            cells = [_md(row["reviewer A"]), _md(row["reviewer B"]), f"{row['both labelled']:,}"]
            lines.append("| " + " | ".join(cells + [_md(row[t]) for t in titles]) + " |")
    return lines


def download(store: Store, sample_id: str, what: str, folder: Path) -> tuple[str, bytes, Outcome]:
    """A page's download of a sample's ``sft`` file or ``dataset`` folder (zipped), written
    in ``folder``: its file name, its bytes, and the outcome (what was left out)."""
    if what == "sft":
        outcome = export_sft(store, sample_id, folder / f"{sample_id}.sft.jsonl")
        return outcome.path.name, outcome.path.read_bytes(), outcome
    outcome = export_dataset(store, sample_id, folder / f"{sample_id}-dataset")
    return f"{outcome.path.name}.zip", _zipped(outcome.path), outcome


def download_dpo(store: Store, comparison: str, folder: Path) -> tuple[str, bytes, Outcome]:
    """A page's download of a comparison's preferences as DPO lines, written in
    ``folder``: its file name, its bytes, and the outcome."""
    outcome = export_dpo(store, folder / f"{comparison}.dpo.jsonl", comparison)
    return outcome.path.name, outcome.path.read_bytes(), outcome


def _zipped(folder: Path) -> bytes:
    """A folder's files as one zip, under the folder's name."""
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, Path(folder.name) / path.relative_to(folder))
    return data.getvalue()
