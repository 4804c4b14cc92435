"""The parts of Checks and Compare that put a model to judging (widgets only; the work is
``core.qa.judge``, ``core.qa.pairwise``, ``core.store.judged`` and ``core.store.trust``).

Not a page of its own: pages/checks.py and pages/compare.py call these sections.
"""

from __future__ import annotations

from collections.abc import Callable

import streamlit as st

from core.jobs.submit import Refused, Started
from core.qa import judge as jg
from core.qa import pairwise as pw
from core.store import compare as cmp
from core.store import judged, trust
from core.store import samples as sm
from core.store.db import Store
from core.store.review import reviewers
from ui.links import review_sample
from ui.model_picker import model_picker
from ui.remembered import remembered_input
from ui.sign_in import new_sample_owner, signed_in_user
from ui.store import paths
from ui.text import escape


def _model_picker(key: str) -> str:
    """The model of a judging section (a chat model folder, or another typed)."""
    return model_picker(
        "Judge model",
        f"{key}_model",
        path_key=f"{key}_model_path",
        path_label="Judge model folder",
        folders=jg.judge_models(),
    )


def _judge_picker(text: str, max_tokens: int) -> str:
    """The verdict judge's model: a chat model, never one that failed its calibration with
    this template and max tokens (each left out is named, with why and what to choose
    instead); one that passed comes first."""
    offered, refused = [], []
    for folder in jg.judge_models():
        found = jg.calibration(text, jg.JudgeSettings(str(folder), max_tokens), paths().jobs)
        if found is not None and found.state == "failed":
            refused.append(found)
        else:
            offered.append((found is None or not found.passed, str(folder)))
    for found in refused:
        st.warning(escape(f"Not offered as a judge: {found.refusal()}"), icon=":material/block:")
    return model_picker(
        "Judge model",
        "judge_model",
        path_key="judge_model_path",
        path_label="Judge model folder",
        folders=[folder for _, folder in sorted(offered, key=lambda o: o[0])],
    )


def _calibrate_first(text: str, settings: jg.JudgeSettings) -> None:
    """Starts the judge's calibration, or says how the one running is doing."""
    found = jg.calibration(text, settings, paths().jobs)
    if found is None:
        try:
            found = jg.start_calibration(text, settings, paths().jobs)
        except (jg.JudgeError, Refused) as exc:
            st.error("The judge's calibration was not started:", icon=":material/block:")
            st.text("\n".join(exc.problems))
            return
    st.info(
        escape(
            f"{found.summary()}. Before it may judge, the model grades {found.items} answers "
            "whose verdicts are known; start the judge again once that job has finished."
        ),
        icon=":material/hourglass_top:",
    )


def _start(make: Callable[[], Started]) -> None:
    """Starts a judge job: then it is the current job, and the page moves to Monitor; or
    says why it was not started (the problems may quote the template: shown as text)."""
    try:
        started = make()
    except jg.JudgeError as exc:
        problems = exc.problems
    except Refused as refused:
        problems = refused.problems
    else:
        st.session_state["job_id"] = started.job.job_id
        st.session_state["judge_started"] = started.job.job_id
        st.switch_page("pages/monitor.py")
        return
    st.error("The judge job was not started:", icon=":material/block:")
    st.text("\n".join(problems))


def judge_section(db: Store, job_ids: list[str], label: Callable[[str], str]) -> None:
    """Start a judge job over one graded job's answers, and list the judges of these jobs."""
    st.subheader("Judge")
    st.caption(
        "A model grades the answers: the template below (Jinja; variables `prompt`, "
        "`system`, `messages`, `answer`, `metadata`, `custom_id`, `finish_reason`, `model`) "
        "becomes one request per answer, and structured output forces a verdict (pass or "
        "fail, a score from 1 to 5, a reason). It runs as a job (queue, Monitor, cancel, "
        "resume); its verdicts join these results as a check named after it. A model judges "
        "only once it has shown it can: first it grades ten answers whose verdicts are known "
        "(a calibration, kept per model, template and max tokens), and one that gets fewer "
        "than eight right is not offered."
    )
    found = judged.judges(db, job_ids)
    if not found.empty:
        shown = found.assign(
            judge=found["judge_job"].map(label),
            grades=found["graded"].map(lambda g: label(g[0])),
        )[["check_name", "judge", "grades", "state", "done", "total"]]
        st.dataframe(shown, hide_index=True, width="stretch")
    with st.expander("Start a judge job", expanded=found.empty):
        graded = st.selectbox("Job to judge", job_ids, format_func=label, key="judge_job")
        # Kept apart from the widget: a rerun that does not draw it (no job chosen for a
        # moment) would drop what the user wrote.
        text = remembered_input(
            st.text_area, "Judge template", jg.DEFAULT_TEMPLATE, "judge_template", height=260
        )
        c = st.columns(3)
        which = c[0].radio(
            "Which answers",
            ["all", "failures", "sample"],
            format_func={"all": "All", "failures": "A rule's failures", "sample": "A sample"}.get,
            key="judge_which",
        )
        choice = jg.Choice("all")
        if which == "failures":
            names = [n for n in _rule_names(db, graded) if not n.startswith("judge_")]
            rule = c[1].selectbox("Rule", names, key="judge_rule")
            choice = jg.Choice("failures", rule=rule)
        elif which == "sample":
            samples = sm.list_samples(db)
            names = dict(zip(samples["sample_id"], samples["name"], strict=True))
            sample = c[1].selectbox("Sample", list(names), format_func=names.get, key="judge_sm")
            choice = jg.Choice("sample", sample_id=sample)
        max_tokens = c[2].number_input("Max tokens per verdict", 16, 4096, 96, key="judge_mt")
        model = _judge_picker(text, int(max_tokens))
        name = st.text_input("Job name (optional)", key="judge_name").strip()
        if st.button("Start judge job", type="primary", key="judge_start"):
            settings = jg.JudgeSettings(model, int(max_tokens), name or None, signed_in_user())
            found = jg.calibration(text, settings, paths().jobs)
            if found is None or found.state == "running":
                _calibrate_first(text, settings)
                return
            _start(
                lambda: jg.start_judge(
                    db, graded, text, settings, choice, paths().jobs, label=label
                )
            )


