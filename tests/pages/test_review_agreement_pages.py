"""Review's agreement section in AppTest (issue 44 item 3): Krippendorff's alpha per
question with its interval, each pair, the disagreements, and an owner's final label."""

from __future__ import annotations

import json

from core.config import data_paths
from core.human.label_schemas import set_schema
from core.store.db import Store
from core.store.results import ResultFilter
from core.store.review import Label, save_label
from core.store.samples import SampleDefinition, create_sample, sample_items
from tests.support.links import open_link
from tests.support.pages import job_in_home

TAB = "Progress & agreement"


def _labelled(
    studio_home,
    verdicts: dict[str, list[tuple[str, int | None]]],
    problems: dict[str, list[list[str]]] | None = None,
) -> str:
    """A sample of the job's four items, labelled by each reviewer in the sample's order
    (``verdicts[name][i]`` for item i + 1; ``problems``: their answers to a schema's
    multiple choice, Problems); its id."""
    job_id = job_in_home(studio_home)
    db = Store(data_paths().database)
    db.ingest_all(data_paths().jobs)
    definition = SampleDefinition(filter=ResultFilter(job_ids=[job_id]), size=4)
    sample_id = create_sample(db, "four", definition).sample_id
    items = sample_items(db, sample_id)
    keys = list(zip(items["job_id"], items["custom_id"], strict=True))
    if problems:
        set_schema(db.human_dir, sample_id, "multiple: Problems | made up, too long", "", "o")
    for who, given in verdicts.items():
        for n, ((job, cid), (verdict, score)) in enumerate(zip(keys, given, strict=False)):
            answers = {"Problems": problems[who][n]} if problems else {}
            save_label(db, job, cid, who, Label(verdict, score, answers=answers), sample_id)
    db.close()
    return sample_id


def _text(elements) -> str:
    """What the elements say, as a reader sees it (escaped text unescaped)."""
    return "\n".join(e.value.replace("\\", "").replace("\u2060", "") for e in elements)


def _captions(at) -> str:
    return _text(at.caption)


def test_agreement_shows_alpha_per_question_the_pairs_and_an_adjudication(studio_home):
    sample_id = _labelled(
        studio_home,
        {  # item 2 differs: ana pass, bob fail
            "ana": [("pass", 5), ("pass", 4), ("fail", 1), ("fail", 2)],
            "bob": [("pass", 4), ("fail", 2), ("fail", 1), ("fail", 2)],
        },
        {  # m: made up, t: too long
            "ana": [["made up"], ["too long"], ["made up", "too long"], []],
            "bob": [["made up"], ["made up"], ["made up"], ["too long"]],
        },
    )
    at = open_link("review.py", sample=sample_id, tab=TAB)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Verdict α"] == "0.53"  # 1 - 7 * 2 / (2 * 3 * 5), computed by hand
    assert "Score (1–5) α" in metrics
    # Problems by MASI on items 1-3 ({m} {m}; {t} {m}: 1; {m, t} {m}: 2/3); {m} x4, {t},
    # {m, t}: 1 - 5 * (2 + 4/3) / (2 * (4 + 4 * 2/3 + 2/3)) = 1 - 50/44
    assert metrics["Problems α"] == "-0.14"
    assert "multiple choices sets compared by the MASI distance" in _captions(at)
    assert "0.53 (95% CI" in _captions(at) and "over 4 items" in _captions(at)
    pairs = next(d.value for d in at.dataframe if "reviewer A" in d.value.columns)
    assert pairs[["reviewer A", "reviewer B", "both labelled"]].values.tolist() == [
        ["ana", "bob", 4]
    ]
    differ = next(d.value for d in at.dataframe if "adjudicated" in d.value.columns)
    assert list(differ["labels"]) == ["ana: pass (4); bob: fail (2)"]
    assert any(s.value == "Disagreements (1)" for s in at.subheader)
    assert "Enter your name above to set" in _text(at.info)  # no name yet

    at.text_input(key="reviewer").set_value("olga").run()
    at.radio[-1].set_value("fail")
    next(b for b in at.button if b.label == "Set final label").click().run()
    assert not at.exception
    saved = json.loads((studio_home / "human" / "adjudications.jsonl").read_text("utf-8"))
    assert (saved["verdict"], saved["by"]) == ("fail", "olga")
    differ = next(d.value for d in at.dataframe if "adjudicated" in d.value.columns)
    assert (differ["adjudicated"].iloc[0], differ["adjudicated_by"].iloc[0]) == ("fail", "olga")
    history = next(d.value for d in at.dataframe if "kind" in d.value.columns)
    assert list(zip(history["kind"], history["reviewer"], strict=True)) == [
        ("label", "ana"),
        ("label", "bob"),
        ("final label", "olga"),
    ]


def test_one_reviewer_or_one_value_everywhere_is_said_not_shown_as_a_figure(studio_home):
    sample_id = _labelled(studio_home, {"ana": [("pass", 3), ("pass", 3)]})
    at = open_link("review.py", sample=sample_id, tab=TAB)
    assert not [m for m in at.metric if "α" in m.label]
    assert "1 reviewer(s) labelled this sample: agreement needs two" in _text(at.info)
    db = Store(data_paths().database)
    items = sample_items(db, sample_id)
    for job, cid in zip(items["job_id"][:2], items["custom_id"][:2], strict=True):
        save_label(db, job, cid, "bob", Label("pass", 3), sample_id)
    db.close()
    at = open_link("review.py", sample=sample_id, tab=TAB)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Verdict α"] == "–" and metrics["Score (1–5) α"] == "–"
    said = _captions(at)
    assert "every label is pass: alpha is undefined" in said and "nan" not in said.lower()
    assert "every label is 3: alpha is undefined" in said
    assert any(s.value == "Disagreements (0)" for s in at.subheader)
