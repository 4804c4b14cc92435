"""Checks (issue 17, rules): every rule type against hand-made answers, graded in DuckDB
and in Python alike; pass rates with their interval; bad rules files; the saved rules."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import duckdb
import pytest

from core.qa import grading
from core.qa.evaluate import Item, python_outcome
from core.qa.rules import RulesError, load_rules
from core.qa.text import python_pattern
from core.store import checks
from core.store import results as R
from core.store import samples as S
from core.store.db import Store
from core.store.review import wilson

FAILED = Item(answer=None, status="failed", finish_reason=None)


@pytest.fixture
def db(tmp_path: Path) -> Store:
    return Store(tmp_path / "studio.duckdb")


def put(db: Store, items: list[Item], job_id: str = "job_t") -> None:
    """Hand-made results straight into the store (as ingest leaves them)."""
    db.execute("DELETE FROM results WHERE job_id = ?", [job_id])
    db.execute(
        "INSERT OR REPLACE INTO jobs (job_id, folder, state) VALUES (?, '/nowhere', 'completed')",
        [job_id],
    )
    for n, item in enumerate(items):
        db.execute(
            "INSERT INTO results (job_id, custom_id, status, answer, finish_reason, "
            "completion_tokens, metadata, model, line_no, search_text) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 'm', ?, lower(?))",
            [
                job_id,
                f"r{n:03}",
                item.status,
                item.answer,
                item.finish_reason,
                item.completion_tokens,
                None if item.metadata is None else json.dumps(item.metadata),
                n,
                item.answer,
            ],
        )


def both_ways(db: Store, rule_yaml: str, items: list[Item]) -> list[bool | None]:
    """Grades the items in DuckDB and in Python; the two must agree, item by item."""
    rules = load_rules("rules:\n" + "\n".join("  " + line for line in rule_yaml.splitlines()))
    put(db, items)
    grading.grade(db, ["job_t"], rules)
    with db.cursor() as cur:
        rows = cur.execute("SELECT passed[1] FROM rule_outcomes ORDER BY custom_id").fetchall()
    in_sql = [row[0] for row in rows]
    in_python = [python_outcome(rules.rules[0], item) for item in items]
    assert in_sql == in_python, [i.answer for i in items]
    return in_sql


def answers(*texts: str | None) -> list[Item]:
    return [FAILED if t is None else Item(answer=t) for t in texts]


def test_contains_ignores_case_by_default_and_matches_inside_words(db):
    got = both_ways(
        db,
        "- {name: r, type: contains, values: [refund]}",
        answers("We will REFUND you", "refunded", "réfund", "", "ref und", None),
    )
    assert got == [True, True, False, False, False, None]


def test_contains_whole_words_skips_parts_of_longer_words_in_any_script(db):
    got = both_ways(
        db,
        "- {name: r, type: contains, values: [refund], whole_words: true}",
        answers(
            "a refund.",
            "refunded",
            "(Refund)",
            "prerefund",
            "refund_x",
            "ärefund",
            "refund\n",
            "1refund",
            "refundé",
        ),
    )
    assert got == [True, False, True, False, False, False, True, False, False]


def test_contains_case_options_and_unicode_case(db):
    sensitive = both_ways(
        db,
        "- {name: r, type: contains, values: [Refund], case_sensitive: true}",
        answers("Refund now", "refund now", "REFUND"),
    )
    assert sensitive == [True, False, False]
    unicode = both_ways(
        db,
        "- {name: r, type: contains, values: [ÉCOLE, istanbul, οδος]}",
        answers("une école", "İstanbul", "ΟΔΟΣ", "ecole"),  # no accent: no match
    )
    # letter by letter in both engines: ΟΔΟΣ lowers to οδοσ, and σ is not the final ς
    assert unicode == [True, True, False, False]


def test_yes_and_no_are_words_in_a_rules_file_not_booleans(db):
    got = both_ways(
        db, "- {name: r, type: contains, values: [yes, 42]}", answers("Yes", "42", "no")
    )
    assert got == [True, True, False]


def test_contains_all_and_not_contains(db):
    every = both_ways(
        db,
        "- {name: r, type: contains, values: [tea, milk], match: all}",
        answers("tea with milk", "tea only", "MILK and TEA"),
    )
    assert every == [True, False, True]
    absent = both_ways(
        db,
        "- {name: r, type: not_contains, values: [sorry, apolog]}",
        answers("Here you go", "Sorry!", "I apologise", "", None),
    )
    assert absent == [True, False, False, True, None]


def test_regex_searches_in_re2_syntax_with_case_and_full_options(db):
    got = both_ways(
        db,
        r"- {name: r, type: regex, pattern: '^(yes|no)[.!]?$'}",
        answers("yes", "no!", "Yes.", "yes\n", "maybe yes", "", None),
    )
    assert got == [True, True, False, False, False, False, None]  # $: the very end
    loose = both_ways(
        db,
        r"- {name: r, type: regex, pattern: 'order \d+', case_sensitive: false}",
        answers("ORDER 42 shipped", "order ٣", "order #4"),  # \d is ASCII
    )
    assert loose == [True, False, False]
    full = both_ways(
        db, r"- {name: r, type: regex, pattern: '\w+', full: true}", answers("abc_1", "abc d", "é")
    )
    assert full == [True, False, False]  # \w is ASCII letters, digits and _


def test_a_negated_shorthand_in_a_class_is_ascii_too(db):
    got = both_ways(
        db,
        r"- {name: r, type: regex, pattern: '^[^\W\d]+$'}",  # ASCII letters and _ only
        answers("abc", "é", "a1", "_", "ab٣"),
    )
    assert got == [True, False, False, True, False]


def test_a_regex_class_means_the_same_in_python_as_in_duckdb():
    """Seeded random classes (shorthands, POSIX classes and their negations, ranges,
    escapes, a leading ^ or ], (?i)) over ASCII and other text: Python's reading of each
    pattern (python_pattern) matches exactly where RE2's does."""
    rng = random.Random(1)
    parts = ["a", "z", "A-Z", "0-5", r"\d", r"\D", r"\w", r"\W", r"\s", r"\S", "_", "é",
             r"\]", r"\-", ".", "^", "x-z", r"\t", "[:alpha:]", "[:^digit:]", "[:space:]",
             "[:punct:]", "[:^word:]", "[:upper:]", "[:xdigit:]"]  # fmt: skip
    chars = [*"aAzZ05_9 .^]-é!~`[\\", "É", "٣", "\u00a0", "\u2003", "\t", "\x0b", "\n", "ß"]
    con = duckdb.connect()
    disagreements = []
    for _ in range(300):
        body = "".join(rng.choice(parts) for _ in range(rng.randint(1, 3)))
        lead = rng.choice(["", "^", "]", "^]"])
        if body.startswith("^") and lead in ("", "^"):
            body = "a" + body  # (a "^" of the body's own is a member, not a negation)
        pattern = rng.choice(["", "(?i)"]) + f"^[{lead}{body}]+$"
        python = re.compile(python_pattern(pattern))
        texts = ["".join(rng.choices(chars, k=rng.randint(1, 3))) for _ in range(20)]
        rows = con.execute(
            "SELECT t, regexp_matches(t, ?) FROM unnest(?) u(t)", [pattern, texts]
        ).fetchall()
        disagreements += [(pattern, t) for t, re2 in rows if re2 != bool(python.search(t))]
    assert disagreements == []


