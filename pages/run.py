"""Run: choose the model and engine settings, see the estimate, and start the job."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import streamlit as st
from pydantic import ValidationError

from core.check import CheckReport, checked
from core.check.sensitive import policy_now
from core.config import reuse_default
from core.devices import gpu_count
from core.jobs.submit import (
    Refused,
    Submission,
    default_name,
    file_problems,
    planned_windows,
    submit,
)
from core.jobs.uploads import fetch_upload
from core.jobs.windows import Clock, WindowProblem, sentence, submission_notes
from core.plan.pricing import format_money, load_prices
from core.schemas import NAME_MAX, EngineConfig, JobDefaults, RaySettings, problems_of
from core.storage.s3 import S3Location, StorageError
from ui.estimate import estimate_metrics, reuse_note
from ui.handover import CheckedBatch, hand_to_run, handed_to_run
from ui.model_picker import model_picker
from ui.sign_in import signed_in_user
from ui.store import paths, through_app
from ui.text import escape


class ModelChoice(NamedTuple):
    """The model folder chosen, and the names Upload & check sent to other folders."""

    path: str
    model_map: dict[str, str]


class EngineChoices(NamedTuple):
    """The engine settings as the widgets give them (0 or "default": the engine's own)."""

    gpus: int  # found on this machine
    dtype: str
    max_model_len: int
    seed: int
    gpu_util: float
    tp: int
    quantization: str
    max_num_seqs: int
    max_batched: int
    prefix: str
    chunk_size: int
    shard_size: int

    def config(self, model_path: str) -> EngineConfig:
        return EngineConfig(
            model=str(model_path or ""),
            dtype=self.dtype,
            max_model_len=int(self.max_model_len) or None,
            gpu_memory_utilization=float(self.gpu_util),
            tensor_parallel_size=int(self.tp),
            max_num_seqs=int(self.max_num_seqs) or None,
            max_num_batched_tokens=int(self.max_batched) or None,
            enable_prefix_caching={"on": True, "off": False}.get(self.prefix),
            quantization=None if self.quantization == "none" else self.quantization,
            seed=int(self.seed),
        )


class Where(NamedTuple):
    """``spec.ray`` (None: this machine), and why the Ray settings cannot be used."""

    ray: RaySettings | None
    problems: list[str]


class InvalidLines(NamedTuple):
    """Whether the invalid lines are skipped, and whether Start is held back."""

    skip: bool
    blocked: bool


class RunChoices(NamedTuple):
    """Everything the form chose for the job."""

    name: str
    model: ModelChoice
    engine: EngineChoices
    defaults: JobDefaults
    where: Where
    output_uri: str
    reuse: bool
    run_windows: str
    keep_redactions: bool
    invalid: InvalidLines


def from_object_storage() -> None:
    """A batch file from object storage: the object is copied (streamed) into the uploads
    folder and becomes the file this page runs, checked like any other."""
    c1, c2 = st.columns([4, 1], vertical_alignment="bottom")
    uri = c1.text_input(
        "Batch file in object storage",
        placeholder="s3://bucket/key.jsonl",
        help="Endpoint, region and credentials come from the standard AWS variables "
        "(AWS_ENDPOINT_URL for MinIO or Ceph) or AWS_PROFILE, where the studio runs.",
        key="run_input_uri",
    )
    if c2.button("Fetch", disabled=not uri.strip(), key="run_fetch"):
        try:
            with st.spinner(f"Fetching {uri.strip()}…"):
                path = fetch_upload(paths().uploads, uri.strip())
        except StorageError as exc:
            st.error(escape(str(exc)), icon=":material/cloud_off:")
            return
        hand_to_run(CheckedBatch(path, uri.strip()))  # checked below, as any file is
        st.rerun()


def batch_to_run() -> CheckedBatch:
    """The batch Upload & check handed over; without one, the way to get one, and the page
    stops."""
    batch = handed_to_run()
    if batch is None:
        st.info("Check a batch file first; then come back here to run it.")
        st.page_link("pages/upload.py", label="Upload & check", icon=":material/upload_file:")
        from_object_storage()
        st.stop()
    return batch


def the_file(batch: CheckedBatch) -> CheckReport:
    """The file's report, and its name and counts."""
    # The report Upload & check made for this very file (same path, size and time), else a
    # structural check made once per file in this process: a click here never rechecks.
    report = batch.report_of_this_file() or checked(batch.path)
    st.write(f"**{escape(batch.name)}**: {report.valid} valid of {report.lines} lines")
    return report


def job_name(batch: CheckedBatch) -> str:
    """The name typed ("" for the default one, shown as the placeholder)."""
    return st.text_input(
        "Job name",
        max_chars=NAME_MAX,
        placeholder=default_name(batch.path, batch.name),
        help="What the job is called on every page; left empty, it is named after its file "
        "(and prompt version). It can be renamed later on Jobs.",
        key="run_job_name",
    )


def model_choice(batch: CheckedBatch) -> ModelChoice:
    """The model, the checked one offered first, and the mapping Upload & check made."""
    model_path = model_picker("Model", "model_choice", path_key="model_path", preferred=batch.model)
    # Names the user sent to another model on Upload & check (an A/B test in one job).
    model_map = batch.mapped_elsewhere()
    if model_map:
        st.caption(
            "Model mapping from Upload & check: "
            + ", ".join(f"`{name}` → {Path(folder).name}" for name, folder in model_map.items())
            + "; every other line runs on the model above, each model loaded once."
        )
    return ModelChoice(model_path, model_map)


def engine_settings() -> EngineChoices:
    """The engine: dtype, lengths, seed, GPU memory, parallelism, quantization, batching."""
    gpus = gpu_count()
    with st.expander("Engine settings", expanded=False):
        st.caption(f"{gpus} GPU(s) found." if gpus else "No GPU found: the engine runs on the CPU.")
        c1, c2, c3 = st.columns(3)
        dtype = c1.selectbox("dtype", ["auto", "bfloat16", "float16", "float32"], key="dtype")
        max_model_len = c2.number_input(
            "Max model length (0 = model's)", 0, 1_048_576, 0, key="max_model_len"
        )
        seed = c3.number_input("Seed", 0, 2**31 - 1, 0, key="engine_seed")
        c1, c2, c3 = st.columns(3)
        gpu_util = c1.slider(
            "GPU memory utilisation", 0.1, 1.0, 0.9, 0.05, key="gpu_util", disabled=not gpus
        )
        tp = c2.number_input("Tensor parallel size", 1, 64, 1, key="tp")
        quantization = c3.selectbox(
            "Quantization", ["none", "fp8", "awq", "gptq", "bitsandbytes"], key="quantization"
        )
        c1, c2, c3 = st.columns(3)
        max_num_seqs = c1.number_input(
            "Max concurrent sequences (0 = default)", 0, 4096, 0, key="max_num_seqs"
        )
        max_batched = c2.number_input(
            "Max batched tokens (0 = default)", 0, 1_048_576, 0, key="max_batched"
        )
        prefix = c3.selectbox("Prefix caching", ["default", "on", "off"], key="prefix")
        chunk_size, shard_size = work_units()
    return EngineChoices(
        gpus=gpus,
        dtype=dtype,
        max_model_len=max_model_len,
        seed=seed,
        gpu_util=gpu_util,
        tp=tp,
        quantization=quantization,
        max_num_seqs=max_num_seqs,
        max_batched=max_batched,
        prefix=prefix,
        chunk_size=chunk_size,
        shard_size=shard_size,
    )


def work_units() -> tuple[int, int]:
    """How many requests are in the engine at once, and how many make a shard."""
    chunk_size = st.number_input(
        "Requests inside the engine at once (0 = its max concurrent sequences)",
        0,
        1_000_000,
        0,
        key="chunk_size",
    )
    shard_size = st.number_input(
        "Requests per shard (the unit of progress and of a retry)",
        1,
        10_000_000,
        10_000,
        key="shard_size",
    )
    return int(chunk_size), int(shard_size)


def job_defaults(defaults: JobDefaults) -> JobDefaults:
    """The defaults for fields a request leaves out, Upload & check's offered first."""
    with st.expander("Defaults for fields a request leaves out"):
        c1, c2, c3 = st.columns(3)
        max_tokens = c1.number_input(
            "Max output tokens", 1, 1_000_000, defaults.max_tokens, key="default_max_tokens"
        )
        temperature = c2.number_input(
            "Temperature", 0.0, 2.0, defaults.temperature, step=0.1, key="default_temperature"
        )
        top_p = c3.number_input("Top p", 0.01, 1.0, defaults.top_p, step=0.05, key="default_top_p")
    return JobDefaults(
        max_tokens=int(max_tokens), temperature=float(temperature), top_p=float(top_p)
    )


def where_to_run() -> Where:
    """This machine, or a Ray cluster (core/run/ray_cluster.py): ``spec.ray`` and problems."""
    import json

    from core.devices import ray_installed
    from core.run.ray_cluster import ray_settings

    where = st.radio(
        "Where to run", ["This machine", "Ray cluster"], horizontal=True, key="where_to_run"
    )
    if where == "This machine":
        return Where(None, [])
    if not ray_installed():
        return Where(None, ["Ray is not installed here: pip install -r requirements-ray.txt"])
    st.caption(
        "Each replica loads the model once and runs its share of the shards. The model "
        "folder must exist at the same path on every node (shared file system or a copy)."
    )
    c1, c2, c3, c4 = st.columns(4)
    address = c1.text_input("Address (local starts one here)", "local", key="ray_address")
    replicas = c2.number_input("Replicas", 1, 1024, 1, key="ray_replicas")
    gpus = c3.number_input("GPUs per replica (tensor parallel)", 0, 64, 0, key="ray_gpus")
    cpus = c4.number_input("CPUs per replica", 0.0, 512.0, 1.0, step=1.0, key="ray_cpus")
    raw = st.text_input(
        'Custom resources per replica (JSON, e.g. {"slot": 1})', "{}", key="ray_res"
    )
    try:
        resources = json.loads(raw or "{}")
        assert isinstance(resources, dict)
    except (ValueError, AssertionError):
        return Where(None, ['custom resources must be a JSON object such as {"slot": 1}'])
    try:
        return Where(ray_settings(address, int(replicas), int(gpus), float(cpus), resources), [])
    except ValidationError as exc:
        return Where(None, [f"Ray settings: {problem}" for problem in problems_of(exc)])


def results_destination() -> str:
    """Where, beside the job folder, the results are also written ("" for nowhere)."""
    return st.text_input(
        "Also write the results to (optional)",
        placeholder="s3://bucket/key.jsonl",
        help="When the job ends, its worker writes every request's final result there in input "
        "order, and the failed ones beside it (KEY.errors.jsonl); the results stay in the job "
        "folder and on every page either way.",
        key="run_output_uri",
    ).strip()


def reuse_answers() -> bool:
    """Whether deterministic requests take the answers earlier jobs already made."""
    return st.checkbox(
        "Reuse answers already made",
        value=reuse_default(),  # on unless BATCH_STUDIO_REUSE=0 (core/config.py)
        help="A request at temperature 0 or with a seed, and every embeddings, score or rerank "
        "request, that an earlier job ran on the same model and settings takes that answer "
        "instead of running again, and a request repeated in this file runs once. Off: every "
        "request runs on the engine.",
        key="run_reuse",
    )


def keep_redactions() -> bool:
    """Under the studio's redact policy, whether the job keeps what was replaced."""
    if policy_now(paths().home)[0] != "redact":
        return False
    return st.checkbox(
        "Keep what redaction replaces",
        value=False,
        help="The studio redacts sensitive data: the engine reads placeholders such as "
        "[EMAIL_1]. Ticked, the job's folder keeps each placeholder with the value it stands "
        "for (redactions.json), so that answers can be mapped back; unticked, they are kept "
        "nowhere.",
        key="run_keep_redactions",
    )


def run_windows_field() -> str:
    """The weekly hours the job may run in ("": its owner's or the studio's default)."""
    return st.text_input(
        "Run windows (optional)",
        placeholder="weekdays 20:00-07:00, weekends all day",
        help="The hours the job may run in, in the studio's time zone (Settings). Outside them "
        "it waits, queued, and starts by itself when one opens. Empty: your default windows or "
        "the studio's (Settings); any: any time.",
        key="run_windows",
    ).strip()


def windows_section(batch: CheckedBatch, choices: RunChoices) -> None:
    """When the job would run, and a completion window its run windows cannot meet, said
    before Start (as submit says them: one rule)."""
    planned = submission(batch, choices)
    try:
        windows = planned_windows(planned, paths().home)
    except WindowProblem as exc:
        st.error(escape(f"run windows: {exc}"), icon=":material/block:")
        return
    seconds = (batch.estimate or {}).get("seconds")
    notes = submission_notes(windows, planned.completion_window_hours, seconds, Clock().now())
    for note in notes:
        if note.startswith("warning: "):
            st.warning(escape(sentence(note.removeprefix("warning: "))), icon="⚠️")
        else:
            st.info(escape(sentence(note)), icon=":material/schedule:")


def invalid_lines(report: CheckReport) -> InvalidLines:
    """What Start would refuse, and the choice to run only the valid lines."""
    skip_invalid = False
    # What Start would refuse even when the invalid lines are skipped (a repeated id) is said
    # now, by the rule Start applies, and running the valid lines is not offered then.
    refusals = file_problems(report, skip_invalid=True)
    for problem in refusals:
        st.error(escape(problem), icon=":material/block:")
    if report.invalid and not refusals:
        skip_invalid = st.checkbox(
            f"Run the {report.valid} valid lines; the {report.invalid} invalid ones get an "
            "error result",
            key="skip_invalid",
        )
    blocked = bool(refusals) or bool(report.invalid and not skip_invalid)
    return InvalidLines(skip_invalid, blocked)


def estimate_section(batch: CheckedBatch, report: CheckReport, choices: RunChoices) -> None:
    """The estimate made on Upload & check for this file, if one was, and what answers
    already made would save with the settings chosen here (a dtype or a length changes
    which answers match), keyed from the digests the file's check (``report``) kept."""
    estimate = batch.estimate
    if not estimate:
        st.caption("The estimate (tokens, time, cost) is shown on Upload & check for the file.")
    else:
        st.subheader("Estimate")
        estimate_metrics(estimate)
        if estimate["over_budget"]:
            currency = estimate.get("currency", "USD")
            budget = format_money(estimate["budget"], currency)
            st.warning(f"The expected cost is over the budget of {escape(budget)}.")
    if choices.model.path:
        reuse_note(report, submission(batch, choices), load_prices())


def submission(batch: CheckedBatch, choices: RunChoices) -> Submission:
    """The job the form describes: what Start submits and the reuse forecast assumes."""
    return Submission(
        engine=choices.engine.config(choices.model.path),
        defaults=choices.defaults,
        skip_invalid=choices.invalid.skip,
        chunk_size=int(choices.engine.chunk_size) or None,
        source=batch.name,
        model_map=choices.model.model_map,
        shard_size=int(choices.engine.shard_size),
        ray=choices.where.ray,
        owner=signed_in_user(),
        name=choices.name if choices.name.strip() else None,
        output_path=choices.output_uri or None,
        reuse=choices.reuse,
        run_windows=choices.run_windows or None,
        keep_redactions=choices.keep_redactions,
    )


def start_button(batch: CheckedBatch, choices: RunChoices) -> None:
    """Start: the job submitted, then Monitor opens on it; a refusal says every reason."""
    if not st.button("Start run", type="primary", disabled=choices.invalid.blocked):
        return
    try:
        if choices.where.problems:
            raise Refused(choices.where.problems)
        if choices.output_uri:
            try:
                S3Location.parse(choices.output_uri)
            except ValueError as exc:
                raise Refused([f"results: {exc}"]) from None
        job = submit(
            batch.path, submission(batch, choices), paths().jobs, gpus=choices.engine.gpus
        ).job
    except Refused as refused:
        for problem in refused.problems:
            st.error(escape(problem), icon=":material/block:")
        st.stop()
    st.session_state["job_id"] = job.job_id
    st.switch_page("pages/monitor.py")


def another_file() -> None:
    """Another batch file, fetched from object storage, to run instead."""
    with st.expander("Run another file, from object storage (S3)"):
        from_object_storage()


through_app()
st.title("Run")
batch = batch_to_run()
report = the_file(batch)
# The form's sections, top to bottom (keyword arguments are evaluated in order).
choices = RunChoices(
    name=job_name(batch),
    model=model_choice(batch),
    engine=engine_settings(),
    defaults=job_defaults(batch.defaults),
    where=where_to_run(),
    output_uri=results_destination(),
    reuse=reuse_answers(),
    run_windows=run_windows_field(),
    keep_redactions=keep_redactions(),
    invalid=invalid_lines(report),
)
estimate_section(batch, report, choices)
windows_section(batch, choices)
start_button(batch, choices)
another_file()
