"""Templates that are valid but costly (issue 31, items 3 and 4): one C-level call that
asks for gigabytes, and loops too slow on every row. Builder and judge templates render
in a child process under a memory limit and a deadline; the calling process stays small,
each such row is its own error, and both stop after a few slow rows."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from core.plan.bounded_render import MAX_SLOW_ROWS
from core.plan.builder import BuildError, BuildSpec, preview
from core.qa.judge import JudgeError, render_all
from tests.support.bounds import run_bounded

# The child's own peak: VmHWM belongs to the process's memory since its exec, whereas
# ru_maxrss survives fork and exec, so a child of a large pytest process would report the
# parent's peak (813 MB in a full run) however small it stayed.
PEAK_MB = """
def peak_mb():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
"""

GIANT_CALLS = [
    "{{ ('%1500000000d' % 1) | length }}",
    "{{ text.center(2500000000) | length }}",
    "{{ '{:>1500000000}'.format(text) | length }}",
    "{{ (text ~ '') | center(2000000000) | length }}",
]

# Every giant call of this module, made in one process of its own (a process for each cost
# a few seconds of imports): the builder's on a row of a table, the judge's on three
# answers, and a giant constant, which Jinja would compute while compiling.
GIANT_CALLS_SCRIPT = """
import json
import pandas as pd
from core.plan.builder import BuildSpec, preview
from core.qa.judge import JudgeError, render_all

report = {"builder": {}}
table = pd.DataFrame({"text": ["hello", "world"], "n": [1, 0]})
for template in GIANT_CALLS:
    spec = BuildSpec(user_template="{% if n %}" + template + "{% endif %}ok")
    result = preview(table, spec, rows=2)
    report["builder"][template] = {
        "problems": [[p.row, p.message] for p in result.problems],
        "lines": [line["body"]["messages"][-1]["content"] for line in result.lines],
    }
contexts = [(f"r{i}", {"answer": "yes"}) for i in range(3)]
try:
    list(render_all("{{ answer.center(1500000000) | length }}", contexts))
except JudgeError as exc:
    report["judge"] = exc.problems
spec = BuildSpec(user_template="one\\n{{ 'x' | center(2000000000) | length }}")
result = preview(pd.DataFrame({"a": [1]}), spec, rows=1)
report["constant"] = [p.message for p in result.problems]
report["peak_mb"] = peak_mb()
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def giant_calls():
    """What the process that made every giant call reported, and its own peak memory."""
    done = run_bounded(f"{PEAK_MB}\nGIANT_CALLS = {GIANT_CALLS!r}\n{GIANT_CALLS_SCRIPT}", 180)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["peak_mb"] < 600, report  # the gigabytes were never in that process
    return report


@pytest.mark.parametrize("template", GIANT_CALLS)
def test_a_giant_c_level_call_is_that_rows_error_and_the_builder_stays_small(template, giant_calls):
    report = giant_calls["builder"][template]
    ((row, message),) = report["problems"]
    assert row == 1 and "template error" in message
    assert "more than 1,024 MB of memory" in message
    assert report["lines"] == ["ok"]  # the next row renders as usual


def test_a_giant_call_in_a_judge_template_is_that_results_error_and_the_judge_stays_small(
    giant_calls,
):
    problems = giant_calls["judge"]
    assert problems[0] == "the template fails on 3 result(s)"
    assert problems[1].startswith("result 'r0': template line 1: ")


def test_a_judge_template_too_slow_on_every_answer_stops_after_a_few(short_render_bound):
    slow = "{% for i in range(10000) %}{% for j in range(10000) %}{% endfor %}{% endfor %}x"
    contexts = ((f"r{i}", {"answer": "a"}) for i in range(100_000))
    with pytest.raises(JudgeError) as refused:
        list(render_all(slow, contexts))
    assert refused.value.problems[0] == (
        f"the template ran past {short_render_bound:g} s on {MAX_SLOW_ROWS} results; "
        "make its loops smaller before judging"
    )
    assert "result 'r2'" in refused.value.problems[-1]  # the third answer, not the 100,000th


def test_a_builder_template_too_slow_on_every_row_still_stops_after_three_rows(
    short_render_bound,
):
    table = pd.DataFrame({"n": [10000] * 50})
    slow = "{% for i in range(n) %}{% for j in range(n) %}{% endfor %}{% endfor %}x"
    with pytest.raises(BuildError, match=f"on {MAX_SLOW_ROWS} rows"):  # not on 50
        preview(table, BuildSpec(user_template=slow), rows=50)


def test_a_template_error_in_the_child_still_names_its_line():
    contexts = [("r0", {"answer": "a"})]
    with pytest.raises(JudgeError) as refused:
        list(render_all("line one\n{{ answer | nosuchthing }}", contexts))
    assert refused.value.problems == ["template line 2: No filter named 'nosuchthing'."]


def test_a_giant_constant_is_never_computed_in_the_calling_process(giant_calls):
    """Jinja computes constant expressions while compiling: that too is in the child."""
    assert giant_calls["constant"] == [
        "template error: the template needs more than 1,024 MB of memory"
    ]
