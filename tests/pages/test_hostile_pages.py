"""Text from a file or a model is shown as text on every page, never as markdown.

A hostile batch carries a markdown image (which a browser would fetch) and a link in its
custom_id, prompt, answer, metadata and error message, and in its job's name. On every
page those texts may appear in plain-text elements (st.text, st.code, tables); in any
element that reads markdown (alerts, captions, headings, labels) they must arrive escaped,
so no link or image is ever made.
"""

from __future__ import annotations

import pytest

from core.config import data_paths
from core.store.db import Store
from core.store.results import ResultFilter
from core.store.samples import SampleDefinition, create_sample
from tests.support.hostile_pages import IMAGE, LINK, ROWS
from tests.support.jobs import finished_job
from tests.support.pages import open_page, shown, texts

pytestmark = pytest.mark.usefixtures("studio_home")

MARKDOWN_ELEMENTS = ("markdown", "caption", "error", "warning", "info", "success", "subheader",
                     "title", "header", "toast")  # fmt: skip


WIDGETS = ("selectbox", "radio", "button", "checkbox", "text_input", "multiselect")


def live_markdown(at) -> list[str]:
    """Markdown sources on screen that would make a link or an image."""
    sources = [e.value for kind in MARKDOWN_ELEMENTS for e in getattr(at, kind, [])]
    sources += [w.label for kind in WIDGETS for w in getattr(at, kind, [])]
    return [s for s in map(str, sources) if "](http" in s or "http://" in s.replace("\\", "")]


def plain_texts(at) -> str:
    return "\n".join(str(e.value) for kind in ("text", "code") for e in getattr(at, kind, []))


@pytest.fixture
def hostile_jobs(studio_home):
    first = finished_job(studio_home, ROWS)
    first.rename(f"{LINK} {IMAGE} <b>bold</b>")  # a job's name is user text too
    second = finished_job(studio_home / "second", ROWS, name="second.jsonl")
    target = data_paths().jobs / second.job_id
    second.path.rename(target)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    definition = SampleDefinition(filter=ResultFilter(job_ids=[first.job_id]), size=2)
    sample = create_sample(store, "hostile " + LINK, definition)
    store.close()
    return first, target.name, sample.sample_id


def test_results_show_hostile_text_only_as_text(hostile_jobs):
    first, _, _ = hostile_jobs
    at = open_page("results.py", job_id=first.job_id)
    at.selectbox(key="results_job").set_value(first.job_id).run()
    assert live_markdown(at) == []
    assert any(LINK in shown(e.value) for e in at.error)  # the failure, as the text it is
    details = at.selectbox(key=f"detail_pick::{first.job_id}")
    details.set_value((first.job_id, details.options[1])).run()  # the answered one
    assert live_markdown(at) == []
    assert IMAGE in plain_texts(at)  # the answer is shown, as written


@pytest.mark.parametrize("page", ["jobs.py", "monitor.py", "dashboards.py", "compare.py"])
def test_operations_pages_show_hostile_text_only_as_text(hostile_jobs, page):
    first, _, _ = hostile_jobs
    at = open_page(page, job_id=first.job_id)
    assert live_markdown(at) == []


def test_review_shows_the_hostile_item_as_text(hostile_jobs):
    _, _, sample_id = hostile_jobs
    at = open_page("review.py", sample_id=sample_id)
    at.text_input(key="reviewer").input("ana").run()
    seen = plain_texts(at)
    assert live_markdown(at) == []
    at.button(key="next").click().run()
    assert live_markdown(at) == []
    assert IMAGE in seen + plain_texts(at)  # the answer of the hostile item, as text


def test_experiments_show_hostile_text_only_as_text(model):
    """Prompt labels (the variants' names), test descriptions, answers and an error
    message from a hostile experiment: text in the matrix and the verdicts, never a link."""
    from tests.support.experiments import experiment_in_home, promptfoo_config

    tests = [{"description": f"{LINK} {t}", "country": IMAGE} for t in range(12)]
    config = promptfoo_config(tests, [LINK, IMAGE], "    - {type: contains, value: '**'}\n")

    def answer(cid: str) -> dict:
        if cid == "t0.p1.m0":
            return {"answer": None, "error": ("engine_rejected", f"{LINK} {IMAGE}")}
        return {"answer": f"{IMAGE} **bold**" if cid.endswith("p0.m0") else IMAGE}

    experiment_in_home(model, config, answer)
    at = open_page("experiments.py")
    assert live_markdown(at) == []
    assert f"{IMAGE} passes every check" in shown(texts(at))  # a verdict, escaped
    matrix = next(d.value for d in at.dataframe if IMAGE in d.value.columns)
    assert matrix.loc[0, LINK].startswith(f"{IMAGE} **bold**")  # the answer as written
    assert matrix.loc[0, IMAGE].startswith(f"(request failed: {LINK} {IMAGE})")
    assert f"Capital of {IMAGE}?" in [t.value for t in at.text]  # the opened item's request
    at.selectbox(key="exp_baseline").set_value(1).run()
    assert live_markdown(at) == []