def _rule_names(db: Store, job_id: str) -> list[str]:
    from core.store.checks import rule_names

    return rule_names(db, [job_id])


def agreement_section(
    db: Store, job_ids: list[str], names: list[str], label: Callable[[str], str]
) -> None:
    """People's labels against a check's outcomes: matrix, accuracy, kappa, disagreements."""
    st.subheader("Agreement with people")
    people = reviewers(db)
    if not people:
        st.info("No review labels yet: label a sample on Review to see how a check agrees.")
        return
    c = st.columns(2)
    check = c[0].selectbox("Check", names, key="agree_check")
    who = c[1].selectbox("Reviewer", ["(everyone)", *people], key="agree_reviewer")
    got = trust.check_agreement(db, job_ids, check, None if who == "(everyone)" else who)
    if not got.items:
        st.info("No result was both labelled pass or fail by a person and graded by this check.")
        return
    c = st.columns(4)
    c[0].metric("Labels compared", f"{got.items:,}")
    c[1].metric("Accuracy", f"{got.accuracy:.0%}")
    c[2].metric("Cohen's kappa", "–" if got.kappa is None else f"{got.kappa:.2f}")
    c[3].metric("Disagreements", f"{len(got.disagreements):,}")
    st.dataframe(got.matrix, width="content")
    st.caption(
        f"Left out: {got.unsure} unsure label(s), {got.not_graded} label(s) of results this "
        "check did not grade. Kappa is agreement beyond chance: about 0.6 or more is often "
        "taken as substantial, before a check grades what nobody read."
    )
    if len(got.disagreements):
        shown = got.disagreements[["job_id", "custom_id", "reviewer", "person", "check", "answer"]]
        st.dataframe(  # answers are data: shown as text; each job by its name
            shown.assign(job_id=shown["job_id"].map(label)).rename(columns={"job_id": "job"}),
            hide_index=True,
            width="stretch",
        )
        if st.button("Review the disagreements", key="agree_review"):
            try:
                made = trust.review_disagreements(db, job_ids, check, got, new_sample_owner())
            except sm.SampleError as exc:
                st.error(escape(exc))
            else:
                review_sample(made.sample_id)


def judged_tally(
    found: cmp.JudgedPair, label: Callable[[str], str], sides: tuple[str, str] = ("A", "B")
) -> None:
    """A pairwise judge's tally (``core.store.compare.judged_pairs``): its job, state and
    verdicts, how often it preferred each side (``sides``: their names, text) with the share
    of the decided pairs and its 95% interval, ties, and the lines it could not read."""
    tally = found.tally
    st.caption(escape(f"{label(found.judge_job)} · {found.state} · {tally.lines} verdicts"))
    c = st.columns(4)
    first, second = (f"Judge prefers {escape(name)}" for name in sides)  # names: text
    for col, side, title in ((c[0], "A", first), (c[1], "B", second), (c[2], "tie", "Judge: tie")):
        share, low, high = tally.share(side)
        count = {"A": tally.a, "B": tally.b, "tie": tally.tie}[side]
        col.metric(
            title,
            f"{count}" + ("" if share is None else f" ({share:.0%})"),
            help=None if share is None else f"95% CI {low:.0%}–{high:.0%}",
        )
        if share is not None:
            col.caption(f"95% CI {low:.0%}–{high:.0%}")
    c[3].metric("Not graded", tally.not_graded)


def pairwise_section(
    db: Store, a: cmp.Side, b: cmp.Side, key: str, label: Callable[[str], str]
) -> None:
    """A model's preferences between two sides' answers (two jobs, or two slices of one job
    paired on ``key``): start a pairwise judge, see the tallies of this comparison's."""
    st.markdown("**Pairwise judge**")  # the subheaders name the two sides
    st.caption(
        "A model says which answer is better for every pair. Position matters to models, so "
        "half of the pairs (always the same half) show B's answer first; the verdicts are "
        "mapped back to A and B. Template variables: `prompt`, `system`, `messages`, "
        "`metadata`, `custom_id`, `answer_1`, `answer_2`."
    )
    for found in cmp.judged_pairs(db, a, b, key):
        judged_tally(found, label)
    with st.expander("Start a pairwise judge job"):
        if "pair_template" not in st.session_state:
            st.session_state["pair_template"] = pw.DEFAULT_PAIRWISE_TEMPLATE
        text = st.text_area("Pairwise template", key="pair_template", height=260)
        max_tokens = st.number_input("Max tokens per verdict", 16, 4096, 96, key="pair_mt")
        model = _model_picker("pair")
        if st.button("Start pairwise judge", type="primary", key="pair_start"):
            settings = jg.JudgeSettings(model, int(max_tokens), None, signed_in_user())
            _start(
                lambda: pw.start_pairwise(
                    db, a, b, text, settings, paths().jobs, label=label, key=key
                )
            )
