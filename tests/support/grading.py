"""A job and the rules file the tests of checks grade it with."""

from __future__ import annotations

ROWS = [
    {"custom_id": "a", "answer": "Your refund is on its way.", "metadata": {"label": "refund"}},
    {"custom_id": "b", "answer": "I'm sorry, but I can't help with that."},
    {"custom_id": "c", "answer": None},
    {"custom_id": "d", "answer": "refund", "metadata": {"label": "refund"}},
]


RULES = """\
rules:
  - name: mentions_refund   # the team's wording
    type: contains
    values: [refund]
  - name: no_refusal
    type: refusal
  - name: label
    type: equals_metadata
    field: label
"""