def test_equals_metadata_compares_the_trimmed_answer_with_the_expected_label(db):
    items = [
        Item(answer=" positive\n", metadata={"label": "positive"}),
        Item(answer="Positive", metadata={"label": "positive"}),
        Item(answer="positive.", metadata={"label": "positive"}),
        Item(answer="3", metadata={"label": 3}),
        Item(answer="true", metadata={"label": True}),
        Item(answer="positive", metadata={"other": "x"}),  # no label: not graded
        Item(answer="positive", metadata=None),
        Item(answer="positive", metadata={"label": None}),
        Item(answer="ΟΔΟΣ", metadata={"label": "οδος"}),
        Item(answer=None, status="failed", metadata={"label": "positive"}),
    ]
    got = both_ways(db, "- {name: r, type: equals_metadata, field: label}", items)
    assert got == [True, True, False, True, True, None, None, None, False, None]
    exact = both_ways(
        db, "- {name: r, type: equals_metadata, field: label, case_sensitive: true}", items[:2]
    )
    assert exact == [True, False]


def test_json_is_strict_rfc_8259_both_ways(db):
    got = both_ways(
        db,
        "- {name: r, type: json}",
        answers(
            '{"a": 1}',
            " [1, 2] ",
            "1",
            '"x"',
            "NaN",
            "[1,]",
            '{"a":1,}',
            "inf",
            '{"a": -Infinity}',
            "{a: 1}",
            "",
            "```json\n{}\n```",
            '"\\ud800"',
            '{"text": "nan, inf ,]"}',
            None,
        ),
    )
    assert got == [
        True,
        True,
        True,
        True,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        True,
        None,
    ]


