"""LoRA adapters on the pages (issue 59 items 1 and 2): Settings adds one by the same
function as ``core models add-adapter``; Monitor, Results, Dashboards and Compare show an
adapter as a model of its own. The adapters are written by hand (peft's layout, zero
weights): the pages read their names, never their weights."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.model_names import read_kept
from tests.support.lora import LAYER, make_adapter
from tests.support.pages import open_page, texts

pytestmark = pytest.mark.usefixtures("studio_home")
NAME = "ft:gpt-4o-mini:acme::support"


def add_on_settings(name: str, folder: Path | str, base: Path | None = None):
    """Settings with the form filled in and Add adapter clicked."""
    at = open_page("settings.py")
    at.text_input(key="adapter_name").set_value(name)
    at.text_input(key="adapter_folder").set_value(str(folder))
    if base is not None:
        at.selectbox(key="adapter_base").set_value(str(base))
    next(b for b in at.button if b.label == "Add adapter").click().run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def names_table(at) -> list[dict]:
    names = next(d.value for d in at.dataframe if list(d.value.columns) == ["name", "model"])
    return names.to_dict("records")


def test_settings_adds_an_adapter_on_its_base(default_model: Path, tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "support-v2", "elsewhere/base")  # its base given here
    at = add_on_settings(NAME, folder, default_model)
    assert not at.error, [e.value for e in at.error]
    assert f"{NAME}: LoRA adapter {folder} (rank 8) on {default_model.name}." in texts(at)
    assert names_table(at) == [{"name": NAME, "model": "support-v2"}]
    kept = read_kept()
    assert kept.names == {NAME: str(folder)}
    assert kept.bases == {str(folder): str(default_model)}


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("not-an-adapter", "is not an adapter: it has no adapter_config.json"),
        ("rank-0", "its rank (r) is 0; a LoRA adapter's is at least 1"),
        ("other-size", "takes 576 inputs"),
        ("no-weights", "has no adapter_model.safetensors: its weights are missing"),
        ("no-folder", "give the adapter's folder"),
    ],
)
def test_settings_says_why_an_adapter_is_refused_and_keeps_nothing(
    default_model: Path, tmp_path: Path, setup: str, words: str
) -> None:
    folder = tmp_path / setup
    if setup == "not-an-adapter":
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    elif setup == "rank-0":
        make_adapter(folder, default_model, rank=0)
    elif setup == "other-size":  # a larger Llama's q_proj: made for another base
        make_adapter(folder, default_model, shapes={f"{LAYER}.q_proj": (2048, 2048)})
    elif setup == "no-weights":
        make_adapter(folder, default_model, weights=False)
    at = add_on_settings(NAME, "" if setup == "no-folder" else folder, default_model)
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("Not added: "), errors
    assert words in texts(at)  # the words as written (the markdown escapes undone)
    assert "Traceback" not in texts(at)
    assert read_kept().names == {}
    assert names_table(at) == []


# -- each adapter a model of its own on the pages (issue 59 item 2) ---------------------------

TUNES = ("ft-a", "ft-b")
TOKENS = {"ft-a": 5, "ft-b": 7}  # the base's answers are 3 tokens


def adapter_job(home: Path, base: Path, tmp_path: Path, name: str = "mixed") -> str:
    """A finished job whose lines name the base and two adapters, two items each (metadata
    ``item_id`` q0 and q1): the worker writes each answer under the model that made it.
    ``ft-a``'s answer to q1 fails."""
    from tests.support.pages import job_in_home

    model_map = {base.name: str(base)}
    for tune in TUNES:
        model_map[tune] = str(make_adapter(tmp_path / name / tune, base))
    rows = []
    for model in (base.name, *TUNES):
        for item in ("q0", "q1"):
            failed = model == "ft-a" and item == "q1"
            rows.append(
                {
                    "custom_id": f"{model}-{item}",
                    "model": model,
                    "prompt": f"question {item}",
                    "metadata": {"item_id": item},
                    "answer": None if failed else f"{model} says {item}",
                    "tokens": TOKENS.get(model, 3),
                }
            )
    return job_in_home(home, rows, model=base, model_map=model_map, name=name)


def test_dashboards_count_and_price_each_adapter_as_a_model(
    studio_home: Path, default_model: Path, tmp_path: Path
) -> None:
    adapter_job(studio_home, default_model, tmp_path)
    at = open_page("dashboards.py")
    at.selectbox(key="dash_by").set_value("model").run()
    assert not at.exception, [e.message for e in at.exception]
    summary = next(d.value for d in at.dataframe if "requests" in d.value.columns)
    rows = {
        r["model"]: (r["requests"], r["succeeded"], r["failed"], r["tokens_out"])
        for r in summary.to_dict("records")
    }
    assert rows == {
        default_model.name: (2, 2, 0, 6),
        "ft-a": (2, 1, 1, 5),  # its failed line is the adapter's, not the job's models'
        "ft-b": (2, 2, 0, 14),
    }
    prices = at.data_editor(key="price_editor").value  # each model priced on its own
    assert list(prices["model"]) == ["*", default_model.name, "ft-a", "ft-b"]


