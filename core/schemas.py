"""The typed models of what goes to disk or between processes (pydantic).

``job.json`` is a :class:`JobSpec` (with its :class:`EngineConfig`, :class:`JobDefaults`
and optional :class:`RaySettings`), ``status.json`` a :class:`JobStatus`. The UI, the CLI
and the worker read and write them only through these models: field constraints say what
is valid, JSON goes in and out through pydantic, and a file written by an older version
still loads (unknown keys are ignored, missing ones take their defaults).

These models sit below every subpackage (they import nothing of ``core``), so the check,
the job folder, the worker and the store can all share them without an import cycle.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from core.config import default_embedding_model_dir
from core.endpoints import EMBEDDINGS_URL

STALE_AFTER_SECONDS = 30.0  # a heartbeat older than this means the worker is gone


class Model(BaseModel):
    """Base of the stored models: unknown keys (from a newer or older version) are ignored."""

    model_config = ConfigDict(extra="ignore")


class FrozenModel(Model):
    model_config = ConfigDict(extra="ignore", frozen=True)


def problem_message(item: Mapping[str, Any]) -> str:
    """One of a validation error's ``errors()`` as the words after its field's name: our
    own validators' sentences as written, pydantic's with their capital lowered."""
    message = str(item["msg"])
    if item["type"] == "value_error":
        return message.removeprefix("Value error, ")
    return message[:1].lower() + message[1:]


def problems_of(error: ValidationError) -> list[str]:
    """A pydantic validation error as sentences a person can act on, one per field (the
    one way every entry point words one; the rules file adds its lines to the same words)."""
    found = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or "value"
        found.append(f"{where}: {problem_message(item)} (got {item.get('input')!r})")
    return found


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


# -- what a job runs ----------------------------------------------------------------------


class Bounds(NamedTuple):
    """The range a sampling field may take: the batch check (``core.check.sampling``), its
    fast path (``core.check.fast_path``) and the job defaults below all read it here."""

    low: float
    high: float | None = None
    low_open: bool = False  # ``low`` itself is out (top_p > 0)

    def constraints(self) -> dict[str, float]:
        """As pydantic's and msgspec's keywords (``ge`` or ``gt``, and ``le``)."""
        found = {"gt" if self.low_open else "ge": self.low}
        return found if self.high is None else {**found, "le": self.high}


SAMPLING_BOUNDS: dict[str, Bounds] = {
    "max_tokens": Bounds(1),
    "min_tokens": Bounds(0),
    "temperature": Bounds(0, 2),
    "top_p": Bounds(0, 1, low_open=True),
    "top_k": Bounds(-1),  # -1: every token
    "min_p": Bounds(0, 1),
    "presence_penalty": Bounds(-2, 2),
    "frequency_penalty": Bounds(-2, 2),
    "repetition_penalty": Bounds(0, 2, low_open=True),
    "seed": Bounds(-(2**63), 2**63 - 1),
    "n": Bounds(1, 16),
}


class JobDefaults(FrozenModel):
    """Values used where a body leaves a field out; set once per job (the same bounds as a
    body's own fields)."""

    max_tokens: int = Field(256, **SAMPLING_BOUNDS["max_tokens"].constraints())
    temperature: float = Field(
        1.0, allow_inf_nan=False, **SAMPLING_BOUNDS["temperature"].constraints()
    )
    top_p: float = Field(1.0, allow_inf_nan=False, **SAMPLING_BOUNDS["top_p"].constraints())


Dtype = Literal["auto", "float32", "float16", "bfloat16"]


class EngineConfig(FrozenModel):
    """How to build the engine; stored in ``job.json`` so a job can be rerun alike.

    ``None`` leaves a setting to vLLM's default for the device. Settings that depend on the
    machine (enough GPUs for the tensor parallel size) are checked by
    ``core.devices.gpu_problems``.
    """

    model: str
    dtype: Dtype = "auto"
    max_model_len: int | None = Field(None, ge=1)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)
    tensor_parallel_size: int = Field(1, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    enable_prefix_caching: bool | None = None
    # None: vLLM's default (chunked prefill on); see core.run.engine.fit_to_requests.
    enable_chunked_prefill: bool | None = None
    quantization: str | None = None
    seed: int = 0
    cpu_kv_cache_gib: float = Field(1.0, gt=0)
    # LoRA on for these adapter folders, this many slots of at most this rank (None: off);
    # set from a job's adapters by core.run.engine.fit_to_requests.
    lora_adapters: tuple[str, ...] = ()
    max_loras: int | None = Field(None, ge=1)
    max_lora_rank: int | None = Field(None, ge=1)

    @property
    def model_name(self) -> str:
        """The name written into output lines: the model folder's name."""
        return Path(self.model).name or self.model


# Ray Data's executor needs a driver on a cluster node; through Ray Client it stops at
# once ("'Worker' object has no attribute 'core_worker'", Ray 2.60, tried 2026-12-02).
RAY_CLIENT_REFUSED = (
    "a Ray Client address (ray://) cannot run a job: Ray Data needs its driver on a node of "
    "the cluster. Join this machine as a node that offers nothing (ray start --address "
    "HEAD:6379 --num-cpus 0 --num-gpus 0) and use auto, give HEAD:6379, or submit the job "
    "with ray job submit (docs/ray.md)"
)


class RaySettings(FrozenModel):
    """Where and how wide a job runs on a Ray cluster; ``job.json``'s ``ray``.

    ``gpus_per_replica`` is also each replica's tensor parallel size, so a whole number.
    """

    address: Annotated[str, Field(min_length=1)] = "local"
    replicas: int = Field(1, ge=1)
    gpus_per_replica: float = Field(0, ge=0)
    cpus_per_replica: float = Field(1, ge=0)
    resources: dict[str, Annotated[float, Field(ge=0)]] = Field(default_factory=dict)

    @field_validator("address")
    @classmethod
    def _address(cls, value: str, info: ValidationInfo) -> str:
        value = value.strip()
        if not value:
            raise ValueError("give the Ray cluster's address (local starts a local instance)")
        # Checked for a new job only (context "new"): a job.json kept from before reads.
        if (info.context or {}).get("new") and value.lower().startswith("ray://"):
            raise ValueError(RAY_CLIENT_REFUSED)
        return value

    @field_validator("gpus_per_replica")
    @classmethod
    def _whole_gpus(cls, value: float) -> float:
        if value != int(value):
            raise ValueError("GPUs per replica is the tensor parallel size: a whole number")
        return value


# -- a job's name -----------------------------------------------------------------------

NAME_MAX = 120  # characters of a job's name
_HIDDEN = {"Cc", "Cf", "Cs", "Zl", "Zp"}  # control, format, surrogate, line/paragraph breaks
_JOINER = "\u200d"  # the zero-width joiner of emoji sequences stays


def tidy_name(text: str) -> str:
    """A job's name as it is kept: control and format characters (newlines, tabs, escapes,
    direction overrides) become spaces, runs of space one, and the ends are stripped."""
    shown = "".join(
        " " if unicodedata.category(c) in _HIDDEN and c != _JOINER else c for c in str(text)
    )
    return " ".join(shown.split())


def check_name(text: str) -> str:
    """A name a person gave a job, tidied (:func:`tidy_name`).

    Raises:
        ValueError: the name is empty or longer than :data:`NAME_MAX` characters.
    """
    name = tidy_name(text)
    if not name:
        raise ValueError("a job's name cannot be empty; type a few words that say what it is")
    if len(name) > NAME_MAX:
        raise ValueError(
            f"a job's name has at most {NAME_MAX} characters; this one has {len(name)}"
        )
    return name


def read_name(text: str) -> str:
    """A stored name as it is shown (tidied and cut to :data:`NAME_MAX`; never refused:
    a hand-edited file must not make its job unreadable)."""
    return tidy_name(text)[:NAME_MAX].rstrip()


def job_label(job_id: str, name: str = "") -> str:
    """How a job is named wherever one is picked or shown: its name and the end of its id
    (``tickets, prompt v1 · e41d7b``), or its id alone when it has no name."""
    name = read_name(name)
    return f"{name} · {job_id.rsplit('_', 1)[-1]}" if name else job_id


# A phone number written without a +country code is read as this region's where the
# studio sets none (core/check/sensitive.py; what every studio did before it could).
DEFAULT_PHONE_REGION = "US"
JUDGE_CHECK = r"judge_[0-9a-f]{6}"  # a judge's name among the checks (no rule takes one)


class JudgeLink(FrozenModel):
    """What a judge job grades (``job.json``'s ``judge``; core/qa/judge.py makes it).

    Attributes:
        kind: ``verdict`` (each line grades one result of ``graded[0]``: pass/fail, score,
            reason) or ``pairwise`` (each line compares ``graded[0]``'s answer, side A, with
            ``graded[1]``'s, side B, for the same key: ``on``).
        graded: the job(s) graded (a pairwise judge of two slices of one job: it twice).
        check: the name its verdicts take among the graded job's checks.
        split: a pairwise judge of two slices: the field they are slices of (``variant``,
            ``model``, ``metadata:KEY``; core.store.compare.Side); "" for two whole jobs.
        values: with ``split``, side A's value of it and side B's.
        on: what the pairs match on (``custom_id``, or a slice's key such as ``item``).
    """

    kind: Literal["verdict", "pairwise"] = "verdict"
    graded: list[str] = Field(min_length=1, max_length=2)
    check: str = ""
    split: str = ""
    values: list[str] = Field(default_factory=list, max_length=2)
    on: str = "custom_id"


class BatchOrigin(FrozenModel):
    """What a job made through the Batch API (core/api/) was asked for, in OpenAI's terms,
    and which API's dialect made it (both serve every job: core/api/message_batches.py)."""

    input_file_id: str = ""  # "": none uploaded (an Anthropic batch sends its requests inline)
    endpoint: str
    completion_window: str = "24h"
    output_expires_after_seconds: int | None = None  # its result files expire then
    api: Literal["openai", "anthropic"] = "openai"  # /v1/batches or /v1/messages/batches


class Adapter(FrozenModel):
    """A LoRA adapter a job runs (``job.json``'s ``adapters``, by its folder), checked
    against its base by ``core.adapters.read_adapter``."""

    name: str  # the name its answers carry in output lines
    folder: str
    base: str  # the base model folder whose engine runs it
    rank: int = Field(ge=1)


class JobSpec(Model):
    """What a job runs; ``job.json``, written once when the job is submitted."""

    job_id: str
    created_at: str
    name: str = ""  # what people call the job ("": none; shown by its id). See JobFolder.name
    source: str = ""
    engine: EngineConfig
    defaults: JobDefaults = Field(default_factory=JobDefaults)
    skip_invalid: bool = False
    chunk_size: int | None = Field(None, ge=1)  # requests inside the engine at once
    completion_window_hours: float | None = 24.0
    shard_size: int = Field(10_000, ge=1)  # requests per shard: the unit of progress and retry
    input_sha256: str = ""
    input_lines: int = 0
    output_path: str | None = None  # where `python -m core run` writes the combined file
    model_map: dict[str, str] = Field(default_factory=dict)  # body.model -> model folder
    # The LoRA adapters among model_map's folders, by folder: they run on their base's engine.
    adapters: dict[str, Adapter] = Field(default_factory=dict)
    # The embedding model /v1/embeddings lines run on (None: the built-in one).
    embedding_model: str | None = None
    ray: RaySettings | None = None  # a Ray cluster to run on (core/run/ray_cluster.py)
    provenance: dict[str, Any] = Field(default_factory=dict)
    judge: JudgeLink | None = None  # a judge job: the job(s) its answers grade
    metadata: dict[str, str] = Field(default_factory=dict)  # the submitter's labels (Batch API)
    batch: BatchOrigin | None = None  # a job made through the Batch API: its request
    # The urls of its lines (e.g. /v1/embeddings), recorded when it was submitted: what
    # kind of job it is ([]: a job made before they were recorded).
    endpoints: list[str] = Field(default_factory=list)
    # Deterministic requests take answers the studio already computed (core/reuse); off,
    # every request runs on the engine.
    reuse: bool = True
    # The weekly hours it may run in, in the text form of core/jobs/windows.py, read in
    # ``run_windows_zone`` ("": any time); checked when it was submitted.
    run_windows: str = ""
    run_windows_zone: str = "UTC"
    # The studio's policy for sensitive data was ``redact`` when it was submitted: the worker
    # replaces them by placeholders in what the engine reads (core/check/redaction.py), and
    # keeps what it replaced (``redactions.json``) only with ``keep_redactions``.
    redact: bool = False
    keep_redactions: bool = False
    # The region phone numbers without a +country code were read as by the submission's
    # check: the worker's redaction reads them alike (a job made before it: the default's).
    phone_region: str = DEFAULT_PHONE_REGION

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return read_name(value)

    @property
    def owner(self) -> str | None:
        """Whose the job is: the name of the API key that made it, else the system user
        who did (the app, the CLI, the inbox, a key-less local client)."""
        owner = self.provenance.get("owner")
        return owner if isinstance(owner, str) else None

    @property
    def owner_key(self) -> str | None:
        """The id of the API key that made the job (core/api/keys.py), which owns it in
        the API; None when no key did."""
        key = self.provenance.get("owner_key")
        return key if isinstance(key, str) else None

    @property
    def origin(self) -> str:
        """Its owner and metadata in one line (``owner alice · team=support``), shown
        wherever a job is picked; "" when it has neither."""
        parts = [f"owner {self.owner}"] if self.owner else []
        if self.metadata:
            parts.append(", ".join(f"{k}={v}" for k, v in self.metadata.items()))
        return " · ".join(parts)

    @property
    def embedding_folder(self) -> str:
        """The folder embeddings lines run on unless their ``body.model`` is mapped."""
        return self.embedding_model or str(default_embedding_model_dir())

    @property
    def embeds(self) -> bool:
        """Some of its lines make vectors."""
        return EMBEDDINGS_URL in self.endpoints or self.embedding_model is not None

    @property
    def embeds_only(self) -> bool:
        """Every line makes vectors: no answers, no finish reasons, no output tokens."""
        return bool(self.endpoints) and set(self.endpoints) == {EMBEDDINGS_URL}

    def model_names(self) -> list[str]:
        """The models its lines run on, as pages name the job's model: the engine's for
        text, the embedding model's for vectors (and models ``body.model`` maps to)."""
        names = [] if self.embeds_only else [self.engine.model_name]
        names += [self.answer_name(folder) for folder in self.model_map.values()]
        if self.embeds:
            names.append(Path(self.embedding_folder).name)
        return list(dict.fromkeys(names))

    @property
    def vectors_folder(self) -> str:
        """The model folder its vectors came from: the embedding model; for a job made
        before kinds were recorded without one, its engine's."""
        return self.embedding_folder if self.embeds else self.engine.model

    def answer_name(self, folder: str) -> str:
        """The model name the answers made on ``folder`` carry: an adapter's own name, else
        the model folder's."""
        adapter = self.adapters.get(folder)
        return adapter.name if adapter else Path(folder).name

    def answer_names(self) -> dict[str, str]:
        """Each mapped ``body.model`` -> the model name its answers carry (an adapter's own
        name): what a line that failed, and so carries no model, is counted under."""
        return {name: self.answer_name(folder) for name, folder in self.model_map.items()}

    @property
    def unmapped_name(self) -> str | None:
        """The model a line whose ``body.model`` is mapped nowhere runs on: the engine's,
        or the embedding model's in a job of vectors only; None in a job of both kinds
        (which one depends on the line's endpoint)."""
        if self.embeds_only:
            return Path(self.embedding_folder).name
        return None if self.embeds else self.engine.model_name

    def engine_folder(self, folder: str) -> str:
        """The model folder whose engine runs what ``folder`` answers: an adapter's base."""
        adapter = self.adapters.get(folder)
        return adapter.base if adapter else folder

    def on_model(self, folder: str) -> JobSpec:
        """The same job with its engine on another model folder (one group of an A/B job)."""
        engine = self.engine.model_copy(update={"model": folder})
        return self.model_copy(update={"engine": engine})


# -- where a job stands ---------------------------------------------------------------------


class JobState(StrEnum):
    """A job's states, after OpenAI's batch states; ``interrupted`` is never stored: it is
    how a job whose worker died shows (see :attr:`JobStatus.interrupted`)."""

    CREATED = "created"
    # Over an approval threshold (core/jobs/approval.py): no worker takes it until a person
    # approves it (then queued) or rejects it (then failed, with the reason).
    AWAITING_APPROVAL = "awaiting_approval"
    QUEUED = "queued"
    LOADING = "loading"
    RUNNING = "running"
    CANCELLING = "cancelling"  # a cancel is stopping the engine
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


FINAL_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.EXPIRED}
)
WAITING_STATES = frozenset({JobState.CREATED, JobState.QUEUED})
# Not started and not for a worker to take: held until a person decides (no pid, no heartbeat).
HELD_STATES = frozenset({JobState.AWAITING_APPROVAL})
COMPLETED_WITH_ERRORS = "completed with errors"
AWAITING_APPROVAL = "awaiting approval"


