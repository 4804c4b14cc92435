"""What the tests split from tests/unit/test_job_figures.py by kind share (docs/tests.md)."""

from __future__ import annotations

import json

import pytest

from core.jobs.folder import JobFolder
from core.run.outputs import token_usage

pytestmark = pytest.mark.usefixtures("studio_home")


def output_tokens(job: JobFolder) -> tuple[int, int]:
    """(prompt, output) tokens summed over output.jsonl, as a reader of the file counts."""
    lines = [json.loads(raw) for raw in job.output.read_text().splitlines()]
    usages = [token_usage(line) for line in lines]
    return sum(u[0] for u in usages), sum(u[1] for u in usages)
