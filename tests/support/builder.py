"""What the tests split from tests/unit/test_builder.py by kind share (docs/tests.md)."""

from __future__ import annotations

from core.config import SAMPLE_DATA

TICKETS = SAMPLE_DATA / "tickets.csv"