class JobStatus(Model):
    """Where a job stands; ``status.json``, replaced atomically by the worker."""

    model_config = ConfigDict(extra="ignore", validate_assignment=True)

    state: JobState = JobState.QUEUED
    total: int = 0
    done: int = 0
    succeeded: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    embedded: int = 0  # inputs that got their vector (embeddings lines' texts)
    pid: int | None = None
    started_at: str | None = None
    heartbeat_at: float | None = None
    finished_at: str | None = None
    model_load_seconds: float | None = None
    first_result_seconds: float | None = None
    elapsed_seconds: float | None = None
    message: str = ""
    error: str | None = None
    # [{"state", "at"}], and {"state", "at", "note"} for what happened within a state
    history: list[dict[str, str]] = Field(default_factory=list)
    retry: bool = False  # also rerun failed requests when the worker takes the job
    retry_shard: int | None = None  # ...and only those of this shard
    # Where a retry began: the errors file's size then. Kept while a run window pauses the
    # retry, so that its next run does not retry again what failed in this retry already.
    retry_errors_from: int | None = None
    in_flight: int = 0  # requests inside the engine at the last update
    # Live output: tokens generated so far, running requests' included (the engine's own
    # counter), and the expected total: finished answers' tokens plus, for each request
    # still to finish, the length measured answers of its model predict under its limit
    # (its limit where none were measured: then ``expected_is_bound``).
    generated_tokens: int = 0
    expected_output_tokens: int | None = None
    expected_is_bound: bool = False
    measured_tokens_per_s: float | None = None  # the model's speed on earlier runs
    measured_load_seconds: float | None = None  # the loading model's last load time
    eta_seconds: float | None = None  # the worker's forecast (core/run/eta.py)...
    eta_at: float | None = None  # ...made at this time (seconds since the epoch)
    # When its run window's close paused it (the job is queued again; core/jobs/windows.py
    # says when it resumes); a worker taking it starts a status without it.
    paused_at: str | None = None
    # An output that is an object (s3://...): where the worker wrote the results, or why not.
    delivered_to: str | None = None
    delivery_error: str | None = None
    # The counts and tokens above are the job's, over all its runs (a resume or a retry
    # starts them from the result files); these are the latest run's own, shown beside.
    runs: int = 0  # worker runs of the job so far
    # Times a worker died while running the job and the job was queued again by itself
    # (core/jobs/recovery.py); a job that keeps killing its worker fails instead.
    interruptions: int = 0
    job_seconds: float | None = None  # running time over all runs (elapsed: this run's)
    # Answers taken from earlier results or from a duplicate in the job (core/reuse), over
    # all runs, and their output tokens: counted in the totals above, never computed.
    reused: int = 0
    reused_prompt_tokens: int = 0
    reused_completion_tokens: int = 0
    run_done: int = 0  # results this run's engine made (reused answers not counted)
    run_completion_tokens: int = 0  # output tokens of this run's answers
    # When this run's first output token came, from the engine's own step (epoch seconds):
    # the live speed counts from it (core/run/monitoring.py), not from a heartbeat.
    first_token_at: float | None = None

    @property
    def left(self) -> int:
        """Requests without a final result: what a resume runs."""
        return max(self.total - self.done, 0)

    def enter(self, state: JobState | str, message: str = "") -> None:
        """Moves to ``state``, keeping the transition's time in ``history``."""
        state = JobState(state)
        if state != self.state or not self.history:
            self.history.append({"state": state.value, "at": now_iso()})
        self.state, self.message = state, message

    def note(self, text: str) -> None:
        """Keeps what happened within the current state (a Ray node lost) in ``history``."""
        self.history.append({"state": self.state.value, "at": now_iso(), "note": text})

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def interrupted(self) -> bool:
        """A job whose worker died without saying so: not final, and its process is gone
        or its heartbeat is stale."""
        if self.is_final or self.state in WAITING_STATES or self.state in HELD_STATES:
            return False
        if self.pid is not None and not worker_alive(self.pid):
            return True
        return self.heartbeat_at is None or time.time() - self.heartbeat_at > STALE_AFTER_SECONDS

    @property
    def outcome(self) -> str:
        """The state, except that a completed job with failed requests is
        ``completed_with_errors`` (written into ``status.json`` for scripts)."""
        if self.state == JobState.COMPLETED and self.failed:
            return "completed_with_errors"
        return self.state.value

    @property
    def display_state(self) -> str:
        """The state as a person should read it: a dead worker's job is ``interrupted``,
        and a completed job with failed requests says so."""
        if self.interrupted:
            return "interrupted"
        if self.state == JobState.AWAITING_APPROVAL:
            return AWAITING_APPROVAL
        return COMPLETED_WITH_ERRORS if self.outcome == "completed_with_errors" else self.outcome

    @property
    def progress(self) -> float:
        return self.done / self.total if self.total else 0.0

    def to_json(self) -> str:
        data = self.model_dump(mode="json")
        data["outcome"] = self.outcome
        return _json(data)


def worker_alive(pid: int) -> bool:
    """True while a worker process with this PID runs (a zombie counts as gone)."""
    import psutil  # here: every command (core check) imports this module, few ask this

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _json(data: Any) -> str:
    import json

    return json.dumps(data, ensure_ascii=False, indent=1)


def to_json(model: BaseModel) -> str:
    """A stored model as the indented JSON of its file."""
    return _json(model.model_dump(mode="json"))