def test_json_schema_checks_valid_json_against_the_schema(db):
    rule = """- name: r
  type: json_schema
  schema: {type: object, required: [label], properties: {label: {enum: [pos, neg]}}}"""
    got = both_ways(
        db, rule, answers('{"label": "pos"}', '{"label": "meh"}', "{}", "pos", "[", None)
    )
    assert got == [True, False, False, False, False, None]


def test_length_in_words_chars_and_tokens(db):
    words = both_ways(
        db,
        "- {name: r, type: length, unit: words, min: 2, max: 3}",
        answers(
            "one two",
            "one  two\tthree",
            "one",
            " one\ntwo\r\nthree four ",
            "",
            "un\u00a0deux\u2003trois",
            "çà et là",
            "one-two three",
        ),
    )
    assert words == [True, True, False, False, False, True, True, True]
    chars = both_ways(
        db, "- {name: r, type: length, unit: chars, max: 3}", answers("abc", "abcd", "é👍🏽", "")
    )
    assert chars == [True, False, True, True]  # code points: 👍🏽 is two
    tokens = [Item(answer="x", completion_tokens=n) for n in (5, 6, None)]
    assert both_ways(db, "- {name: r, type: length, unit: tokens, max: 5}", tokens) == [
        True,
        False,
        None,
    ]


def test_finish_reason(db):
    items = [Item("a", finish_reason="stop"), Item("a", finish_reason="length"), FAILED]
    assert both_ways(db, "- {name: r, type: finish_reason}", items) == [True, False, None]
    assert both_ways(db, "- {name: r, type: finish_reason, values: [length]}", items) == [
        False,
        True,
        None,
    ]


def test_refusal_detector_fails_refusals_and_passes_ordinary_answers(db):
    got = both_ways(
        db,
        "- {name: r, type: refusal}",
        answers(
            "I'm sorry, but I can't help with that.",
            "I CANNOT ASSIST WITH THIS REQUEST.",
            "As an AI language model, I do not have opinions.",
            "I’m unable to provide that information.",
            "I must decline.",
            "Sorry for the delay: your refund is on its way.",
            "I can help with that! Here is the summary.",
            "Amid the noise, I cannot stress this enough: drink water.",
            "",
        ),
    )
    assert got == [False, False, False, False, False, True, True, True, True]


def test_pass_rate_and_wilson_interval_match_a_hand_computed_example(db):
    # 8 of 10 graded answers pass, 2 fail, 1 failed request. Wilson 95% by hand:
    # p = 0.8, z = 1.96: centre (0.8 + 0.19208) / 1.38416 = 0.71676,
    # half 1.96 * sqrt(0.016 + 0.0096040) / 1.38416 = 0.22656 -> (0.4902, 0.9433)
    put(db, answers(*(["ok"] * 8), "x" * 20, "x" * 30, None))
    grading.grade(
        db, ["job_t"], load_rules("rules: [{name: short, type: length, unit: chars, max: 5}]")
    )
    row = checks.pass_rates(db, ["job_t"], "job").iloc[0]
    assert (row["passed"], row["failed"], row["not_graded"]) == (8, 2, 1)
    assert row["pass_rate"] == pytest.approx(0.8)
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert (row["ci_low"], row["ci_high"]) == wilson(8, 10)  # the one interval code


