"""Agreement over many reviewers (issue 44 item 3): Krippendorff's alpha per question and
per pair with a bootstrap interval, the disagreements, and an owner's adjudication."""

from __future__ import annotations

import json

import krippendorff
import numpy as np
import pandas as pd
import pytest

from core.human import label_schemas as lsc
from core.store import agreement as ag
from core.store import training as T
from core.store.review import Label, ReviewError, get_label, label_history, save_label
from tests.support.cli import cli

# Krippendorff's worked example ("Computing Krippendorff's Alpha-Reliability", 2011, C):
# 4 observers, 12 units, values 1-5, some missing. Its published alphas: nominal 0.743,
# ordinal 0.815.
EXAMPLE = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


def _long(matrix: list[list], column: str = "score") -> pd.DataFrame:
    """A reliability matrix (reviewers x items) as labels, one row per item and reviewer."""
    rows = [
        {"job_id": "j", "custom_id": f"u{unit}", "reviewer": f"r{who}", column: value}
        for who, values in enumerate(matrix)
        for unit, value in enumerate(values)
        if value is not None
    ]
    return pd.DataFrame(rows)


@pytest.mark.parametrize(("level", "expected"), [("nominal", 0.743), ("ordinal", 0.815)])
def test_alpha_of_krippendorffs_worked_example(level, expected):
    question = ag.Question("score", "Rating", level, (1, 2, 3, 4, 5))
    (got,) = ag.question_alphas(_long(EXAMPLE), (question,))
    assert round(got.alpha, 3) == expected
    assert got.items == 11  # unit 12 has one value: it takes no part
    assert got.low < got.alpha < got.high
    # the bootstrap's own alpha (from coincidences) is the package's on the same data
    labels = _long(EXAMPLE)
    counts = ag.value_counts(labels["score"], ag.item_codes(labels), [1, 2, 3, 4, 5])
    counts = counts[counts.sum(axis=1) >= 2]
    whole = ag._coincidences(counts).sum(axis=0)[None]
    assert ag.alphas(whole, level)[0] == pytest.approx(got.alpha)


def test_alpha_of_a_small_table_computed_by_hand():
    """Two reviewers, four items: (pass, pass), (pass, fail), (fail, fail), (fail, fail).
    Coincidences: pass-pass 2, pass-fail 1 + 1, fail-fail 4; n_pass 3, n_fail 5, n 8.
    alpha = 1 - (n - 1) * D_o / sum(n_c n_k, c != k) = 1 - 7 * 2 / (2 * 3 * 5) = 8/15."""
    matrix = [["pass", "pass", "fail", "fail"], ["pass", "fail", "fail", "fail"]]
    verdict, score = ag.question_alphas(_long(matrix, "verdict").assign(score=None))
    assert verdict.alpha == pytest.approx(8 / 15)
    assert (verdict.items, verdict.values) == (4, 8)
    assert score.alpha is None and "two reviewers" in score.problem
    again = ag.question_alphas(_long(matrix, "verdict").assign(score=None))[0]
    assert (again.low, again.high) == (verdict.low, verdict.high)  # a fixed seed
    assert "0.53 (95% CI" in verdict.describe() and "over 4 items" in verdict.describe()


def test_one_value_everywhere_and_one_reviewer_say_why_there_is_no_alpha():
    same = ag.question_alphas(_long([["pass"] * 3, ["pass"] * 3], "verdict").assign(score=4))
    for got in same:
        assert got.alpha is None and got.low is None
        assert "alpha is undefined" in got.describe() and "nan" not in got.describe()
    assert "every label is pass" in same[0].problem and "every label is 4" in same[1].problem
    alone = ag.question_alphas(_long([["pass", "fail"]], "verdict").assign(score=2))
    assert all(a.alpha is None and "two reviewers" in a.problem for a in alone)


