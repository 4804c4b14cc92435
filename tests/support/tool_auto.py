"""What the tests split from tests/unit/test_tool_auto.py by kind share (docs/tests.md)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from core.endpoints import CHAT_URL

WEATHER = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city now.",
            "parameters": WEATHER,
        },
    }
]


# The model is shown a call once, then asked for another: a 135M model copies the form.
SHOWN = [
    {"role": "user", "content": "What is the weather in Oslo?"},
    {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
        "</tool_call>",
    },
    {"role": "user", "content": "What is the weather in Paris?"},
]


def auto_line(custom_id: str, choice: Any = "auto", **more: Any) -> str:
    body = {"model": "m", "messages": SHOWN, "tools": TOOLS, "max_tokens": 40, **more}
    if choice is not None:
        body["tool_choice"] = choice
    return json.dumps({"custom_id": custom_id, "method": "POST", "url": CHAT_URL, "body": body})


@pytest.fixture(scope="session")
def hermes_model(default_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2's weights and tokenizer with a chat template that renders tools (also the
    queue test's second model folder: the warm worker loads it once for both)."""
    folder = tmp_path_factory.mktemp("models") / "SmolLM2-hermes-tools"
    folder.mkdir()
    for item in default_model.iterdir():
        if item.name != "chat_template.jinja":
            os.symlink(item, folder / item.name)
    shutil.copy(
        Path(__file__).parents[1] / "data" / "hermes_tools.jinja", folder / "chat_template.jinja"
    )
    return folder
