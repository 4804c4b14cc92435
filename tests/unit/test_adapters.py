"""LoRA adapters as models (issue 59 items 1, 2, 4, 5): an adapter folder checked against
its base, named with ``core models add-adapter``, keyed for reuse by its own files, and
run on its base's engine. The adapters here are written by hand (peft's file layout, zero
weights): what is checked is their config and shapes. The engine runs a real one made
with peft in tests/engine/test_lora_engine.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.adapters import AdapterError, read_adapter
from core.check import check_file
from core.check.engine_requests import ChatRequest
from core.config import data_paths
from core.model_names import add_adapter, line_models, studio_model_map
from core.reuse.keys import RequestKeys
from core.reuse.plan import ReusePlan
from core.run.engine import fit_to_requests
from core.run.outputs import Choice, Completion
from core.run.pending import Left, Pending, PlannedRequests
from core.run.retry import result_line
from core.run.worker import _by_engine
from core.schemas import EngineConfig, JobSpec
from tests.support.api import batch_file, sdk
from tests.support.cli import cli
from tests.support.jobs import request_line
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
    planned = PlannedRequests()
    planned.add(base, 1, str(default_model))
    planned.add(tuned, 2, spec.model_map["sv2"])
    plans = {str(default_model): ReusePlan("j", "x"), spec.model_map["sv2"]: ReusePlan("j", "x")}
    groups = _by_engine(spec, planned, plans)
    assert list(groups) == [str(default_model)]  # one engine for both
    rows = groups[str(default_model)]
    both = Pending(spec, tmp_path / "none.jsonl", planned, rows, Left(planned))
    adapters = [both.adapter(row) for row in both.rows]
    assert adapters == [None, spec.adapters[spec.model_map["sv2"]]]
    tuned.adapter = adapters[1]  # as the engine reads it (core.run.pending.Pending)
    engine = fit_to_requests(spec.engine, both.kinds(), on_gpu=False)
    # One slot more than the adapters on CPU: a base request's slot, -1, is the last.
    assert (engine.max_loras, engine.max_lora_rank) == (2, 8)
    assert engine.lora_adapters == (spec.model_map["sv2"],)
    assert fit_to_requests(spec.engine, both.kinds(), on_gpu=True).max_loras == 1
    both.rows = both.rows[:1]  # the base's request alone
    assert fit_to_requests(spec.engine, both.kinds(), on_gpu=False).max_loras is None
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


def _file(path: Path, *models: str) -> Path:
    """A batch file of one chat line per model name, the same prompt on each."""
    path.write_text("".join(request_line(f"r{i}", "Say hi", model=m) + "\n" for i, m in
                            enumerate(models, 1)))  # fmt: skip
    return path


def test_the_check_counts_an_adapter_line_with_its_base(
    default_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check itself (as Upload & check calls it, given the folders as mapped) counts
    an adapter's line with its base's tokenizer, as vLLM tokenizes it."""
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    folder = make_adapter(tmp_path / "a", "elsewhere/base")
    add_adapter("sv2", folder, default_model)
    assert line_models({"sv2": str(folder), "m": str(default_model)}).model_map == {
        "sv2": str(default_model),
        "m": str(default_model),
    }
    file = _file(tmp_path / "f.jsonl", default_model.name, "sv2")
    report = check_file(file, model_folder=default_model, model_map={"sv2": str(folder)})
    assert report.ok, report.problems
    assert report.by_local_model[str(default_model)]["lines"] == 2
    assert (
        report.prompt_tokens == 2 * check_file(file, model_folder=default_model).prompt_tokens // 2
    )


