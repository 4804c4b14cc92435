"""Rules that are valid but costly (issue 31, items 1 and 2): a json_schema pattern that
backtracks, YAML aliases that expand to billions of values, a rules file of megabytes.
Each is bounded: it grades in linear time, or is refused naming its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.qa.rules import MAX_RULES_BYTES, RulesError, load_rules
from tests.support.bounds import run_bounded

BACKTRACKING = """\
rules:
  - name: all_as
    type: json_schema
    schema: {type: string, pattern: "^(a+)+$"}
  - name: keys
    type: json_schema
    schema:
      type: object
      patternProperties: {"^(a+)+$": {type: integer}}
      additionalProperties: false
"""


def test_a_backtracking_schema_pattern_grades_a_long_answer_without_hanging(tmp_path):
    script = f"""
        import json, time
        from core.qa import grading
        from core.qa.rules import load_rules
        from core.store.db import Store
        store = Store({str(tmp_path / "s.duckdb")!r})
        store.execute("INSERT INTO jobs (job_id, folder, state) VALUES ('j', '/x', 'completed')")
        for cid, answer in [("s", json.dumps("a" * 40000 + "b")),
                            ("k", json.dumps({{"a" * 40000 + "b": 1}})),
                            ("ok", json.dumps("aaa"))]:
            store.execute("INSERT INTO results (job_id, custom_id, status, answer) "
                          "VALUES ('j', ?, 'succeeded', ?)", [cid, answer])
        started = time.monotonic()
        grading.grade(store, ["j"], load_rules({BACKTRACKING!r}))
        took = time.monotonic() - started
        with store.cursor() as cur:
            rows = cur.execute("SELECT custom_id, passed FROM rule_outcomes").fetchall()
        print(json.dumps({{"took": took, "rows": rows}}))
    """
    done = run_bounded(script, 60)
    assert done.returncode == 0, done.stderr
    import json

    report = json.loads(done.stdout.splitlines()[-1])  # 2**40000 steps would never end
    outcomes = {cid: passed for cid, passed in report["rows"]}
    # a string: the pattern fails, an object fails the string rule; the keys rule: the long
    # key is no match, so additionalProperties refuses it
    assert outcomes == {"k": [False, False], "ok": [True, False], "s": [False, False]}


def test_a_schema_pattern_reads_as_the_regex_rules_re2_dialect():
    with pytest.raises(RulesError, match=r"line 4, rule 1 \('x'\), field schema: .*not an RE2"):
        load_rules(
            "rules:\n  - name: x\n    type: json_schema\n"
            "    schema: {type: string, pattern: '^(?=a)'}\n"
        )


def test_unevaluated_properties_beside_pattern_properties_is_refused_naming_the_rule():
    with pytest.raises(RulesError, match=r"rule 1 \('x'\).*unevaluatedProperties"):
        load_rules(
            "rules:\n  - name: x\n    type: json_schema\n    schema:\n"
            "      patternProperties: {'^a': {}}\n      unevaluatedProperties: false\n"
        )


ALIAS_BOMB = """\
rules:
  - name: bomb
    type: json_schema
    schema:
      a: &a [x, x, x, x, x, x, x, x, x]
      b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
      c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
      d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
      e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
      f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
      g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
      h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
      i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
"""
NESTED_ALLOF = """\
rules:
  - name: nested
    type: json_schema
    schema:
      allOf: &a1 [{type: string}, {type: string}]
      x1: &a2 {allOf: [*a1, *a1, *a1, *a1]}
      x2: &a3 {allOf: [*a2, *a2, *a2, *a2]}
      x3: &a4 {allOf: [*a3, *a3, *a3, *a3]}
      x4: &a5 {allOf: [*a4, *a4, *a4, *a4]}
      x5: &a6 {allOf: [*a5, *a5, *a5, *a5]}
      x6: &a7 {allOf: [*a6, *a6, *a6, *a6]}
      x7: &a8 {allOf: [*a7, *a7, *a7, *a7]}
      x8: &a9 {allOf: [*a8, *a8, *a8, *a8]}
      x9: {allOf: [*a9, *a9, *a9, *a9]}
