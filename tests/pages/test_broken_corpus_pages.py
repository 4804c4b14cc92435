"""The pages tests of tests/unit/test_broken_corpus.py (split from it by kind; docs/tests.md).

The corpus of broken batch files in tests/broken/: each fault gets its line-numbered
message, in the check, on the command line and on the page, and never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from core.config import REPO_ROOT
from tests.support.broken_corpus import BROKEN, EXPECTED, WITH_MODEL, assert_expected


@pytest.fixture
def page(studio_home: Path) -> AppTest:
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/upload.py").run()
    at.radio(key="source").set_value("A file on the server").run()
    return at


def test_the_page_shows_each_files_messages_without_a_traceback(page: AppTest) -> None:
    for name, (lines, valid, expected) in {**EXPECTED, **WITH_MODEL}.items():
        page.text_input(key="server_path").set_value(str(BROKEN / name)).run()
        assert not page.exception, (name, [e.message for e in page.exception])
        metrics = {m.label: m.value for m in page.metric}
        assert (metrics["Lines"], metrics["Valid"]) == (str(lines), str(valid)), name
        if not expected:
            continue
        table = next(d.value for d in page.dataframe if "message" in d.value.columns)
        rows = list(zip(table["line"], table["severity"], table["message"], strict=True))
        assert_expected(rows, expected)
