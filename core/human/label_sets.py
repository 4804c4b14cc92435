"""A reviewer's own labels beyond pass/fail/unsure ("off-topic", "made up", ...).

They are human work like the labels themselves: appended to ``label_sets.jsonl`` in the data
folder (``core.human.files``), the latest line of a reviewer wins, so they survive a
rebuilt database and every process sees them. The file holds a line per change of a set, so
it is read whole (no index). A label given with one of them is saved like pass/fail/unsure.
"""

from __future__ import annotations

from pathlib import Path

from core.human.files import (
    LABEL_SETS,
    VERDICTS,
    LabelSetRecord,
    append,
    label_name_problem,
    now_utc,
    read_from,
)

MAX_LABELS = 9
# Keys a label cannot take: the verdicts' (P, F, U), Review's next unlabelled (N) and skip
# (S, in a queue), and Streamlit's own rerun (R) and clear-cache (C).
TAKEN_KEYS = frozenset("PFUNSRC")


class LabelSetError(ValueError):
    """A label set that cannot be saved; the message says why."""


def parse_labels(text: str) -> tuple[str, ...]:
    """Comma-separated label names, trimmed, without blanks or repeats (case apart).

    Raises:
        LabelSetError: a name is too long, holds a control character, is a verdict, or
            there are more than :data:`MAX_LABELS`.
    """
    names: dict[str, str] = {}
    for raw in text.split(","):
        name = raw.strip()
        if not name:
            continue
        problem = label_name_problem(name)
        if problem:
            raise LabelSetError(problem)
        if name.lower() in VERDICTS:
            raise LabelSetError(f"{name!r} is a verdict already: pick another name")
        names.setdefault(name.lower(), name)
    if len(names) > MAX_LABELS:
        raise LabelSetError(f"at most {MAX_LABELS} labels of your own ({len(names)} given)")
    return tuple(names.values())


def own_labels(folder: Path, reviewer: str) -> tuple[str, ...]:
    """The reviewer's own labels as last saved (none if never)."""
    reviewer = reviewer.strip()
    found: tuple[str, ...] = ()
    for _, record in read_from(folder / LABEL_SETS, 0, 0).records:
        if isinstance(record, LabelSetRecord) and record.reviewer == reviewer:
            found = tuple(record.labels)
    return found


def save_own_labels(folder: Path, reviewer: str, text: str) -> tuple[str, ...]:
    """Saves the reviewer's own labels from comma-separated ``text``; returns them."""
    reviewer = reviewer.strip()
    if not reviewer:
        raise LabelSetError("enter your reviewer name first")
    labels = parse_labels(text)
    append(folder, LabelSetRecord(reviewer=reviewer, labels=list(labels), at=now_utc()))
    return labels


def shortcut_keys(labels: tuple[str, ...]) -> dict[str, str | None]:
    """A key for each own label: the first letter of its name that no verdict, Review
    button or earlier label took (None when all of its letters are taken)."""
    taken, keys = set(TAKEN_KEYS), {}
    for label in labels:
        key = next((c for c in label.upper() if "A" <= c <= "Z" and c not in taken), None)
        if key:
            taken.add(key)
        keys[label] = key
    return keys
