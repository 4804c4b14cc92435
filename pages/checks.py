"""Checks: rules run over every result of jobs, a model as judge, pass rates with their 95%
intervals, the way to the failures (in Results, or as a review sample), and how people's
labels agree with each check."""

from __future__ import annotations

import streamlit as st

from core.qa import grading
from core.qa.rules import EXAMPLE, RULE_TYPES, RulesError, load_rules
from core.store import checks as ck
from core.store import judged as jd
from core.store import results as res
from core.store import samples as sm
from ui.grading import fresh_checks
from ui.jobs import job_labels, jobs_or_stop
from ui.judging import agreement_section, judge_section
from ui.links import One, fill_from_link, review_sample, write_link
from ui.store import store, through_app
from ui.text import escape

PER = ["job", "model", "prompt_version", "all"]  # what a pass rate is given per

through_app()
st.title("Checks")

jobs = jobs_or_stop("No jobs yet. Run a batch first; then check its answers here.")
db = store()
label = job_labels()
ids = list(jobs["job_id"])
current = st.session_state.get("job_id")
judges = jd.judge_jobs(db)
graded = [j for j in ids if j not in judges] or ids  # a judge is rarely graded
given = fill_from_link({"jobs": ("checks_jobs", ids)})  # a shared link or a bookmark
chosen = st.session_state.get("checks_jobs")
if chosen is None or ("jobs" in given and not chosen):  # none yet, or none linked is here
    st.session_state["checks_jobs"] = [current if current in graded else graded[0]]
job_ids = st.multiselect("Jobs", ids, format_func=label, key="checks_jobs")
link = {"jobs": job_ids}  # the address opens this view again (written as it grows)
if not job_ids:
    write_link(link)
    st.info("Choose at least one job.")
    st.stop()
st.session_state["job_id"] = job_ids[0]  # the other pages follow the job chosen here

# Outcomes missing (a new database) or stale (results that arrived since) are graded again
# from the rules saved in each job's folder.
fresh_checks(job_ids, label)

# -- the rules ----------------------------------------------------------------------------
folders = grading.job_folders(db, job_ids)
saved = {j: grading.saved_rules_text(folders[j]) for j in job_ids if j in folders}
with_rules = [j for j, text in saved.items() if text]
if "checks_rules" not in st.session_state:
    st.session_state["checks_rules"] = saved[with_rules[0]] if with_rules else EXAMPLE
if with_rules:
    c = st.columns([3, 1])
    pick = c[0].selectbox("Saved rules of", with_rules, format_func=label, key="checks_saved_of")
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
    rules = None
    st.error("These rules cannot run; fix the lines below.", icon=":material/error:")
    st.text(str(exc))
else:
    st.caption(
        f"{len(rules.rules)} rule(s): "
        + ", ".join(escape(f"{r.name} ({r.type})") for r in rules.rules)
    )
if st.button("Run checks", type="primary", disabled=rules is None, key="checks_run"):
    with st.spinner("Grading every result…"):
        seconds = grading.timed_grade_jobs(db, job_ids, rules, text)
    st.success(
        f"Checked {len(job_ids)} job(s) in {seconds:.1f} s; the rules are saved in each job's "
        "folder (rules.yaml), so a rerun grades alike."
    )

# -- a model as judge ---------------------------------------------------------------------
judge_section(db, job_ids, label)

# -- pass rates -----------------------------------------------------------------------------
names = ck.rule_names(db, job_ids)
if not names:
    write_link(link)
    st.info(
        "No checks have run on these jobs yet: write rules above and run them, or start a "
        "judge job."
    )
    st.stop()
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
st.caption(
    "Pass rate = passed / (passed + failed), with its 95% Wilson interval. Failed requests "
    "have no answer and are not graded, nor are requests without the metadata field an "
    "equals_metadata rule compares with. A judge's verdict that contradicts its own score "
    "(a pass scored 1 or 2, a fail scored 4 or 5) is not believed: it counts as "
    "contradicted, apart from passes and failures."
)

# -- failures -------------------------------------------------------------------------------
st.subheader("Failures")
c = st.columns([2, 1, 1])
rule = c[0].selectbox("Rule", names, key="checks_rule")
outcome = c[1].selectbox("Outcome", ck.FAILED_FIRST, key="checks_outcome")
write_link({**link, "per": by if by != PER[0] else None, "check": rule, "outcome": outcome})
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
c = st.columns([1, 1, 1])
if c[0].button("Show them in Results", disabled=not found, key="checks_to_results"):
    st.session_state["job_id"] = job_ids[0]
    st.session_state["results_job"] = job_ids[0]
    st.session_state["results_more_jobs"] = job_ids[1:]
    st.session_state["f_check"] = rule
    st.session_state["f_check_outcome"] = outcome
    st.switch_page("pages/results.py")
size = c[1].number_input(
    "Sample size", 1, sm.MAX_SIZE, min(50, max(found, 1)), key="checks_sample_size"
)
if c[2].button("Review a sample of them", disabled=not found, key="checks_to_review"):
    definition = sm.SampleDefinition(filter=flt, method="random", size=int(size))
    try:
        made = sm.create_sample(db, f"{rule}: {outcome}", definition)
    except sm.SampleError as exc:
        st.error(escape(exc))
    else:
        review_sample(made.sample_id)

# -- trust: people against a check ----------------------------------------------------------
agreement_section(db, job_ids, names, label)