def test_the_interval_resamples_whole_items_as_the_package_computes_them():
    """An item resampled keeps its reviewers together: each resample's alpha is the
    ``krippendorff`` package's alpha of whole items drawn with replacement."""
    rng = np.random.default_rng(1)
    counts = np.zeros((30, 3), dtype=np.int64)
    for row in counts:
        for _ in range(rng.integers(2, 5)):
            row[rng.integers(0, 3)] += 1
    low, high = ag.interval(counts, "nominal", resamples=200, seed=3)
    patterns, per = np.unique(counts, axis=0, return_counts=True)
    drawn = np.random.default_rng(3).multinomial(30, per / 30, size=200)
    slow = [
        krippendorff.alpha(
            value_counts=np.repeat(patterns, k, axis=0), level_of_measurement="nominal"
        )
        for k in drawn
    ]
    assert (low, high) == pytest.approx(tuple(np.nanpercentile(slow, [2.5, 97.5])))
    assert low < 0.0 < high  # random labels: no agreement beyond chance


ROWS = [{"custom_id": c, "prompt": f"Q {c}?", "answer": f"A {c}"} for c in "abcd"]


@pytest.fixture
def three(tmp_path):
    """Three reviewers on a sample of four items: ana and bob on every item, cy on two."""
    from core.store.db import Store
    from core.store.results import ResultFilter
    from core.store.samples import SampleDefinition, create_sample
    from tests.support.jobs import finished_job

    job = finished_job(tmp_path, ROWS)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job.job_id]), size=4)
    sample_id = create_sample(store, "s", definition).sample_id
    given = {
        "ana": {"a": ("pass", 5), "b": ("pass", 4), "c": ("fail", 1), "d": ("fail", 2)},
        "bob": {"a": ("pass", 4), "b": ("fail", 2), "c": ("fail", 1), "d": ("fail", 2)},
        "cy": {"a": ("pass", 5), "b": ("unsure", 3)},
    }
    for who, items in given.items():
        for cid, (verdict, score) in items.items():
            save_label(store, job.job_id, cid, who, Label(verdict, score), sample_id)
    return store, job.job_id, sample_id


def test_a_samples_agreement_per_question_per_pair_and_its_disagreements(three):
    store, _, sample_id = three
    found = ag.sample_agreement(store, sample_id)
    assert found.reviewers == ["ana", "bob", "cy"] and found.problem() is None
    verdict, score = found.questions
    # item a: 3 x pass; b: pass, fail, unsure; c, d: 2 x fail. Coincidences: pass-pass 3,
    # fail-fail 4, and b's six ordered pairs of different values, each 1/2: pass-fail,
    # pass-unsure, fail-unsure 1 each way. n_pass 4, n_fail 5, n_unsure 1, n 10;
    # D_o = 3, sum(n_c n_k, c != k) = 2 * (20 + 4 + 5) = 58: alpha = 1 - 9 * 3 / 58.
    assert verdict.alpha == pytest.approx(1 - 27 / 58)
    assert verdict.items == 4 and score.level == "ordinal" and score.alpha is not None
    pairs = found.pairs.set_index(["reviewer A", "reviewer B"])
    assert pairs.loc[("ana", "bob"), "both labelled"] == 4
    assert pairs.loc[("ana", "cy"), "both labelled"] == 2
    # ana and bob: (p, p), (p, f), (f, f), (f, f): the hand-computed 8/15 above
    assert pairs.loc[("ana", "bob"), "Verdict α"] == pytest.approx(8 / 15)
    differ = found.disagreements
    assert list(differ["custom_id"]) == ["b"]
    assert differ["labels"].iloc[0] == "ana: pass (4); bob: fail (2); cy: unsure (3)"
    assert differ["adjudicated"].isna().all()


