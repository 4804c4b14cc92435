"""The pages tests of tests/unit/test_submit.py (split from it by kind; docs/tests.md).

The one way in (core/jobs/submit.py) and what a job may end with (core/run/worker.py).

The rules are tested once, on ``submit``; each entry point (CLI, inbox, Run page, resume)
is then shown to go through them with the case that once lost a request: a file whose
line 3 repeats line 1's ``custom_id``."""

from __future__ import annotations

import streamlit as st
from streamlit.testing.v1 import AppTest

from core.config import REPO_ROOT
from core.jobs.folder import list_jobs
from tests.support.pages import shown
from tests.support.submit import REPEATING, write
from ui.handover import CheckedBatch


def test_the_run_page_refuses_repeated_ids_even_with_skip_invalid_ticked(
    studio_home, tmp_path, model, no_worker
):
    st.cache_resource.clear()
    batch = write(tmp_path / "b.jsonl", REPEATING)
    at = AppTest.from_file(str(REPO_ROOT / "app.py"), default_timeout=60).run()
    at.session_state["checked_batch"] = CheckedBatch(batch, batch.name)
    at.switch_page("pages/run.py").run()
    at.selectbox(key="model_choice").set_value("Another folder…").run()
    at.text_input(key="model_path").input(str(model)).run()
    # Start would refuse them with the invalid lines skipped too: nothing to tick, the
    # reason is said before any click, and Start is off (issue 30, item 5).
    assert "skip_invalid" not in [c.key for c in at.checkbox]
    assert any("line 3: custom_id 'a' repeats line 1" in shown(e.value) for e in at.error)
    assert next(b for b in at.button if b.label == "Start run").disabled
    assert not at.exception
    assert list_jobs(studio_home / "jobs") == [] and not no_worker
    st.cache_resource.clear()
