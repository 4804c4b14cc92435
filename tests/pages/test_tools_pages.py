"""The pages tests of tests/unit/test_tools.py (split from it by kind; docs/tests.md).

Tool calls: the check of ``tools`` and tool turns, the output lines, and a sweep of
generated tools lines through the check and the real engine.

A forced call (``tool_choice`` ``required`` or a named function) must come back as
OpenAI's ``message.tool_calls`` whose arguments parse and validate against the function's
schema; every line the check passes must run; every malformed one is refused with its line
number and field before a model loads."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.tools import (
    WEATHER,
    named,
)


def test_build_page_makes_tool_call_lines_and_names_a_bad_schema(studio_home: Path):
    from tests.support.pages import open_build_page

    at = open_build_page()
    at.checkbox(key="build_tool").check().run()
    at.text_input(key="build_tool_name").set_value("weather").run()
    at.text_area(key="build_tool_schema").set_value(json.dumps(WEATHER)).run()
    assert not at.exception, [e.message for e in at.exception]
    first = json.loads(at.code[0].value)
    assert first["body"]["tool_choice"] == named("weather")
    assert first["body"]["tools"][0]["function"]["parameters"] == WEATHER
    at.text_area(key="build_tool_schema").set_value('{"type": "object", "required": 3}').run()
    assert "not a valid JSON Schema" in at.error[0].value
