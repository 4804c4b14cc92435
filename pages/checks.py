"""Checks: rules run over every result of jobs, a model as judge, pass rates with their 95%
intervals, the way to the failures (in Results, or as a review sample), and how people's
labels agree with each check."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import streamlit as st

from core.qa import grading
from core.qa.rules import EXAMPLE, RULE_TYPES, RulesError, RuleSet, load_rules
from core.store import checks as ck
from core.store import judged as jd
from core.store import results as res
from core.store import samples as sm
from core.store.db import Store
from ui.grading import fresh_checks
from ui.jobs import job_labels, jobs_or_stop
from ui.judging import agreement_section, judge_section
from ui.links import One, fill_from_link, review_sample, write_link
from ui.sign_in import new_sample_owner
from ui.store import store, through_app
from ui.text import escape

PER = ["job", "model", "prompt_version", "all"]  # what a pass rate is given per
PASS_RATES_HELP = (
    "Pass rate = passed / (passed + failed), with its 95% Wilson interval. Failed requests "
    "have no answer and are not graded, nor are requests without the metadata field an "
    "equals_metadata rule compares with. A judge's verdict that contradicts its own score "
    "(a pass scored 1 or 2, a fail scored 4 or 5) is not believed: it counts as "
    "contradicted, apart from passes and failures."
)

Label = Callable[[str], str]


class Failures(NamedTuple):
    """The results of the chosen jobs that one rule gave one outcome."""

    rule: str
    outcome: str
    filter: res.ResultFilter
    found: int


def pick_jobs(db: Store) -> tuple[list[str], Label]:
    """The jobs checked (a link's, else the ones chosen before, else the current job) and
    their labels; the page stops without jobs or with none chosen."""
    jobs = jobs_or_stop("No jobs yet. Run a batch first; then check its answers here.")
    label = job_labels()  # after jobs_or_stop's ingest: it knows every job's name
    ids = list(jobs["job_id"])
    current = st.session_state.get("job_id")
    judges = jd.judge_jobs(db)
    graded = [j for j in ids if j not in judges] or ids  # a judge is rarely graded
    given = fill_from_link({"jobs": ("checks_jobs", ids)})  # a shared link or a bookmark
    chosen = st.session_state.get("checks_jobs")
    if chosen is None or ("jobs" in given and not chosen):  # none yet, or none linked is here
        st.session_state["checks_jobs"] = [current if current in graded else graded[0]]
    job_ids = st.multiselect("Jobs", ids, format_func=label, key="checks_jobs")
    if not job_ids:
        write_link({"jobs": job_ids})
        st.info("Choose at least one job.")
        st.stop()
    st.session_state["job_id"] = job_ids[0]  # the other pages follow the job chosen here
    return job_ids, label


def rules_section(db: Store, job_ids: list[str], label: Label) -> None:
    """The rules, loaded from a job's folder or written, checked, and run on the jobs."""
    text, rules = rules_editor(db, job_ids, label)
    if st.button("Run checks", type="primary", disabled=rules is None, key="checks_run"):
        with st.spinner("Grading every result…"):
            seconds = grading.timed_grade_jobs(db, job_ids, rules, text)
        st.success(
            f"Checked {len(job_ids)} job(s) in {seconds:.1f} s; the rules are saved in each "
            "job's folder (rules.yaml), so a rerun grades alike."
        )


def rules_editor(db: Store, job_ids: list[str], label: Label) -> tuple[str, RuleSet | None]:
    """The rules' text and, where they load, the rules; the errors shown where not."""
    folders = grading.job_folders(db, job_ids)
    saved = {j: grading.saved_rules_text(folders[j]) for j in job_ids if j in folders}
    with_rules = [j for j, text in saved.items() if text]
    if "checks_rules" not in st.session_state:
        st.session_state["checks_rules"] = saved[with_rules[0]] if with_rules else EXAMPLE
    if with_rules:
        c = st.columns([3, 1])
        pick = c[0].selectbox(
            "Saved rules of", with_rules, format_func=label, key="checks_saved_of"
        )
        c[1].write("")  # aligns the button with the box
        if c[1].button("Load these rules", key="checks_load"):
            st.session_state["checks_rules"] = saved[pick]
            st.rerun()
    text = st.text_area(
        "Rules (YAML or JSON)",
        key="checks_rules",
        height=320,
        help="A list under `rules:`; each rule has a `name` and a `type`: "
        + ", ".join(RULE_TYPES)
        + ". docs/checks.md lists every type and its options.",
    )
    try:
        rules = load_rules(text)
    except RulesError as exc:
        st.error("These rules cannot run; fix the lines below.", icon=":material/error:")
        st.text(str(exc))
        return text, None
    st.caption(
        f"{len(rules.rules)} rule(s): "
        + ", ".join(escape(f"{r.name} ({r.type})") for r in rules.rules)
    )
    return text, rules


def checked_rules(db: Store, job_ids: list[str]) -> list[str]:
    """The rules with outcomes on these jobs; the page stops here while there are none."""
    names = ck.rule_names(db, job_ids)
    if not names:
        write_link({"jobs": job_ids})
        st.info(
            "No checks have run on these jobs yet: write rules above and run them, or start "
            "a judge job."
        )
        st.stop()
    return names


def pass_rates(db: Store, job_ids: list[str], names: list[str], label: Label) -> str:
    """Each rule's pass rate and interval, per the grouping chosen (which it returns)."""
    st.subheader("Pass rates")
    fill_from_link(
        {
            "per": ("checks_by", One(PER)),
            "check": ("checks_rule", One(names)),
            "outcome": ("checks_outcome", One(ck.FAILED_FIRST)),
        }
    )
    by = st.radio("Per", PER, horizontal=True, key="checks_by")
    table = ck.pass_rates(db, job_ids, by)
    if by == "job":
        table["job"] = table["job"].map(label)
    st.dataframe(
        table,
        hide_index=True,
        width="stretch",
        column_config={
            name: st.column_config.NumberColumn(title, format="percent")
            for name, title in (
                ("pass_rate", "pass rate"),
                ("ci_low", "95% CI low"),
                ("ci_high", "95% CI high"),
            )
        },
    )
    st.caption(PASS_RATES_HELP)
    return by


def failures_section(
    db: Store, job_ids: list[str], names: list[str], by: str, label: Label
) -> None:
    """One rule's failures (or another outcome): the first ones, and where to take them."""
    st.subheader("Failures")
    failures = failures_table(db, job_ids, names, by, label)
    c = st.columns([1, 1, 1])
    if c[0].button("Show them in Results", disabled=not failures.found, key="checks_to_results"):
        open_in_results(job_ids, failures)
    size = c[1].number_input(
        "Sample size", 1, sm.MAX_SIZE, min(50, max(failures.found, 1)), key="checks_sample_size"
    )
    if c[2].button("Review a sample of them", disabled=not failures.found, key="checks_to_review"):
        review_them(db, failures, int(size))


def failures_table(
    db: Store, job_ids: list[str], names: list[str], by: str, label: Label
) -> Failures:
    """The rule and outcome chosen (written into the address), their count and first rows."""
    c = st.columns([2, 1, 1])
    rule = c[0].selectbox("Rule", names, key="checks_rule")
    outcome = c[1].selectbox("Outcome", ck.FAILED_FIRST, key="checks_outcome")
    write_link(
        {"jobs": job_ids, "per": by if by != PER[0] else None, "check": rule, "outcome": outcome}
    )
    flt = res.ResultFilter(job_ids=job_ids, checks={rule: outcome})
    found = res.count(db, flt)
    c[2].metric("Results", f"{found:,}")
    if found:
        first = res.page(db, flt, limit=10)
        shown = first[["job_id", "custom_id", "answer", "finish_reason", "completion_tokens"]]
        st.dataframe(  # answers are data: a table shows them as text, never markdown
            shown.assign(job_id=shown["job_id"].map(label)).rename(columns={"job_id": "job"}),
            hide_index=True,
            width="stretch",
        )
    return Failures(rule, outcome, flt, found)


def open_in_results(job_ids: list[str], failures: Failures) -> None:
    """Opens Results on these jobs, filtered to the rule's outcome."""
    st.session_state["job_id"] = job_ids[0]
    st.session_state["results_job"] = job_ids[0]
    st.session_state["results_more_jobs"] = job_ids[1:]
    st.session_state["f_check"] = failures.rule
    st.session_state["f_check_outcome"] = failures.outcome
    st.switch_page("pages/results.py")


def review_them(db: Store, failures: Failures, size: int) -> None:
    """Draws a random sample of them and opens it on Review."""
    definition = sm.SampleDefinition(filter=failures.filter, method="random", size=size)
    try:
        name = f"{failures.rule}: {failures.outcome}"
        made = sm.create_sample(db, name, definition, owner=new_sample_owner())
    except sm.SampleError as exc:
        st.error(escape(exc))
    else:
        review_sample(made.sample_id)


through_app()
st.title("Checks")
db = store()
job_ids, label = pick_jobs(db)
# Outcomes missing (a new database) or stale (results that arrived since) are graded again
# from the rules saved in each job's folder.
fresh_checks(job_ids, label)
rules_section(db, job_ids, label)
judge_section(db, job_ids, label)  # a model as judge
names = checked_rules(db, job_ids)
by = pass_rates(db, job_ids, names, label)
failures_section(db, job_ids, names, by, label)
agreement_section(db, job_ids, names, label)  # trust: people against a check
