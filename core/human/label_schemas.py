"""A sample's label schema and guidelines, kept in ``label_schemas.jsonl``.

Human work like the labels: appended to its file in the data folder (``core.human.files``),
the latest line of a sample wins, so it survives a rebuilt database and every process sees
it. The file holds a line per change of a schema, so it is read whole (no index). What a
schema is and how answers are checked against it: ``core.human.questions``.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from core.human.files import LABEL_SCHEMAS, LabelSchemaRecord, append, now_utc, read_from
from core.human.questions import (
    GUIDELINES_CHARS,
    LabelSchema,
    SchemaError,
    parse_questions,
)

DEFAULT = LabelSchema()  # no questions: pass / fail / unsure with a score


def schema_of(folder: Path, sample_id: str | None) -> LabelSchema:
    """The sample's schema as last set (:data:`DEFAULT` for none, or no sample)."""
    found = DEFAULT
    if sample_id is None:
        return found
    for _, record in read_from(folder / LABEL_SCHEMAS, 0, 0).records:
        if isinstance(record, LabelSchemaRecord) and record.sample_id == sample_id:
            found = record.label_schema
    return found


def set_schema(
    folder: Path, sample_id: str, questions: str, guidelines: str, by: str
) -> LabelSchema:
    """Sets the sample's schema from its questions as text (a question a line,
    ``core.human.questions.parse_questions``) and its guidelines; returns it. Empty
    questions and guidelines give the sample the default label again.

    Raises:
        SchemaError: no name, a line that cannot be read or a question that cannot be
            asked (by its line and title), guidelines too long; nothing is written then.
    """
    by = by.strip()
    if not by:
        raise SchemaError("enter your name first: a schema records who set it")
    if len(guidelines) > GUIDELINES_CHARS:
        raise SchemaError(
            f"guidelines have at most {GUIDELINES_CHARS:,} characters ({len(guidelines):,} given)"
        )
    parsed = parse_questions(questions)
    try:
        schema = LabelSchema(questions=parsed, guidelines=guidelines.strip())
    except ValidationError as exc:
        raise SchemaError(str(exc.errors()[0]["msg"]).removeprefix("Value error, ")) from None
    append(
        folder,
        LabelSchemaRecord(sample_id=sample_id, label_schema=schema, by=by, at=now_utc()),
    )
    return schema
