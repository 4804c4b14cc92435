"""The pages tests of tests/unit/test_shared_reading.py (split from it by kind; docs/tests.md).

Every process can read: the command line works while the app holds the database.

DuckDB lets one process open the file; the command line then reads a private copy brought
up to date from the job folders and the human-work files, and answers the same rows. A
second app on the same data folder says why it cannot run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from core.config import REPO_ROOT


@pytest.fixture
def other_app(studio_home):
    """Another process that holds the data folder's database, as a running app does."""
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from core.store.db import Store; from core.config import data_paths; "
         "s = Store(data_paths().database); print('open', flush=True); sys.stdin.read()"],
        cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout.readline().strip() == "open"
    yield holder
    holder.stdin.close()
    holder.wait(timeout=30)


def test_a_second_app_on_the_same_data_folder_says_why_it_cannot_run(other_app):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.switch_page("pages/results.py").run()

    assert not at.exception
    message = at.error[0].value
    assert f"process {other_app.pid}" in message
    assert "Only one Batch Studio app can use a data folder" in message
    assert not at.dataframe  # the page stopped there