def test_an_adjudication_is_the_final_label_and_the_history_keeps_everyone(three, tmp_path):
    store, job_id, sample_id = three
    out = T.export_sft(store, sample_id, tmp_path / "before.jsonl")
    assert out.left_out["reviewers disagree"] == 1
    ag.adjudicate(store, job_id, "b", "pass", "olga", "the answer is right")
    assert (store.human_dir / "adjudications.jsonl").exists()  # in its file first
    row = ag.disagreements(store, sample_id).iloc[0]
    assert (row["adjudicated"], row["adjudicated_by"]) == ("pass", "olga")
    out = T.export_sft(store, sample_id, tmp_path / "after.jsonl")
    assert out.written == 2 and "reviewers disagree" not in out.left_out  # a and b pass
    assert get_label(store, job_id, "b", "bob").verdict == "fail"  # reviewers' labels stay
    history = label_history(store, job_id, "b")
    assert list(zip(history["kind"], history["reviewer"], history["verdict"], strict=True)) == [
        ("label", "ana", "pass"),
        ("label", "bob", "fail"),
        ("label", "cy", "unsure"),
        ("final label", "olga", "pass"),
    ]
    assert history["saved_at"].notna().all()
    ag.adjudicate(store, job_id, "b", "fail", "olga")  # changed: the latest wins, both kept
    assert ag.disagreements(store, sample_id)["adjudicated"].iloc[0] == "fail"
    assert list(label_history(store, job_id, "b")["kind"]).count("final label") == 2


@pytest.mark.parametrize(
    ("cid", "verdict", "by", "message"),
    [
        ("b", "great", "olga", "must be one of pass, fail, unsure"),
        ("b", "pass", "  ", "enter your name"),
        ("zzz", "pass", "olga", "no reviewer labelled"),
    ],
)
def test_a_bad_adjudication_is_refused_and_nothing_saved(three, cid, verdict, by, message):
    store, job_id, _ = three
    with pytest.raises(ReviewError, match=message):
        ag.adjudicate(store, job_id, cid, verdict, by)
    assert not (store.human_dir / "adjudications.jsonl").exists()


def test_the_dataset_card_shows_alpha_per_question_and_pair(three, tmp_path):
    store, _, sample_id = three
    T.export_dataset(store, sample_id, tmp_path / "ds")
    card = (tmp_path / "ds" / "README.md").read_text(encoding="utf-8")
    # figures are Markdown-escaped as every cell of the card (they can quote a label)
    assert "| Verdict | nominal | 0\\.53 \\(95% CI " in card and "over 4 items |" in card
    assert "| ana | bob | 4 | 0\\.53 \\(95% CI" in card and "| bob | cy | 2 |" in card


def test_the_cli_prints_agreement_and_adjudicates(studio_home):
    from core.config import data_paths
    from core.store.db import Store
    from core.store.results import ResultFilter
    from core.store.samples import SampleDefinition, create_sample
    from tests.support.pages import job_in_home

    job_id = job_in_home(studio_home, ROWS)
    store = Store(data_paths().database)
    store.ingest_all(data_paths().jobs)
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=4)
    sample_id = create_sample(store, "s", definition).sample_id
    save_label(store, job_id, "a", "ana", Label("pass", 4), sample_id)
    lsc.set_schema(store.human_dir, sample_id, "multiple: Problems | made up, too long", "", "o")
    store.close()
    done = cli("review", "agreement", "--sample", sample_id)
    assert done.returncode == 0, done.stderr
    assert "1 reviewer(s) labelled this sample: agreement needs two" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr
    store = Store(data_paths().database)
    for cid, verdict, problems in (("a", "fail", ["made up"]), ("b", "pass", ["too long"])):
        label = Label(verdict, 2, answers={"Problems": problems})
        save_label(store, job_id, cid, "bob", label, sample_id)
    label = Label("pass", 2, answers={"Problems": ["too long"]})
    save_label(store, job_id, "b", "ana", label, sample_id)
    store.close()
    done = cli("review", "agreement", "--sample", sample_id)
    assert done.returncode == 0, done.stderr
    assert "Verdict (nominal) alpha:" in done.stdout and "ana / bob: 2 items" in done.stdout
    # one item has two sets, both {too long}: no variation to measure, said in words
    assert "Problems (sets, MASI) alpha: every label is {too long}: alpha is undefined" in (
        done.stdout
    )
    assert f"{job_id} a: ana: pass (4); bob: fail (2)" in done.stdout  # the item differs
    done = cli("review", "adjudicate", job_id, "a", "pass", "--by", "olga")
    assert done.returncode == 0, done.stderr
    assert "final label pass, adjudicated by olga" in done.stdout
    done = cli("review", "agreement", "--sample", sample_id)
    assert "-> final pass by olga" in done.stdout
    done = cli("review", "agreement", "--sample", sample_id, "--json")
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert [q["question"] for q in shown["questions"]] == ["Verdict", "Score (1–5)", "Problems"]
    assert shown["pairs"][0]["both labelled"] == 2 and shown["problem"] is None
    (item,) = shown["disagreements"]
    assert (item["custom_id"], item["adjudicated"], item["adjudicated_by"]) == ("a", "pass", "olga")
    done = cli("review", "agreement", "--sample", "nope")
    assert done.returncode == 2 and "no sample 'nope'" in done.stderr