def test_pass_rates_per_model_and_prompt_version(db):
    put(db, answers("yes", "no", "yes"))
    db.execute("UPDATE results SET model = 'big', prompt_version = 'v2' WHERE custom_id = 'r002'")
    grading.grade(db, ["job_t"], load_rules("rules: [{name: y, type: contains, values: [yes]}]"))
    by_model = checks.pass_rates(db, ["job_t"], "model").set_index("model")
    assert by_model.loc["m", ["passed", "failed"]].tolist() == [1, 1]
    assert by_model.loc["big", ["passed", "failed"]].tolist() == [1, 0]
    by_version = checks.pass_rates(db, ["job_t"], "prompt_version").set_index("prompt_version")
    assert set(by_version.index) == {"(none)", "v2"}


def problems(text: str) -> list[str]:
    with pytest.raises(RulesError) as caught:
        load_rules(text)
    return caught.value.problems


def test_bad_rules_files_are_refused_with_line_rule_and_field():
    bad = """rules:
  - name: short
    type: lenght
    max: 3
  - name: refund
    type: contains
    valuez: [a]
  - name: look_ahead
    type: regex
    pattern: "(?=x)"
  - name: open
    type: regex
    pattern: "a("
  - name: bounds
    type: length
    min: 5
    max: 2
  - name: schema
    type: json_schema
    schema: {type: nope}
  - name: has space
    type: json
"""
    found = problems(bad)
    assert found[0] == (
        "line 3, rule 1 ('short'): unknown type 'lenght'; valid types: contains, "
        "not_contains, regex, equals_metadata, json, json_schema, length, finish_reason, refusal"
    )
    assert "line 5, rule 2 ('refund'), field values: required, and missing" in found
    assert any(
        p.startswith(
            "line 7, rule 2 ('refund'), field valuez: unknown field 'valuez'; "
            "a contains rule takes name, description, values"
        )
        for p in found
    )
    assert any(
        p.startswith("line 10, rule 3 ('look_ahead'), field pattern: DuckDB's") for p in found
    )
    assert any(
        p.startswith("line 13, rule 4 ('open'), field pattern: invalid regular expression")
        for p in found
    )
    assert "line 14, rule 5 ('bounds'): min (5) is larger than max (2)" in found
    assert any(
        p.startswith("line 20, rule 6 ('schema'), field schema: not a valid JSON schema")
        for p in found
    )
    assert any(
        p.startswith("line 21, rule 7 ('has space'), field name: a name is letters") for p in found
    )


def test_more_bad_files_each_say_what_is_wrong():
    assert problems("") == ["the rules file is empty: it needs `rules:` and at least one rule"]
    assert problems("rules: [\n")[0].startswith("line 2, column 1: not valid YAML or JSON")
    assert problems("- a\n") == ["line 1: the file must be a mapping with a `rules:` list"]
    assert problems('{"rules": []}')[0].startswith("line 1, field rules: list should have")
    assert problems("rules:\n  - {name: a, type: json}\n  - {name: a, type: refusal}\n") == [
        "line 1: two rules are named 'a'; give each its own name"
    ]
    assert problems("rules:\n  - {name: a}\n")[0] == (
        "line 2, rule 1 ('a'): every rule needs a type; valid types: contains, not_contains, "
        "regex, equals_metadata, json, json_schema, length, finish_reason, refusal"
    )
    assert problems("rules:\n  - {name: a, type: length}\n") == [
        "line 2, rule 1 ('a'): give min, max or both"
    ]
    json_text = '{"rules": [\n {"name": "a", "type": "json", "strict": true}\n]}'
    assert problems(json_text)[0].startswith("line 2, rule 1 ('a'), field strict: unknown field")


