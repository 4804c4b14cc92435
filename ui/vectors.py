"""The Results page's views of an embedding job's vectors (not a page of its own): the
summary, "similar to this" (a result or a typed text), near-duplicate pairs, the 2-D map
and the vector exports. Texts are data: tables and ``st.text``, never markdown."""

from __future__ import annotations

import streamlit as st

from core.store import text_query as tq
from core.store import vector_figures as vf
from core.store import vectors as vec
from core.store.db import Store
from core.store.export import export_folder
from ui.store import paths
from ui.text import escape

DUPLICATE_PAIRS = 1_000  # pairs listed at most (the count says how many were found)


@st.cache_data(max_entries=8, show_spinner=False)
def _summary(_db: Store, job_id: str, version: tuple) -> vec.VectorSummary:
    return vec.vector_summary(_db, job_id)


@st.cache_data(max_entries=4, show_spinner="Projecting the vectors…")
def _map(_db: Store, job_id: str, version: tuple) -> vec.VectorMap:
    return vec.vector_map(_db, job_id, max_points=vec.MAP_POINTS)


@st.cache_data(max_entries=8, show_spinner="Comparing every pair of vectors…")
def _pairs(_db: Store, job_id: str, threshold: float, version: tuple) -> vec.NearDuplicates:
    return vec.near_duplicates(_db, job_id, threshold, max_pairs=DUPLICATE_PAIRS)


@st.cache_data(max_entries=64, show_spinner=False)
def _embedded(model: str, text: str) -> list[float]:
    """A typed text's vector, made once per model and text (by the warm engine)."""
    return tq.embed_texts(model, [text])[0].tolist()


def show_vectors(db: Store, job_id: str, job_model: str, on_page: list[str]) -> None:
    """The vector views of ``job_id``, whose model folder is ``job_model``; ``on_page``:
    the custom_ids of the results table's page, offered for "similar to this"."""
    version = db.data_version([job_id])
    summary = _summary(db, job_id, version)
    st.subheader("Vectors")
    tabs = st.tabs(["Summary", "Similar to this", "Near duplicates", "Map", "Export vectors"])
    with tabs[0]:
        _summary_view(db, job_id, summary)
    if not summary.count:
        for tab in tabs[1:]:
            tab.info("This job has no vectors yet.")
        return
    with tabs[1]:
        _similar_view(db, job_id, job_model, summary, on_page)
    with tabs[2]:
        _pairs_view(db, job_id, summary, version)
    with tabs[3]:
        _map_view(db, job_id, version)
    with tabs[4]:
        _export_view(db, job_id)


def _number(value: float | None) -> str:
    return "–" if value is None else f"{value:.4f}"


def _summary_view(db: Store, job_id: str, summary: vec.VectorSummary) -> None:
    c = st.columns(6)
    c[0].metric("Vectors", f"{summary.count:,}")
    c[1].metric("Dimensions", summary.dimensions or "–")
    c[2].metric("Norm min", _number(summary.norm_min))
    c[3].metric("Norm mean", _number(summary.norm_mean))
    c[4].metric("Norm max", _number(summary.norm_max))
    c[5].metric("Problems", f"{summary.problems:,}")
    st.caption(
        "A vector per input of each succeeded request. Norms of 1 are unit vectors; "
        "similarity here is always cosine, whatever the norms."
    )
    if summary.problems:
        st.warning(f"{summary.problems:,} inputs have no vector: their lines could not be read.")
        st.dataframe(
            vec.vector_problems(db, job_id), hide_index=True, width="stretch", key="vec_problems"
        )


def _similar_table(found) -> None:
    shown = found.drop(columns=["job_id"])
    if not shown["input_index"].any():
        shown = shown.drop(columns=["input_index"])
    st.dataframe(
        shown,
        hide_index=True,
        width="stretch",
        key="similar_table",
        column_config={"similarity": st.column_config.NumberColumn(format="%.4f")},
    )