def _sets(rows: list[tuple[str, str, list[str]]]) -> pd.DataFrame:
    """Labels answering one multiple choice "P" (options a, b, c): (item, reviewer, set)."""
    frame = pd.DataFrame(
        [
            {"job_id": "j", "custom_id": unit, "reviewer": who, "answers": json.dumps({"P": s})}
            for unit, who, s in rows
        ]
    )
    return ag.with_answers(frame, (MULTIPLE,))


MULTIPLE = ag.Question("answer:P", "P", "masi", ("a", "b", "c"))


def test_masi_distances_by_hand():
    sets = [frozenset("a"), frozenset("ab"), frozenset("bc"), frozenset("c")]
    d = ag.masi_distances(sets, ("a", "b", "c"))
    assert d[0, 0] == d[1, 1] == 0  # equal sets
    assert d[0, 1] == pytest.approx(1 - 1 / 2 * 2 / 3)  # {a} in {a, b}: J 1/2, M 2/3
    assert d[1, 2] == pytest.approx(1 - 1 / 3 * 1 / 3)  # {a, b} and {b, c} overlap: J 1/3
    assert d[0, 3] == 1 and (d == d.T).all()  # disjoint


def test_alpha_of_a_multiple_choice_by_masi_computed_by_hand():
    """Two reviewers, three items: ({a}, {a}), ({a, b}, {a}), ({b}, {c}). Values {a} x3,
    {a, b}, {b}, {c}; n 6. Observed: {a, b}-{a} 2/3 both ways, {b}-{c} 1 both ways: 10/3.
    Expected: 2 * (3*1*1 + 3*1*1 + 3*1*2/3 + 1*1*1 + 1*1*2/3 + 1*1*1) = 64/3 ({a}-{b},
    {a}-{c}, {a}-{a, b}, {b}-{c}, {b}-{a, b}, {c}-{a, b}). alpha = 1 - 5 * 10/3 / (64/3)."""
    labels = _sets(
        [("u1", "r0", ["a"]), ("u1", "r1", ["a"]), ("u2", "r0", ["b", "a"]),
         ("u2", "r1", ["a"]), ("u3", "r0", ["b"]), ("u3", "r1", ["c"])]
    )  # fmt: skip
    assert labels["answer:P"][2] == frozenset("ab")
    (got,) = ag.question_alphas(labels, (MULTIPLE,))
    assert got.alpha == pytest.approx(7 / 32)
    assert (got.level, got.items, got.values) == ("masi", 3, 6)
    assert got.low is not None and got.low <= got.alpha <= got.high
    # sets that share options agree more than the same labels read as unrelated categories
    apart = ag.Question("answer:P", "P", "nominal")
    flat = labels.assign(**{"answer:P": labels["answer:P"].map(lambda s: ",".join(sorted(s)))})
    assert got.alpha > ag.question_alphas(flat, (apart,))[0].alpha


