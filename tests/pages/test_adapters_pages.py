"""LoRA adapters on the pages (issue 59 item 1): Settings adds one by the same function
as ``core models add-adapter``. The adapters are written by hand (peft's layout, zero
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