"""


@pytest.mark.parametrize("text", [ALIAS_BOMB, NESTED_ALLOF], ids=["billion_laughs", "allOf"])
def test_yaml_aliases_that_expand_too_far_are_refused_with_their_line(text):
    with pytest.raises(RulesError) as refused:  # 10**9 values expanded would never end
        load_rules(text)
    (problem,) = refused.value.problems
    assert problem.startswith("line ") and "aliases expand past 50,000 values" in problem


def test_a_few_aliases_still_load():
    rules = load_rules(
        "rules:\n  - name: a\n    type: contains\n    values: &v [refund, credit]\n"
        "  - name: b\n    type: not_contains\n    values: *v\n"
    )
    assert rules.rules[1].values == ["refund", "credit"]


def test_an_alias_to_its_own_holder_is_refused_with_its_line():
    with pytest.raises(RulesError, match=r"line 4, column 11: .*refer to the value that holds it"):
        load_rules("rules: &r\n  - name: x\n    type: json\n    more: *r\n")


def test_a_rules_file_past_the_size_limit_is_refused_before_it_is_parsed():
    text = "rules:\n" + "  - {name: r, type: json}\n" * (MAX_RULES_BYTES // 20)
    with pytest.raises(RulesError, match="larger than 256 KiB"):
        load_rules(text)


def test_a_saved_rules_file_that_would_hang_does_not_hang_a_regrade(tmp_path: Path):
    """The hang came back after a restart: pages regrade from the job's rules.yaml."""
    script = f"""
        import json
        from pathlib import Path
        from core.qa import grading
        from core.store.db import Store
        folder = Path({str(tmp_path / "job")!r}); folder.mkdir()
        (folder / "rules.yaml").write_text({BACKTRACKING!r})
        store = Store({str(tmp_path / "s.duckdb")!r})
        store.execute("INSERT INTO jobs (job_id, folder, state) VALUES ('j', ?, 'completed')",
                      [str(folder)])
        store.execute("INSERT INTO results (job_id, custom_id, status, answer) "
                      "VALUES ('j', 's', 'succeeded', ?)", [json.dumps("a" * 40000 + "b")])
        print(grading.refresh(store, ["j"]))
        with store.cursor() as cur:
            print(cur.execute("SELECT passed FROM rule_outcomes").fetchall())
    """
    done = run_bounded(script, 60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["{}", "[([False, False],)]"]


SELF_REF = """\
rules:
  - name: ok
    type: json
  - name: tree
    type: json_schema
    schema: {"$ref": "#"}
"""


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ('{"$ref": "#"}', "$ref '#' leads back to a part it is inside"),
        (
            '{"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"anyOf": [{"$ref": "#/$defs/a"}]}}, '
            '"$ref": "#/$defs/a"}',
            "leads back to a part it is inside",
        ),
        (
            '{"$defs": {"node": {"properties": {"kids": {"items": {"$ref": "#/$defs/node"}}}}}}',
            "$ref '#/$defs/node' leads back",
        ),
        ('{"$ref": "#/$defs/none"}', "$ref '#/$defs/none' names no part of the schema"),
        ('{"$defs": {"a": {type: string}}, "$ref": "#/$defs/a/type"}', "names no part"),
        ('{"$ref": "https://example.com/s.json"}', "cannot be followed here"),
        ('{"$defs": {"a": {"$anchor": "a"}}, "$ref": "#a"}', "cannot be followed here"),
    ],
    ids=["itself", "through_another", "a_tree", "nothing", "not_a_schema", "remote", "anchor"],
)
def test_a_schema_ref_that_recurses_or_cannot_be_followed_is_refused_at_load(schema, says):
    with pytest.raises(RulesError) as refused:
        load_rules(f"rules:\n  - name: x\n    type: json_schema\n    schema: {schema}\n")
    (problem,) = refused.value.problems
    assert problem.startswith("line 4, rule 1 ('x'), field schema: the schema's "), problem
    assert says in problem


def test_a_schema_ref_into_its_own_defs_still_grades():
    rules = load_rules(
        'rules:\n  - name: x\n    type: json_schema\n    schema: {"$defs": {"label": {"enum": '
        '[pos, neg]}}, type: object, properties: {label: {"$ref": "#/$defs/label"}}}\n'
    )
    from core.qa.json_schema import is_valid

    schema = rules.rules[0].json_schema
    assert is_valid(schema, {"label": "pos"}) and not is_valid(schema, {"label": "meh"})


def test_core_grade_refuses_a_self_referring_schema_naming_its_line(studio_home, tmp_path):
    from core.config import data_paths
    from tests.support.cli import cli
    from tests.support.pages import job_in_home

    job_id = job_in_home(studio_home, [{"custom_id": "a", "answer": '{"a": 1}'}])
    rules = tmp_path / "rules.yaml"
    rules.write_text(SELF_REF, encoding="utf-8")
    done = cli("grade", job_id, "--rules", str(rules))
    assert done.returncode == 1, done.stdout
    assert f"error: {rules}: line 6, rule 2 ('tree'), field schema: the schema's $ref" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr and "RecursionError" not in done.stderr
    assert not (data_paths().jobs / job_id / "rules.yaml").exists()


def test_the_one_way_back_among_thousands_of_schema_refs_is_found():
    """(How the check's time grows with the refs is bench/costly_inputs.py's figure.)"""
    from core.qa.json_schema import check_refs

    holders = {f"p{i}": {"$ref": "#/$defs/b"} for i in range(3000)}
    users = {f"q{i}": {"$ref": "#/$defs/a"} for i in range(3000)}
    schema = {"$defs": {"a": {"properties": holders}, "b": {}}, "properties": users}
    check_refs(schema)  # no way back yet: no error
    users["q0"] = {"$ref": "#"}  # and the one way back among them is found
    with pytest.raises(ValueError, match="'#' leads back"):
        check_refs(schema)


def test_a_rules_file_nested_too_deep_is_refused_with_its_line():
    deep = "{items: " * 3000 + "{}" + "}" * 3000
    with pytest.raises(RulesError) as refused:
        load_rules(f"rules:\n  - name: x\n    type: json_schema\n    schema: {deep}\n")
    (problem,) = refused.value.problems
    assert problem.startswith("line 4, column ") and "nest deeper than 100 levels" in problem
    # As deep as a schema can be graded still loads.
    fits = "{items: " * 95 + "{type: string}" + "}" * 95
    assert load_rules(f"rules:\n  - name: x\n    type: json_schema\n    schema: {fits}\n")
