"""The Results page's vector views on a synthetic embedding job (AppTest, no engine): the
summary, similar-to, near duplicates, the map and the exports, each checked against numpy."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import streamlit as st

from core.config import data_paths
from core.store import text_query as tq
from core.store import vectors as vec
from tests.support.pages import DIMS, HOSTILE, Job, embedding_job_in_home, open_page, shown

pytestmark = pytest.mark.usefixtures("studio_home")


@pytest.fixture
def job() -> Job:
    st.cache_data.clear()  # the views cache by job and index state: start clean
    return embedding_job_in_home()


def metric(at, label: str) -> str:
    return next(m.value for m in at.metric if m.label == label)


def frame_with(at, column: str) -> pd.DataFrame:
    """The (last) table on the page that has ``column``."""
    return [d.value for d in at.dataframe if column in d.value.columns][-1]


def test_the_summary_is_what_numpy_says(job: Job) -> None:
    at = open_page("results.py")
    norms = np.linalg.norm(job.matrix.astype(np.float64), axis=1)
    assert metric(at, "Vectors") == f"{len(job.matrix):,}"
    assert metric(at, "Dimensions") == str(DIMS)
    assert metric(at, "Norm min") == f"{norms.min():.4f}"
    assert metric(at, "Norm mean") == f"{norms.mean():.4f}"
    assert metric(at, "Norm max") == f"{norms.max():.4f}"
    assert metric(at, "Problems") == "1"
    problems = frame_with(at, "problem")
    assert problems[["custom_id", "input_index"]].values.tolist() == [["broken", 0]]
    assert "not valid base64" in problems["problem"][0]


def keys_of(found: pd.DataFrame) -> list[tuple[str, int]]:
    """(custom_id, input_index) of each row (the page leaves input_index out when all 0)."""
    indexes = found["input_index"] if "input_index" in found else [0] * len(found)
    return list(zip(found["custom_id"], indexes, strict=True))


def numpy_top(job: Job, query: np.ndarray, k: int, skip: int | None = None) -> list:
    cosine = job.unit @ (query / np.linalg.norm(query))
    if skip is not None:
        cosine[skip] = -np.inf
    best = np.argsort(-cosine, kind="stable")[:k]
    return [job.keys[i] for i in best], cosine[best]


def test_similar_to_a_result_is_the_numpy_top_k(job: Job) -> None:
    at = open_page("results.py")
    at.number_input(key="similar_k").set_value(5).run()
    at.selectbox(key="similar_pick").set_value("r007").run()
    assert not at.exception
    found = frame_with(at, "similarity")
    expected, cosines = numpy_top(job, job.matrix[job.row("r007")], 5, job.row("r007"))
    assert keys_of(found) == expected
    np.testing.assert_allclose(found["similarity"], cosines, atol=1e-5)
    assert any("most like r007 (itself left out)" in shown(c.value) for c in at.caption)
    # A request of three inputs: its custom_id typed, then which input.
    at.text_input(key="similar_custom_id").set_value("multi").run()
    at.number_input(key="similar_input").set_value(2).run()
    found = frame_with(at, "similarity")
    expected, _ = numpy_top(job, job.matrix[job.row("multi", 2)], 5, job.row("multi", 2))
    assert keys_of(found) == expected
    at.text_input(key="similar_custom_id").set_value("failed").run()  # no vector: said so
    assert "failed (input 0)" in shown(at.error[0].value) and "has no vector" in shown(
        at.error[0].value
    )


def test_similar_to_a_typed_text_embeds_it_once_and_searches(job: Job, monkeypatch) -> None:
    calls = []
    target = job.matrix[job.row("r011")] * 3  # a text whose vector points where r011's does

    def embed(model, texts, timeout=0):
        calls.append((str(model), list(texts)))
        return np.asarray([target], dtype=np.float32)

    monkeypatch.setattr(tq, "embed_texts", embed)
    monkeypatch.setattr(tq, "query_model", lambda model, dims: (Path("/m/mini"), "a note"))
    at = open_page("results.py")
    at.radio(key="similar_from").set_value("A typed text").run()
    assert any("about 20 s on a CPU" in c.value for c in at.caption)
    at.text_area(key="similar_text").set_value("refund me twice").run()
    assert not calls  # nothing is embedded before the button
    at.button(key="similar_go").click().run()
    assert not at.exception
    assert calls == [("/m/mini", ["refund me twice"])]
    found = frame_with(at, "similarity")
    expected, _ = numpy_top(job, target, 10)
    assert keys_of(found) == expected
    assert found["similarity"].iloc[0] == pytest.approx(1.0, abs=1e-5)
    at.number_input(key="similar_k").set_value(3).run()  # a rerun: no second model load
    assert len(calls) == 1 and len(frame_with(at, "similarity")) == 3
    at.text_area(key="similar_text").set_value("another text").run()  # until searched
    assert not [d for d in at.dataframe if "similarity" in d.value.columns]


def test_near_duplicate_pairs_are_the_brute_force_ones(job: Job, monkeypatch) -> None:
    at = open_page("results.py")
    at.slider(key="dup_threshold").set_value(0.99).run()
    assert not [d for d in at.dataframe if "text_a" in d.value.columns]  # not before asked
    at.button(key="dup_go").click().run()
    assert not at.exception
    sims = job.unit @ job.unit.T
    n = len(job.keys)
    expected = sorted(
        ((float(sims[i, j]), job.keys[i][0], job.keys[j][0])
         for i in range(n) for j in range(i + 1, n) if sims[i, j] >= 0.99),
        reverse=True,
    )  # fmt: skip
    assert len(expected) >= 2  # the planted copies at least
    pairs = frame_with(at, "text_a")
    assert list(zip(pairs["custom_id_a"], pairs["custom_id_b"], strict=True)) == [
        (a, b) for _, a, b in expected
    ]
    np.testing.assert_allclose(pairs["similarity"], [s for s, _, _ in expected], atol=1e-5)
    assert pairs["text_a"].iloc[0].startswith("text number")
    assert any(c.value == f"{len(expected)} pairs at 0.990 or more." for c in at.caption)
    # Only the most similar are listed past the cap, and the page says so.
    from ui import vectors as vector_views

    monkeypatch.setattr(vector_views, "DUPLICATE_PAIRS", 1)
    st.cache_data.clear()
    at.slider(key="dup_threshold").set_value(0.985).run()
    found = sum(1 for i in range(n) for j in range(i + 1, n) if sims[i, j] >= 0.985)
    assert any(
        c.value == f"{found} pairs at 0.985 or more; the 1 most similar are listed."
        for c in at.caption
    )
    assert len(frame_with(at, "text_a")) == 1


def chart(at) -> dict:
    return json.loads(at.get("plotly_chart")[0].proto.spec)


def test_the_map_draws_every_point_or_a_named_sample_with_texts_escaped(job: Job, monkeypatch):
    at = open_page("results.py")
    total = len(job.keys)
    assert any(c.value == f"All {total} vectors." for c in at.caption)
    traces = chart(at)["data"]
    hovers = [h for t in traces for h in t["hovertext"]]
    assert len(hovers) == total
    hostile = next(h for h in hovers if h.startswith("r003<br>"))
    assert "<b>" not in hostile and "<a " not in hostile
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;a href='http://example.com/x'&gt;" in hostile
    # Coloured by a metadata field: one trace per topic; a request of several inputs gives
    # each input its own value of a list.
    assert set(at.selectbox(key="map_colour").options) == {"(none)", "topic", "source_id"}
    at.selectbox(key="map_colour").set_value("topic").run()
    traces = chart(at)["data"]
    assert sorted(t["name"] for t in traces) == ["a", "b", "c"]
    by_topic = {t["name"]: [h.split("<br>")[0] for h in t["hovertext"]] for t in traces}
    assert "multi [2]" in by_topic["c"] and "multi" in by_topic["a"]
    assert "r002" in by_topic["c"] and len(by_topic["a"]) == 21
    # More points than the map draws: a sample, and the page says how many of how many.
    monkeypatch.setattr(vec, "MAP_POINTS", 25)
    st.cache_data.clear()
    at.selectbox(key="map_colour").set_value("(none)").run()
    assert any(c.value.startswith(f"Showing 25 of {total} vectors") for c in at.caption)
    assert sum(len(t["hovertext"]) for t in chart(at)["data"]) == 25


@pytest.fixture
def downloads(monkeypatch) -> dict:
    """What each download button would send when clicked, by file name: the callables the
    page registers are kept and called here, as the server calls them on a click."""
    from streamlit.runtime.media_file_manager import MediaFileManager

    kept: dict = {}
    original = MediaFileManager.add_deferred

    def record(self, data_callable, mimetype, coordinates, file_name=None, **kw):
        kept[file_name] = data_callable
        return original(self, data_callable, mimetype, coordinates, file_name, **kw)

    monkeypatch.setattr(MediaFileManager, "add_deferred", record)
    return kept


def test_exports_are_made_on_click_and_round_trip(job: Job, downloads, studio_home) -> None:
    at = open_page("results.py")
    labels = [b.label for b in at.download_button]
    assert {"Vectors as Parquet", "Vectors as .npy + ids (zip)"} <= set(labels)
    assert not list(studio_home.glob("exports/*"))  # nothing written before a click
    table = pq.read_table(io.BytesIO(downloads[f"{job.job_id}_vectors.parquet"]()))
    keys = list(zip(table["custom_id"].to_pylist(), table["input_index"].to_pylist(), strict=True))
    assert keys == job.keys  # input order
    np.testing.assert_array_equal(np.array(table["vector"].to_pylist(), np.float32), job.matrix)
    assert table["text"].to_pylist()[3] == HOSTILE
    with zipfile.ZipFile(io.BytesIO(downloads[f"{job.job_id}_vectors.zip"]())) as bundle:
        assert sorted(bundle.namelist()) == ["vectors.ids.csv", "vectors.npy"]
        matrix = np.load(io.BytesIO(bundle.read("vectors.npy")))
        ids = pd.read_csv(io.BytesIO(bundle.read("vectors.ids.csv")))
    assert matrix.dtype == np.float32
    np.testing.assert_array_equal(matrix, job.matrix)
    assert list(zip(ids["custom_id"], ids["input_index"], strict=True)) == job.keys
    assert list(ids["row"]) == list(range(len(job.keys)))


def test_the_detail_of_an_embedding_result_shows_its_inputs_as_text(job: Job) -> None:
    at = open_page("results.py")
    at.selectbox(key="page_size").set_value(100).run()
    ids = list(frame_with(at, "answer")["custom_id"])
    assert "multi" in ids
    at.selectbox(key=f"detail_pick::{job.job_id}").set_value((job.job_id, "multi")).run()
    assert [t.value for t in at.text][:3] == ["multi one", "multi two", "multi three"]
    assert "3 × 16-d vectors" in [t.value for t in at.text]
    at.text_input(key="q").set_value("bold").run()
    assert HOSTILE in [t.value for t in at.text]  # as it is written, never as markup


def test_a_chat_job_shows_no_vector_views() -> None:
    from tests.support.pages import job_in_home

    job_in_home(data_paths().home)
    at = open_page("results.py")
    assert "Vectors" not in [h.value for h in at.subheader]
    assert not at.get("plotly_chart")