def test_rules_are_saved_atomically_in_the_job_folder_and_regraded_when_stale(tmp_path):
    from tests.support.jobs import finished_job

    job = finished_job(tmp_path / "b", {"a": "yes", "b": "no", "c": None})
    db = Store(tmp_path / "studio.duckdb")
    db.ingest(job)
    text = "# the team's rules\nrules:\n  - {name: y, type: contains, values: [yes]}\n"
    grading.grade_jobs(db, [job.job_id], load_rules(text), text)
    assert (job.path / "rules.yaml").read_text(encoding="utf-8") == text  # comments kept
    assert not list(job.path.glob(".rules.yaml*"))  # no temporary file left behind
    assert checks.pass_rates(db, [job.job_id]).iloc[0][["passed", "failed"]].tolist() == [1, 1]

    db.close()  # a deleted database: the outcomes come back from rules.yaml
    (tmp_path / "studio.duckdb").unlink()
    db = Store(tmp_path / "studio.duckdb")
    db.ingest(job)
    assert checks.rule_names(db, [job.job_id]) == []
    assert grading.refresh(db, [job.job_id]) == {}
    assert checks.pass_rates(db, [job.job_id]).iloc[0][["passed", "not_graded"]].tolist() == [1, 1]

    # Saved JSON rules are kept as YAML; a broken file is named, the outcomes stay.
    grading.save_rules(job.path, load_rules('{"rules": [{"name": "n", "type": "json"}]}'), "{}")
    assert "name: n" in (job.path / "rules.yaml").read_text(encoding="utf-8")
    (job.path / "rules.yaml").write_text("rules: [{name: n, type: nope}]", encoding="utf-8")
    problem = grading.refresh(db, [job.job_id])[job.job_id]
    assert problem.startswith("rules.yaml: line 1, rule 1 ('n'): unknown type 'nope'")
    assert checks.rule_names(db, [job.job_id]) == ["y"]


def test_outcomes_follow_results_that_change_after_grading(tmp_path):
    from core.jobs.output_file import OutputWriter
    from core.run.outputs import Choice, Completion, success_line
    from tests.support.jobs import finished_job

    job = finished_job(tmp_path, {"a": "yes", "b": None})  # b failed
    db = Store(tmp_path / "studio.duckdb")
    db.ingest(job)
    text = "rules: [{name: y, type: contains, values: [yes]}]"
    grading.grade_jobs(db, [job.job_id], load_rules(text), text)
    assert checks.pass_rates(db, [job.job_id]).iloc[0]["not_graded"] == 1
    assert grading.refresh(db, [job.job_id]) == {}  # nothing came since: not graded again
    graded_at = db.query("SELECT graded_at FROM rule_runs")["graded_at"].iloc[0]

    writer = OutputWriter(job.output)  # a retry of b succeeded since, as the worker writes it
    writer.write([success_line("b", "tiny", Completion(3, [Choice("yes", "stop", 1)]))])
    writer.close()
    db.ingest(job)
    grading.refresh(db, [job.job_id])
    row = checks.pass_rates(db, [job.job_id]).iloc[0]
    assert (row["passed"], row["not_graded"]) == (2, 0)
    assert db.query("SELECT graded_at FROM rule_runs")["graded_at"].iloc[0] > graded_at


def outcomes_of(db: Store, **kw: Any) -> list[str]:
    return list(R.page(db, R.ResultFilter(job_ids=["job_t"], **kw))["custom_id"])


def test_results_are_filtered_and_sampled_by_a_rules_outcome(db):
    put(db, answers("yes", "no", "nope", None))
    rules = (
        "rules: [{name: y, type: contains, values: [yes]},"
        " {name: short, type: length, unit: chars, max: 3}]"
    )
    grading.grade(db, ["job_t"], load_rules(rules))
    assert outcomes_of(db, checks={"y": "failed"}) == ["r001", "r002"]
    assert outcomes_of(db, checks={"y": "passed"}) == ["r000"]
    assert outcomes_of(db, checks={"y": "not_graded"}) == ["r003"]  # the failed request
    assert outcomes_of(db, checks={"y": "failed", "short": "passed"}) == ["r001"]
    assert outcomes_of(db, checks={"unknown": "failed"}) == []
    assert outcomes_of(db, checks={"y": "failed"}, search="nope") == ["r002"]
    assert R.facets(db, ["job_t"])["checks"] == ["y", "short"]  # in the file's order
    failures = R.ResultFilter(job_ids=["job_t"], checks={"y": "failed"})
    sample = S.draw(db, S.SampleDefinition(filter=failures, size=10))
    assert sorted(sample["custom_id"]) == ["r001", "r002"]
    saved = S.create_sample(db, "failures of y", S.SampleDefinition(filter=failures, size=1))
    assert S.get_sample(db, saved.sample_id).definition.filter.checks == {"y": "failed"}


def test_an_answer_nested_past_pythons_parser_fails_a_json_schema_rule_and_grades_on(db):
    deep = "[" * 100_000 + "]" * 100_000  # valid JSON that Python's parser cannot read
    got = both_ways(
        db, "- {name: r, type: json_schema, schema: {type: array}}", answers(deep, "[]")
    )
    assert got == [False, True]
