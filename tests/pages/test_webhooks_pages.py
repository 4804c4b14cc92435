"""Settings' Webhooks (issue 45 item 3): add an endpoint (its secret shown once), rotate and
remove it, and the delivery log of a batch's end sent to a receiver on 127.0.0.1."""

from __future__ import annotations

import streamlit as st

from core.jobs.folder import cancel
from core.webhooks.outbox import Dispatcher, deliver, dispatcher_lock
from core.webhooks.registry import read_endpoints
from tests.support.jobs import make_job
from tests.support.pages import open_page
from tests.support.webhooks import receiver


def _click(at, label: str):
    next(b for b in at.button if b.label == label).click().run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def test_settings_adds_rotates_and_removes_an_endpoint_and_logs_deliveries(studio_home):
    st.cache_resource.clear()
    with receiver() as hooks:
        at = open_page("settings.py")
        at.text_input(key="webhook_url").input(hooks.url).run()
        _click(at, "Add endpoint")
        [endpoint] = read_endpoints(studio_home)
        assert [c.value for c in at.code] == [endpoint.secret]  # shown once, here
        assert endpoint.url == hooks.url and len(endpoint.events) == 4

        with dispatcher_lock(studio_home):
            job = make_job(studio_home, 2, studio_home / "jobs")
            cancel(job)
        deliver(studio_home, Dispatcher(studio_home, (0.2,)), poll=0.05)
        assert len(hooks.received) == 1

        at = open_page("settings.py")
        assert endpoint.secret not in [c.value for c in at.code]  # never shown again
        log = next(d.value for d in at.dataframe if "attempts" in d.value.columns)
        assert list(log["batch"]) == [job.job_id] and list(log["state"]) == ["delivered"]
        listed = next(d.value for d in at.dataframe if "URL" in d.value.columns)
        assert list(listed["URL"]) == [hooks.url]

        _click(at, "Rotate secret")
        [rotated] = read_endpoints(studio_home)
        assert [c.value for c in at.code] == [rotated.secret] != [endpoint.secret]
        assert rotated.old_secret == endpoint.secret

        _click(at, "Remove endpoint")
        assert read_endpoints(studio_home) == []
        assert any("No webhook endpoints" in m.value for m in at.markdown)
    st.cache_resource.clear()