def test_masi_alpha_and_its_interval_are_the_packages_with_a_masi_metric_of_its_own():
    """A reference written apart: the reliability matrix (reviewers x items) of sets,
    their MASI distance computed pair by pair from Python sets, fed to the ``krippendorff``
    package; and each bootstrap resample's alpha the package's over whole items."""

    def masi(x: frozenset, y: frozenset) -> float:
        m = 1 if x == y else 2 / 3 if x <= y or y <= x else 1 / 3 if x & y else 0
        return 1 - len(x & y) / len(x | y) * m

    rng = np.random.default_rng(5)
    options = ("a", "b", "c")
    rows = []
    for unit in range(40):
        base = {o for o in options if rng.random() < 0.5} or {"a"}
        for who in range(int(rng.integers(2, 5))):
            mine = {o for o in options if (o in base) != (rng.random() < 0.2)} or {"c"}
            rows.append((f"u{unit}", f"r{who}", sorted(mine)))
    labels = _sets(rows)
    (got,) = ag.question_alphas(labels, (MULTIPLE,))
    sets = ag._domain(labels, MULTIPLE)
    table = np.full((4, 40), np.nan)
    for unit, who, s in rows:
        table[int(who[1:]), int(unit[1:])] = sets.index(frozenset(s))
    distance = np.array([[masi(x, y) for y in sets] for x in sets])

    def metric(v1, v2, **_):
        return distance[v1.astype(int), v2.astype(int)]

    reference = krippendorff.alpha(reliability_data=table, level_of_measurement=metric)
    assert got.alpha == pytest.approx(reference)
    counts = ag.value_counts(labels["answer:P"], ag.item_codes(labels), sets)
    low, high = ag.interval(counts, "masi", resamples=100, seed=2, distance=distance)
    patterns, per = np.unique(counts, axis=0, return_counts=True)
    drawn = np.random.default_rng(2).multinomial(40, per / 40, size=100)
    slow = [
        krippendorff.alpha(
            value_counts=np.repeat(patterns, k, axis=0),
            value_domain=np.arange(len(sets)),
            level_of_measurement=metric,
        )
        for k in drawn
    ]
    assert (low, high) == pytest.approx(tuple(np.nanpercentile(slow, [2.5, 97.5])))


def test_one_set_everywhere_says_why_and_an_unanswered_choice_is_missing():
    same = _sets([("u1", "r0", ["b", "a"]), ("u1", "r1", ["a", "b"]), ("u2", "r0", [])])
    (got,) = ag.question_alphas(same, (MULTIPLE,))
    assert got.alpha is None and "every label is {a, b}" in got.problem
    assert same["answer:P"].isna().tolist() == [False, False, True]
    # an option since taken out of the schema is dropped from the set; none left: missing
    gone = _sets([("u1", "r0", ["a", "x"]), ("u1", "r1", ["x"])])
    assert gone["answer:P"].tolist()[0] == frozenset("a") and gone["answer:P"][1] is None


@pytest.mark.parametrize(("values", "top"), [(2, 1), (3, 4), (6, 50), (40, 3)])
def test_unique_rows_are_numpys_unique_rows_in_its_order(values, top):
    """The bootstrap's patterns in np.unique's order (so a seed draws the same resamples);
    40 values of 0..3 do not fit one number and take np.unique's own path."""
    counts = np.random.default_rng(values).integers(0, top + 1, size=(3000, values))
    patterns, per = ag.unique_rows(counts)
    expected, times = np.unique(counts, axis=0, return_counts=True)
    assert (patterns == expected).all() and (per == times).all()
