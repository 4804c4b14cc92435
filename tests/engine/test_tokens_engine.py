"""The engine tests of tests/unit/test_tokens.py (split from it by kind; docs/tests.md).

Prompt token counts: the same numbers the model's own tokenizer and template give."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from core.check.tokens import TokenCounter
from tests.support.cli import cli
from tests.support.tokens import CONVERSATIONS, EXTENDED_TEMPLATE, MODEL, chat

pytestmark = pytest.mark.usefixtures("default_model")  # prepared when it is not yet


@pytest.mark.engine
def test_the_engine_reports_the_prompt_tokens_the_check_counted_under_those_extensions(
    warm_home: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "SmolLM2-extended"
    folder.mkdir()
    for item in MODEL.iterdir():
        if item.name != "chat_template.jinja":
            os.symlink(item, folder / item.name)
    (folder / "chat_template.jinja").write_text(EXTENDED_TEMPLATE)
    conversations = [*CONVERSATIONS, [{"role": "user", "content": f"turn {i}"} for i in range(9)]]
    batch, out = tmp_path / "batch.jsonl", tmp_path / "out.jsonl"
    batch.write_text(
        "".join(
            json.dumps({"custom_id": f"c{i}", "method": "POST", "url": "/v1/chat/completions",
                        "body": {"model": "m", "messages": c, "max_tokens": 1}}) + "\n"
            for i, c in enumerate(conversations)
        )
    )  # fmt: skip
    result = cli("check", str(batch), "--model", str(folder))
    assert "not counted" not in result.stdout + result.stderr, result.stdout
    result = cli("run", str(batch), "-o", str(out), "--model", str(folder))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [json.loads(raw) for raw in out.read_text().splitlines()]
    engine = [line["response"]["body"]["usage"]["prompt_tokens"] for line in lines]
    counter = TokenCounter(folder)
    counter.start_file()
    assert counter.count_requests([chat(c) for c in conversations]) == engine
