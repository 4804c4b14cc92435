"""Two jobs and the links between their pages (the tests of links, in AppTest and chromium)."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from core.config import data_paths
from core.jobs.folder import JobFolder
from tests.support.pages import APP, TIMEOUT, job_in_home
from tests.support.results import ROWS


def open_link(page: str, /, **params: str | list[str]) -> AppTest:
    """A new session opened on ``pages/<page>`` by an address with ``params``."""
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.run()
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page(f"pages/{page}").run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def two_jobs(home) -> tuple[str, str]:
    """Two finished jobs, named."""
    older = job_in_home(home, ROWS, name="older")
    newer = job_in_home(home, [{"custom_id": "x", "answer": "new"}], name="newer")
    JobFolder(data_paths().jobs / older).rename("tickets v1")
    JobFolder(data_paths().jobs / newer).rename("tickets v2")
    return older, newer


def warnings(at: AppTest) -> str:
    return " ".join(w.value for w in at.warning)
