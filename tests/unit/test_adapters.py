"""LoRA adapters as models (issue 59 items 1, 2, 4, 5): an adapter folder checked against
its base, named with ``core models add-adapter``, keyed for reuse by its own files, and
run on its base's engine. The adapters here are written by hand (peft's file layout, zero
weights): what is checked is their config and shapes. The engine runs a real one made
with peft in tests/engine/test_lora_engine.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.adapters import AdapterError, read_adapter
from core.check.engine_requests import ChatRequest
from core.model_names import add_adapter, studio_model_map
from core.reuse.keys import RequestKeys
from core.reuse.plan import ReusePlan
from core.run.engine import fit_to_requests
from core.run.outputs import Choice, Completion
from core.run.retry import result_line
from core.run.worker import _by_engine
from core.schemas import EngineConfig, JobSpec
from tests.support.cli import cli
from tests.support.lora import LAYER, make_adapter


def test_an_adapter_reads_its_base_from_its_config(default_model: Path, tmp_path: Path) -> None:
    adapter = read_adapter(make_adapter(tmp_path / "support-v2", default_model), name="sv2")
    assert (adapter.name, adapter.rank, adapter.base) == ("sv2", 8, str(default_model))


@pytest.mark.parametrize(
    ("setup", "words"),
    [
        ("not-an-adapter", "is not an adapter: it has no adapter_config.json"),
        ("rank-0", "its rank (r) is 0"),
        ("no-weights", "has no adapter_model.safetensors: its weights are missing"),
        ("other-architecture", "which SmolLM2-135M-Instruct (LlamaForCausalLM) does not have"),
        ("other-size", "takes 576 inputs"),
        ("other-outputs", "gives 192 outputs"),
        ("base-elsewhere", "is not a model folder here; give its base"),
    ],
)
def test_bad_adapters_are_refused_with_what_differs(
    default_model: Path, tmp_path: Path, setup: str, words: str
) -> None:
    folder = tmp_path / setup
    if setup == "not-an-adapter":
        folder.mkdir()
        (folder / "config.json").write_text("{}")
    elif setup == "rank-0":
        make_adapter(folder, default_model, rank=0)
    elif setup == "no-weights":
        make_adapter(folder, default_model, weights=False)
    elif setup == "other-architecture":  # GPT-2's fused attention
        make_adapter(
            folder, default_model, shapes={"base_model.model.h.0.attn.c_attn": (768, 2304)}
        )
    elif setup == "other-size":  # a larger Llama's q_proj
        make_adapter(folder, default_model, shapes={f"{LAYER}.q_proj": (2048, 2048)})
    elif setup == "other-outputs":  # v_proj given q_proj's outputs
        make_adapter(folder, default_model, shapes={f"{LAYER}.v_proj": (576, 576)})
    else:
        make_adapter(folder, "HuggingFaceTB/Some-Other-Model")
    with pytest.raises(AdapterError) as refused:
        read_adapter(folder)
    assert words in str(refused.value)


def test_an_adapter_on_a_base_of_another_architecture_is_refused(
    default_model: Path, embedding_model: Path, tmp_path: Path
) -> None:
    with pytest.raises(AdapterError, match=r"made on LlamaForCausalLM .* not on BertModel"):
        read_adapter(make_adapter(tmp_path / "a", default_model), base=embedding_model)


def test_add_adapter_names_it_for_lines(
    default_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    folder = make_adapter(tmp_path / "a", "elsewhere/SmolLM2-base")  # a base named nowhere
    result = cli("models", "add-adapter", "ft:gpt-4o-mini:org::x", str(folder), "--base",
                 default_model.name)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "rank 8" in result.stdout
    assert studio_model_map()["ft:gpt-4o-mini:org::x"] == str(folder)
    bad = cli("models", "add-adapter", "x", str(tmp_path), "--base", str(default_model))
    assert bad.returncode == 2
    assert "is not an adapter" in bad.stderr and "Traceback" not in bad.stderr


def _spec(default_model: Path, folder: Path, tmp_path: Path) -> JobSpec:
    from core.model_names import adapters_of

    add_adapter("sv2", folder, default_model, home=tmp_path)
    model_map = {"sv2": str(folder)}
    return JobSpec(
        job_id="j",
        created_at="",
        engine=EngineConfig(model=str(default_model)),
        model_map=model_map,
        adapters=adapters_of(model_map, home=tmp_path),
    )


def _chat(custom_id: str, model: str) -> ChatRequest:
    messages = [{"role": "user", "content": "hi"}]
    return ChatRequest(
        custom_id=custom_id, model=model, messages=messages, sampling={"max_tokens": 4}
    )


def test_adapter_lines_run_on_the_base_engine_with_lora(
    default_model: Path, tmp_path: Path
) -> None:
    spec = _spec(default_model, make_adapter(tmp_path / "a", default_model), tmp_path)
    base, tuned = _chat("1", "SmolLM2-135M-Instruct"), _chat("2", "sv2")
    plans = {str(default_model): ReusePlan("j", "x"), spec.model_map["sv2"]: ReusePlan("j", "x")}
    plans[str(default_model)].to_run.append(base)
    plans[spec.model_map["sv2"]].to_run.append(tuned)
    groups = _by_engine(spec, plans)
    assert list(groups) == [str(default_model)]  # one engine for both
    assert (base.adapter, tuned.adapter) == (None, spec.adapters[spec.model_map["sv2"]])
    engine = fit_to_requests(spec.engine, groups[str(default_model)], on_gpu=False)
    # One slot more than the adapters on CPU: a base request's slot, -1, is the last.
    assert (engine.max_loras, engine.max_lora_rank) == (2, 8)
    assert engine.lora_adapters == (spec.model_map["sv2"],)
    assert fit_to_requests(spec.engine, groups[str(default_model)], on_gpu=True).max_loras == 1
    assert fit_to_requests(spec.engine, [base], on_gpu=False).max_loras is None
    answer = Completion(prompt_tokens=3, choices=[Choice("x", "stop", 1)])
    assert result_line(tuned, "SmolLM2-135M-Instruct", answer)["response"]["body"]["model"] == "sv2"


def test_reuse_keys_include_the_adapter_files(default_model: Path, tmp_path: Path) -> None:
    folder = make_adapter(tmp_path / "a", default_model)
    spec = _spec(default_model, folder, tmp_path)
    tuned = RequestKeys(spec).identity(str(folder))
    assert tuned != RequestKeys(spec).identity(str(default_model))
    weights = folder / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # the adapter retrained: same shapes, other weights
    weights.write_bytes(bytes(data))
    assert RequestKeys(spec).identity(str(folder)) != tuned  # a new model


def test_the_check_counts_an_adapter_line_with_its_base(
    default_model: Path, tmp_path: Path
) -> None:
    from core.model_names import check_map

    folder = make_adapter(tmp_path / "a", "elsewhere/base")
    add_adapter("sv2", folder, default_model, home=tmp_path)
    assert check_map({"sv2": str(folder), "m": "/x"}, tmp_path) == {
        "sv2": str(default_model),
        "m": "/x",
    }
