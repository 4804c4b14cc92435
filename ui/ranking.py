"""Widgets for rerank (and one-query score) results: a result's documents as ranked, and
the ranking's quality (NDCG@k and MRR) where the lines' metadata labels the documents
(core/store/ranking.py). Texts go to dataframes, which show them as text."""

from __future__ import annotations

from typing import Any

import streamlit as st

from core.store.db import Store
from core.store.ranking import LABELS, ranked_documents, ranking_figure, ranking_quality
from ui.page_cache import fresh_or_recent
from ui.text import escape


def show_ranked_documents(raw: Any, metadata: Any, params: Any = None) -> bool:
    """A rerank (or one-query score) result's documents, most relevant first, with scores
    (and labels); False when the result ranks nothing."""
    frame = ranked_documents(raw, metadata, params)
    if frame is None:
        return False
    st.dataframe(frame, hide_index=True, width="stretch")
    return True


def show_ranking_quality(db: Store, job_ids: list[str], key: str, chart: bool = False) -> None:
    """NDCG@k and MRR per job (mean, spread) and per query, when labels exist; with
    ``chart``, as a chart too (Dashboards)."""
    k = int(st.session_state.get(f"{key}_k", 10))
    # Read once per state of the index: it parses every result's line (a million on a rerun).
    quality = fresh_or_recent(
        "ranking_quality",
        (tuple(job_ids), k),
        db.data_version(job_ids),
        lambda ids=tuple(job_ids), k=k: ranking_quality(db, list(ids), k),
        what="the ranking quality",
    )
    if quality is None:
        return
    st.subheader("Ranking quality")
    st.number_input("k (NDCG@k)", min_value=1, max_value=1000, value=10, key=f"{key}_k")
    st.caption(
        f"From the rerank and one-query score lines whose metadata carries `{LABELS}`: one "
        "label per document (0 not relevant; higher more). sd is the standard deviation "
        "over the queries."
    )
    if not quality.queries.empty:
        if chart:
            st.plotly_chart(ranking_figure(quality), key=f"{key}_chart")
        st.dataframe(quality.overall(), hide_index=True, width="stretch")
        per_query = quality.queries.rename(
            columns={"ndcg": f"NDCG@{k}", "reciprocal_rank": "reciprocal rank"}
        )
        st.dataframe(per_query, hide_index=True, width="stretch")
    for reason, count in quality.not_graded.items():
        st.caption(escape(f"{count:,} queries not graded: {reason}"))