def test_results_filter_on_an_adapter_shows_its_lines_and_their_cost(
    studio_home: Path, default_model: Path, tmp_path: Path
) -> None:
    from core.plan.pricing import ModelPrice, PriceTable, save_prices

    job_id = adapter_job(studio_home, default_model, tmp_path)
    save_prices(PriceTable(models={"ft-a": ModelPrice(output_per_1m=1_000_000.0)}))
    at = open_page("results.py", job_id=job_id)
    models = at.multiselect(key="f_model")
    assert sorted(models.options) == sorted([default_model.name, *TUNES])
    models.set_value(["ft-a"]).run()
    assert not at.exception, [e.message for e in at.exception]
    table = next(d.value for d in at.dataframe if "custom_id" in d.value.columns)
    assert sorted(table["custom_id"]) == ["ft-a-q0", "ft-a-q1"]
    assert "Cost of the 2 results in view" in texts(at)
    assert "Cost of the 2 results in view: 5.00 USD" in texts(at)  # 5 tokens at 1 USD each


def test_compare_puts_the_base_against_an_adapter_on_the_same_items(
    studio_home: Path, default_model: Path, tmp_path: Path
) -> None:
    job_id = adapter_job(studio_home, default_model, tmp_path)
    at = open_page("compare.py")
    at.radio(key="cmp_mode").set_value("slices").run()
    at.selectbox(key="cmp_job").set_value(job_id).run()
    at.selectbox(key="cmp_field").set_value("model").run()
    assert sorted(at.selectbox(key="cmp_va").options) == sorted([default_model.name, *TUNES])
    at.selectbox(key="cmp_va").set_value(default_model.name).run()
    at.selectbox(key="cmp_vb").set_value("ft-b").run()
    at.selectbox(key="cmp_key").set_value("metadata:item_id").run()
    assert not at.exception, [e.message for e in at.exception]
    pairs = next(d.value for d in at.dataframe if "answer_a" in d.value.columns)
    assert pairs[["key", "answer_a", "answer_b", "tokens_delta"]].to_dict("records") == [
        {"key": "q0", "answer_a": f"{default_model.name} says q0", "answer_b": "ft-b says q0",
         "tokens_delta": 4},
        {"key": "q1", "answer_a": f"{default_model.name} says q1", "answer_b": "ft-b says q1",
         "tokens_delta": 4},
    ]  # fmt: skip


def test_compare_two_jobs_on_the_same_custom_ids_base_against_adapter(
    studio_home: Path, default_model: Path, tmp_path: Path
) -> None:
    """The same file run on the base and on an adapter: two jobs paired on custom_id, and
    what differs between them names the two models."""
    from tests.support.pages import job_in_home

    tuned = make_adapter(tmp_path / "tuned", default_model)
    rows = [{"custom_id": f"q{i}", "prompt": f"question {i}", "answer": f"base {i}"}
            for i in range(3)]  # fmt: skip
    base_job = job_in_home(studio_home, rows, model=default_model, name="on-base")
    tuned_rows = [{**r, "model": "ft-a", "answer": f"tuned {i}"} for i, r in enumerate(rows)]
    tuned_job = job_in_home(studio_home, tuned_rows, model=default_model, name="on-adapter",
                            model_map={"ft-a": str(tuned)})  # fmt: skip
    at = open_page("compare.py")
    at.selectbox(key="cmp_a").set_value(base_job).run()
    at.selectbox(key="cmp_b").set_value(tuned_job).run()
    assert not at.exception, [e.message for e in at.exception]
    differ = next(d.value for d in at.dataframe if "setting" in d.value.columns)
    assert differ[differ["setting"] == "model"].to_dict("records") == [
        {"setting": "model", "A": default_model.name, "B": "ft-a"}  # what answered each
    ]
    pairs = next(d.value for d in at.dataframe if "answer_a" in d.value.columns)
    assert pairs[["key", "answer_a", "answer_b"]].to_dict("records") == [
        {"key": f"q{i}", "answer_a": f"base {i}", "answer_b": f"tuned {i}"} for i in range(3)
    ]


def test_monitor_shows_each_models_answers_and_tokens(
    studio_home: Path, default_model: Path, tmp_path: Path
) -> None:
    job_id = adapter_job(studio_home, default_model, tmp_path)
    at = open_page("monitor.py", job_id=job_id)
    table = next(d.value for d in at.dataframe if "answers" in d.value.columns)
    assert table.to_dict("records") == [
        {"model": default_model.name, "answers": 2, "prompt tokens": 10, "output tokens": 6},
        {"model": "ft-a", "answers": 1, "prompt tokens": 5, "output tokens": 5},
        {"model": "ft-b", "answers": 2, "prompt tokens": 10, "output tokens": 14},
    ]


def test_monitor_shows_no_model_table_for_a_job_of_one_model(
    studio_home: Path, default_model: Path
) -> None:
    from tests.support.pages import job_in_home

    job_id = job_in_home(studio_home, {"a": "yes", "b": "no"}, model=default_model)
    at = open_page("monitor.py", job_id=job_id)
    assert not [d for d in at.dataframe if "answers" in d.value.columns]
