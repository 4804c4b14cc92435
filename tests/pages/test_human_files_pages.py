"""The pages tests of tests/unit/test_human_files.py (split from it by kind; docs/tests.md).

People's work is written to files first: a deleted or broken DuckDB file loses nothing.

Labels (with their history), preferences and samples are appended to ``data/human/*.jsonl``
before the index row; a database that is deleted, truncated or overwritten is set aside
(renamed, never deleted) and everything comes back: results, vectors, checks from
``rules.yaml``, and people's work from the files."""

from __future__ import annotations


def test_labels_and_samples_made_on_the_review_page_survive_a_broken_database(studio_home):
    import streamlit as st

    from tests.support.pages import job_in_home, open_page

    job_in_home(studio_home)
    at = open_page("review.py")
    at.text_input(key="sample_name").set_value("check")
    at.button[0].click().run()  # the form's "Draw sample"
    at.text_input(key="reviewer").set_value("ana").run()
    next(b for b in at.button if b.label == "Fail").click().run()
    at.button(key="prev").click().run()
    next(b for b in at.button if b.label == "Pass").click().run()  # ana changes her mind
    assert not at.exception
    st.cache_resource.clear()  # the app stops: its store is closed
    database = studio_home / "studio.duckdb"
    database.write_bytes(b"\0" * 4096)  # and the file is overwritten

    at = open_page("review.py")  # the app starts again

    warning = next(w.value for w in at.warning if "set aside" in w.value)
    assert "nothing is lost" in warning
    assert [p.name for p in studio_home.glob("studio.duckdb.broken-*")] != []
    sample = next(s for s in at.selectbox if s.label == "Sample")  # the sample is back
    assert sample.format_func(sample.value).startswith("check (smp_")
    at.text_input(key="reviewer").set_value("ana").run()
    assert any(c.value == "You labelled this item: pass." for c in at.caption)
    history = next(d.value for d in at.dataframe if "verdict" in d.value.columns)
    assert history[["reviewer", "verdict"]].values.tolist() == [["ana", "fail"], ["ana", "pass"]]
    at.button(key="set_aside_seen_button").click().run()  # read: the notice goes
    assert not [w for w in at.warning if "set aside" in w.value]