@st.fragment  # a search reruns this view, not the Results page above it
def _similar_view(
    db: Store, job_id: str, job_model: str, summary: vec.VectorSummary, on_page: list[str]
) -> None:
    c = st.columns([2, 1])
    source = c[0].radio(
        "Similar to", ["A result", "A typed text"], horizontal=True, key="similar_from"
    )
    k = int(c[1].number_input("How many", 1, 200, 10, key="similar_k"))
    if source == "A result":
        c = st.columns([2, 2, 1])
        picked = c[0].selectbox(
            "A result of the page shown above", on_page, key="similar_pick", index=0
        )
        typed = c[1].text_input("or its custom_id", key="similar_custom_id").strip()
        custom_id = typed or picked
        if not custom_id:
            st.info("Pick a result, or type its custom_id.")
            return
        inputs = vec.input_count(db, job_id, custom_id)
        index = 0
        if inputs > 1:
            index = int(c[2].number_input("Input", 0, inputs - 1, 0, key="similar_input"))
        try:
            found = vec.similar_to(db, job_id, custom_id, index, k)
        except vec.VectorError as exc:
            st.error(escape(exc))
            return
        st.caption(f"The {len(found)} inputs most like {escape(custom_id)} (itself left out):")
        _similar_table(found)
        return
    model, note = tq.query_model(job_model, summary.dimensions)
    text = st.text_area("Text", key="similar_text", height=80)
    if model is None:
        st.warning(escape(f"No model can embed a typed text: {note}."))
        return
    st.caption(
        escape(f"Embedded with {model.name} ({note}).")
        + " The engine embeds it on the warm model: the first text loads the model (about "
        + "20 s on a CPU), later ones take well under a second while it stays loaded."
    )
    wanted = (str(model), text.strip())
    pressed = st.button("Embed and search", key="similar_go", disabled=not text.strip())
    # One slot for the results: a search replaces the last one's table with a note that it
    # works at once, never leaving the old results on show (greyed) while the text embeds.
    results = st.empty()
    if pressed:
        results.info(
            f"Embedding the text with {escape(model.name)}, then searching… The first text "
            "loads the model (about 20 s on a CPU; longer on a busy machine).",
            icon=":material/hourglass_top:",
        )
        try:
            st.session_state["similar_vector"] = (wanted, _embedded(*wanted))
        except vec.VectorError as exc:
            results.error(escape(exc))
            return
    held = st.session_state.get("similar_vector")
    if held and held[0] == wanted:
        try:
            found = vec.similar_to_vector(db, job_id, held[1], k)
        except vec.VectorError as exc:
            results.error(escape(exc))
            return
        with results.container():
            st.caption(f"The {len(found)} inputs most like the text:")
            _similar_table(found)
    else:
        results.empty()


def _pairs_view(db: Store, job_id: str, summary: vec.VectorSummary, version: tuple) -> None:
    if summary.count > vec.NEAR_DUPLICATE_MAX_VECTORS:
        st.info(
            f"This job has {summary.count:,} vectors; near duplicates are found exactly up to "
            f"{vec.NEAR_DUPLICATE_MAX_VECTORS:,} (every pair is compared)."
        )
        return
    c = st.columns([3, 1])
    threshold = c[0].slider(
        "Similarity at least", 0.5, 1.0, 0.95, 0.005, format="%.3f", key="dup_threshold"
    )
    if c[1].button("Find pairs", key="dup_go"):
        st.session_state["dup_job"] = job_id
    if st.session_state.get("dup_job") != job_id:
        st.caption(f"Compares each of the {summary.count:,} vectors with every other one.")
        return
    try:
        found = _pairs(db, job_id, float(threshold), version)
    except vec.VectorError as exc:
        st.error(escape(exc))
        return
    if not found.found:
        st.info(f"No pair of inputs is {threshold:.3f} similar or more.")
        return
    listed = f"; the {len(found.pairs):,} most similar are listed" if found.truncated else ""
    st.caption(f"{found.found:,} pairs at {threshold:.3f} or more{listed}.")
    pairs = found.pairs
    if not (pairs["input_index_a"].any() or pairs["input_index_b"].any()):
        pairs = pairs.drop(columns=["input_index_a", "input_index_b"])
    st.dataframe(
        pairs,
        hide_index=True,
        width="stretch",
        key="dup_table",
        column_config={"similarity": st.column_config.NumberColumn(format="%.4f")},
    )


def _map_view(db: Store, job_id: str, version: tuple) -> None:
    vmap = _map(db, job_id, version)
    fields = vf.metadata_fields(vmap.points)
    colour = st.selectbox("Colour by metadata field", ["(none)", *fields], key="map_colour")
    if vmap.sampled < vmap.total:
        st.caption(
            f"Showing {vmap.sampled:,} of {vmap.total:,} vectors: a seeded sample, the same "
            "each time (a browser draws no more usefully)."
        )
    else:
        st.caption(f"All {vmap.total:,} vectors.")
    st.caption(
        "The first two principal components of the vectors shown; hover a point for its text."
    )
    figure = vf.map_figure(vmap, None if colour == "(none)" else colour)
    st.plotly_chart(figure, key="vector_map")


def _export_view(db: Store, job_id: str) -> None:
    def parquet() -> bytes:
        """Written when clicked (opening the page does no export work)."""
        with export_folder(paths().home) as folder:  # this click's own file
            target = folder / f"{job_id}_vectors.parquet"
            vec.export_vectors_parquet(db, job_id, target)
            return target.read_bytes()

    def npy() -> bytes:
        with export_folder(paths().home) as folder:
            return vec.export_vectors_npy_zip(
                db, job_id, folder / f"{job_id}_vectors.zip"
            ).read_bytes()

    st.caption(
        "Parquet: job_id, custom_id, input_index, text and the vector (a fixed-size list of "
        "float32), in input order. NumPy: a zip of vectors.npy (n × d float32) and "
        "vectors.ids.csv (row, custom_id, input_index, text), rows in the same order."
    )
    c = st.columns(2)
    c[0].download_button(
        "Vectors as Parquet",
        data=parquet,
        file_name=f"{job_id}_vectors.parquet",
        mime="application/vnd.apache.parquet",
        key="vectors_parquet",
        on_click="ignore",
    )
    c[1].download_button(
        "Vectors as .npy + ids (zip)",
        data=npy,
        file_name=f"{job_id}_vectors.zip",
        mime="application/zip",
        key="vectors_npy",
        on_click="ignore",
    )
