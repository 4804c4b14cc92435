"""The refusal detector's phrases: the one maintained list (docs/checks.md points here).

A ``refusal`` rule fails an answer that holds any of these phrases, in any case, anywhere.
Each phrase is a regular expression that DuckDB (RE2) and Python's ``re`` read alike, so
it is built from the helpers below rather than ``\\b`` or ``\\s`` (ASCII in RE2, Unicode in
Python): :data:`START` and :data:`END` bound a word, :data:`GAP` stands between words,
``’`` and ``'`` are both apostrophes. Keep phrases specific (a refusal, never a word that
a normal answer uses: "sorry" alone would fail polite answers), and add an answer that it
catches, and one it must not, to ``tests/unit/test_grading.py``.
"""

from __future__ import annotations

START = "(?:^|[^a-z0-9_])"  # a word starts here (matched case-insensitively)
END = "(?:[^a-z0-9_]|$)"
GAP = "[ \t\n\r\f\v\u00a0]+"  # literal whitespace characters, the same set in both engines
APOS = "[’']"
# What follows "I" in a refusal: "can't", "cannot", "won't", "am unable", "'m not able"...
NOT_ABLE = (
    f"(?:{GAP}(?:can{APOS}?t|cannot|can{GAP}not|won{APOS}t|will{GAP}not)"
    f"|(?:{GAP}am|{APOS}m){GAP}(?:unable|not{GAP}able))"
)
ACTS = (
    "(?:help|assist|comply|provide|fulfil+|do|answer|support|create|generate|engage|share"
    "|give|write)"
)


def _phrase(*words: str) -> str:
    """Words in a row, whole words only."""
    return START + GAP.join(words) + END


PATTERNS: tuple[str, ...] = (
    # "I can't help with that", "I am unable to assist", "I'm not able to provide"
    _phrase(f"i{NOT_ABLE}", f"(?:to{GAP})?{ACTS}"),
    # "I'm sorry, but I can't", "Sorry, I cannot"
    _phrase(f"sorry,?{GAP}(?:but{GAP})?i{NOT_ABLE}"),
    # "As an AI language model, I ..."
    _phrase(f"as{GAP}an{GAP}ai(?:{GAP}(?:language{GAP}model|assistant|model))?,?", "i"),
    _phrase("i", "must", "(?:decline|refuse)"),
    _phrase(f"i{APOS}m", "not", "(?:comfortable|allowed|permitted)"),
    _phrase("(?:this|that|your)", "request", f"(?:goes{GAP}against|violates)"),
    _phrase("i", f"(?:do{GAP}not|don{APOS}t)", "feel", "comfortable"),
)

# The one expression a refusal rule matches (case-insensitively).
PATTERN = "|".join(f"(?:{p})" for p in PATTERNS)
