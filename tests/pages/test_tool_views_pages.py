"""The pages tests of tests/unit/test_tool_views.py (split from it by kind; docs/tests.md).

Tool calls where a result goes: Results, Review and Compare show each call as its
function and arguments (several calls, one a line), not an empty answer; exports carry the
calls; a store made before the column existed fills it from the stored lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.pages import job_in_home, open_page
from tests.support.tool_views import NAMED, ONE_CALL, SHOWN, TWO_CALLS, rows


@pytest.mark.usefixtures("studio_home")
def test_results_review_and_compare_show_the_calls(studio_home: Path):
    job_in_home(studio_home, rows(TWO_CALLS, "required"), name="a")
    at = open_page("results.py")
    assert not at.exception
    assert SHOWN in [t.value for t in at.text]
    assert any("Tool calls" in c.value for c in at.caption)
    table = at.dataframe[0].value
    assert table["tool_calls"].tolist() == [SHOWN]

    at.switch_page("pages/review.py").run()
    at.text_input(key="sample_name").set_value("calls")
    at.button[0].click().run()
    at.text_input(key="reviewer").set_value("ana").run()
    assert SHOWN in [t.value for t in at.text]

    job_in_home(studio_home, rows(ONE_CALL, NAMED), name="b")
    at.switch_page("pages/compare.py").run()
    assert not at.exception
    texts = [t.value for t in at.text]
    assert SHOWN in texts and 'weather({"city": "Rome"})' in texts