def test_an_adapter_with_its_own_tokenizer_is_counted_with_its_base(
    default_model: Path, embedding_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM (0.32) tokenizes an adapter's requests with its base's tokenizer, whatever the
    adapter folder ships: the check counts that, and says so where the folder ships one."""
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    folder = make_adapter(tmp_path / "own", default_model)
    for name in ("tokenizer.json", "tokenizer_config.json"):  # BERT's: another tokenizer
        shutil.copy(embedding_model / name, folder / name)
    base_only = check_file(_file(tmp_path / "b.jsonl", "base"), model_folder=default_model)
    report = check_file(
        _file(tmp_path / "a.jsonl", "own"),
        model_folder=default_model,
        model_map={"own": str(folder)},
    )
    assert report.ok, report.problems
    assert report.prompt_tokens == base_only.prompt_tokens
    notes = [p.message for p in report.problems if p.severity == "note"]
    assert any("'own' ships its own tokenizer" in n and "base's" in n for n in notes), notes


def _broken_adapters(default_model: Path, tmp_path: Path) -> dict[str, str]:
    """Names mapped to adapters that cannot run, each with words of its refusal."""
    gone = make_adapter(tmp_path / "gone", default_model)
    lost = make_adapter(tmp_path / "lost-config", default_model)
    add_adapter("ft:gone", gone, default_model)
    add_adapter("ft:lost", lost, default_model)
    shutil.rmtree(gone)  # mapped, then deleted
    (lost / "adapter_config.json").unlink()  # mapped, then no longer an adapter
    make_adapter(tmp_path / "rank-0", default_model, rank=0)
    make_adapter(tmp_path / "rank-600", default_model, rank=600)
    make_adapter(tmp_path / "no-weights", default_model, weights=False)
    make_adapter(
        tmp_path / "gpt2", default_model, shapes={"base_model.model.h.0.attn.c_attn": (768, 2304)}
    )
    (tmp_path / "no-adapter").mkdir()
    return {
        "ft:gone": f"adapter folder {gone} does not exist",
        "ft:lost": f"{lost} is not an adapter: it has no adapter_config.json",
        f"rank-0={tmp_path / 'rank-0'}": "its rank (r) is 0",
        f"rank-600={tmp_path / 'rank-600'}": "its rank 600 is above the engine's 512",
        f"no-weights={tmp_path / 'no-weights'}": "its weights are missing",
        f"gpt2={tmp_path / 'gpt2'}": "made for another architecture",
        f"no-adapter={tmp_path / 'no-adapter'}": "has no config.json",
    }


def test_the_check_names_each_line_whose_adapter_cannot_run(
    default_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Item 3 and 5: one line per broken adapter, beside a base line and a good adapter's;
    ``core check`` names each bad line with why and what to do, and ``core run`` refuses
    the file with the same lines before anything runs."""
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    add_adapter("ft:good", make_adapter(tmp_path / "good", default_model), default_model)
    broken = _broken_adapters(default_model, tmp_path)
    names = [key.split("=")[0] for key in broken]
    maps = [arg for key in broken if "=" in key for arg in ("--map", key)]
    file = _file(tmp_path / "f.jsonl", default_model.name, "ft:good", *names)
    checked = cli("check", str(file), "--no-tokens", *maps)
    assert checked.returncode == 1, checked.stderr
    assert "9 lines, 2 valid, 7 invalid" in checked.stdout
    for line, (name, words) in enumerate(zip(names, broken.values(), strict=True), 3):
        said = next(t for t in checked.stdout.splitlines() if t.startswith(f"  line {line}: "))
        assert f"error: body.model {name!r}" in said and words in said, said
        assert f"map {name!r} to another model or adapter" in said
    assert "line 1:" not in checked.stdout and "line 2:" not in checked.stdout
    counted = cli("check", str(file), "--json", *maps)  # the same with tokens counted
    problems = json.loads(counted.stdout)["problems"]
    assert [p["line"] for p in problems if p["severity"] == "error"] == [3, 4, 5, 6, 7, 8, 9]
    ran = cli("run", str(file), "-o", str(tmp_path / "out.jsonl"), *maps)
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert (
        "7 of 9 lines are invalid" in ran.stderr and "line 9: body.model 'no-adapter'" in ran.stderr
    )
    assert not (tmp_path / "home" / "jobs").exists() or not list(
        (tmp_path / "home" / "jobs").iterdir()
    )


def test_a_batch_naming_a_broken_adapter_fails_at_validation(
    api, keys, default_model: Path, tmp_path: Path
) -> None:
    """The Batch API's door: a studio name whose adapter lost its weights fails the batch,
    naming the line and the field, and no job is made."""
    folder = make_adapter(tmp_path / "a", default_model)
    add_adapter("ft:gpt-4o-mini:acme::x", folder, default_model)
    (folder / "adapter_model.safetensors").unlink()
    client = sdk(api, keys["alice"])
    lines = batch_file(request_line("a", "hi", model=default_model.name),
                       request_line("b", "hi", model="ft:gpt-4o-mini:acme::x"))  # fmt: skip
    file = client.files.create(file=("f.jsonl", lines), purpose="batch")
    batch = client.batches.create(
        input_file_id=file.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status == "failed"
    [error] = batch.errors.data
    assert (error.line, error.param, error.code) == (2, "body.model", "model_unusable")
    assert "its weights are missing" in error.message
    assert not list(data_paths().jobs.iterdir())


def test_an_adapter_on_another_base_than_the_jobs_is_named(
    default_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two adapters of different bases in one file: the line of the one whose base is not
    the job's model gets a warning naming its base; it runs (on that base's engine)."""
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    other = tmp_path / "models" / "OtherBase"  # the same weights under another name
    other.mkdir(parents=True)
    for entry in default_model.iterdir():
        (other / entry.name).symlink_to(entry)
    add_adapter("ft:mine", make_adapter(tmp_path / "mine", default_model), default_model)
    add_adapter("ft:theirs", make_adapter(tmp_path / "theirs", other), other)
    file = _file(tmp_path / "f.jsonl", "ft:mine", "ft:theirs")
    checked = cli("check", str(file), "--no-tokens")
    assert checked.returncode == 0, checked.stdout
    [warning] = [t for t in checked.stdout.splitlines() if t.startswith("  line ")]
    assert warning.startswith("  line 2: warning: body.model 'ft:theirs' is a LoRA adapter on")
    assert f"OtherBase ({other}), not on the job's model {default_model.name}" in warning
    assert "run the job on" in warning


def test_a_mapped_name_whose_folder_is_gone_is_not_run_on_the_jobs_model(
    default_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A name kept in models.json whose folder was deleted stays a name: the check refuses
    its lines rather than let them run on the job's model, and a file that does not name
    it is not refused for it."""
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    folder = make_adapter(tmp_path / "a", default_model)
    add_adapter("ft:x", folder, default_model)
    shutil.rmtree(folder)
    assert studio_model_map()["ft:x"] == str(folder)
    refused = check_file(_file(tmp_path / "f.jsonl", "ft:x"), model_map=studio_model_map())
    assert [(p.line, p.code) for p in refused.errors] == [(1, "model_unusable")]
    fine = check_file(_file(tmp_path / "g.jsonl", "other"), model_map=studio_model_map())
    assert fine.ok
