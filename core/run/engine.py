"""The one engine path: ``vllm.LLM`` behind a small interface.

The same code serves the CPU build of vLLM (development, CI) and the CUDA build (GPU
servers). On CPU the engine runs in-process and eager with a fixed KV cache, using every
core this process may run on: the settings measured in ``../shared/DESIGN.md``.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Collection, Container, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from core.adapters import engine_rank
from core.check.engine_requests import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    EngineRequest,
    GeneratedRequest,
    PooledRequest,
)
from core.check.sampling import copied_answers
from core.check.tool_support import auto_support
from core.check.tools import AUTO
from core.devices import gpu_count, resolve_dtype
from core.model_folders import is_cross_encoder, is_pooling_model
from core.run.cpu_threads import WORKER_EXTENSION, CpuThreads
from core.run.outputs import Choice, Completion, Embeddings
from core.run.pooling import Gathering, pair_requests
from core.run.structured import STRUCTURED_OUTPUTS
from core.run.tool_parsing import read_calls
from core.schemas import Adapter, EngineConfig

log = logging.getLogger(__name__)


def cpu_thread_settings(threads: int) -> dict[str, str]:
    """The OpenMP settings of a CPU engine: ``threads`` threads, free to move between
    cores, that sleep while they wait.

    OpenMP's defaults spin at every barrier, and vLLM binds each thread to a core. Beside
    another busy process that is the worst of both: the thread whose core is taken falls a
    time slice behind at every step, and the others spin waiting for it (128 chats took
    5-12x their quiet time beside one busy core of two, and a warm engine 5x beside a
    second engine). Unbound, the scheduler moves a waiting thread's work to the free core;
    passive, a waiting thread gives its core away. While it runs, the engine gives up the
    threads a neighbour takes (:class:`core.run.cpu_threads.CpuThreads`).
    ``bench/neighbour.py`` measures it against vLLM's own defaults beside the same
    neighbours.
    """
    return {
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": str(threads),
        "OMP_WAIT_POLICY": "PASSIVE",
    }


def cpu_threads() -> int:
    """The threads a CPU engine of this process starts with: a core each."""
    return int(os.environ.get("OMP_NUM_THREADS") or len(os.sched_getaffinity(0)))


def configure_cpu_threads() -> None:
    """Sets :func:`cpu_thread_settings` for every core this process may use, unless set.

    OpenMP reads them once, when torch first loads: an engine process calls this at its
    start (the worker's ``main``), before anything imports torch.
    """
    for name, value in cpu_thread_settings(cpu_threads()).items():
        os.environ.setdefault(name, value)


def configure_cpu_environment(kv_cache_gib: float) -> None:
    """Sets vLLM's CPU variables; must run before vLLM is imported.

    In-process (no engine subprocess), a fixed KV cache (vLLM otherwise sizes it from one
    NUMA node and fails here), and the threads of :func:`configure_cpu_threads`.
    """
    configure_cpu_threads()
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, round(kv_cache_gib))))


class Fitted(Protocol):
    """What the engine's settings depend on in a request (the worker's
    :class:`~core.run.pending.Kind`, one per kind of request in a run)."""

    seeded: bool
    adapter: Adapter | None


def fit_to_requests(
    config: EngineConfig,
    requests: Iterable[Fitted],
    on_gpu: bool,
    loaded: Collection[EngineConfig] = (),
) -> EngineConfig:
    """The engine settings for these requests: the job's, except where the engine build
    cannot run them.

    On the CPU build of vLLM (0.32), a seeded request whose prefill is split over engine
    steps (chunked prefill, 4,096 tokens a step by default) fails with "CPU Generator does
    not use offset", and with it every request in the engine: 200 seeded chats failed
    whole while 4 or 20 ran. Without chunked prefill no prefill is split, so a job with
    seeded requests runs with it off on CPU (measured on 200 chats: about 10% fewer
    tokens/s, so unseeded jobs keep it on). A setting the user chose is kept.

    An unseeded job runs as it is on an engine among ``loaded`` (the resident worker's)
    that an earlier seeded job had turned chunked prefill off for: that engine runs any
    request, and the next job on a loaded model starts at once instead of reloading it.
    """
    config = _with_lora(config, requests, on_gpu)
    if on_gpu or config.enable_chunked_prefill is not None:
        return config
    without = config.model_copy(update={"enable_chunked_prefill": False})
    seeded = any(request.seeded for request in requests)
    return without if seeded or without in loaded else config


def _with_lora(config: EngineConfig, requests: Iterable[Fitted], on_gpu: bool) -> EngineConfig:
    """LoRA on where requests run with adapters: the job's adapters (an engine with them
    runs those alone, so a pooled one is reused by a job of the same adapters only), room
    for all of them at once (vLLM then batches every adapter's requests in the same
    steps), at the least rank vLLM takes that holds the largest.

    On CPU one slot more stays empty: vLLM's CPU LoRA ops (vllm/lora/ops/torch_ops, 0.32)
    index the adapters' weights with a request's slot, and a request without an adapter has
    slot -1, which Python reads as the last slot. With the adapters in every slot, the
    base's requests in a batch beside an adapter's ran with the last adapter (measured:
    every base answer of a mixed batch was the adapter's); an empty last slot adds zero."""
    adapters = {r.adapter.folder: r.adapter.rank for r in requests if r.adapter is not None}
    if not adapters:
        return config
    return config.model_copy(
        update={
            "lora_adapters": tuple(sorted(adapters)),
            "max_loras": len(adapters) + (0 if on_gpu else 1),
            "max_lora_rank": engine_rank(max(adapters.values())),
        }
    )


def _engine_core_in_child_process() -> bool:
    """vLLM's own setting (V1 multiprocessing), as it reads it when the engine starts."""
    from vllm import envs

    return bool(envs.VLLM_ENABLE_V1_MULTIPROCESSING)


def _model_runner_in_engine_core() -> type:
    """The executor that runs the model inside the engine core's child process.

    With the core in a child process, vLLM's CPU platform runs the model in a third
    process, to set OpenMP's thread binding before it starts: a binding this studio turns
    off (:func:`cpu_thread_settings`). In the core's own process the load skips a process
    that imports torch and vLLM: SmolLM2 ready in 16.6 s against 25.6, 0.56 GiB less
    memory, the same answers (2-core EPYC, 2026-12-07; ``bench/engines.py``).
    """
    from vllm.v1.executor.uniproc_executor import UniProcExecutor

    return UniProcExecutor


class Engine:
    """A loaded model that runs lists of :class:`EngineRequest`."""

    def __init__(self, config: EngineConfig) -> None:
        """Loads the model; raises ``EngineLoadError`` with vLLM's reason if it cannot."""
        self.config = config
        model_path = Path(config.model)
        if not (model_path / "config.json").is_file():
            raise EngineLoadError(
                f"model folder {config.model} does not exist or has no config.json; "
                "point to a Hugging Face model folder"
            )
        self.on_gpu = gpu_count() > 0
        # A cross-encoder scores (query, document) pairs itself; an embedding model makes
        # vectors, which a score or rerank request compares (a bi-encoder). Neither writes text.
        self.cross_encoder = is_cross_encoder(model_path)
        self.pooling = is_pooling_model(model_path)
        if not self.on_gpu:
            configure_cpu_environment(config.cpu_kv_cache_gib)
        started = time.monotonic()
        try:
            from vllm import LLM

            self.llm = LLM(**self._llm_kwargs())
        except Exception as exc:
            raise EngineLoadError(f"vLLM could not load {config.model}: {exc}") from exc
        self.load_seconds = time.monotonic() - started
        self.tokenizer = self.llm.get_tokenizer()
        self._ids = itertools.count()
        self.stopped = False  # set by a cancel: abort what is inside, keep what finished
        self.closed = False  # its model let go (close): a job still on it loads afresh
        # Asked at each step, with the window and the id() of the requests running, for
        # requests to abort: those of one job cancelled among others, or making room for a
        # job that joined (core.run.feed sets it); one not inside any more is passed over.
        self.take_out: Callable[[int, set[int]], list[EngineRequest]] | None = None
        self.feed: Any = None  # the jobs that share it (core.run.feed.feed_of makes it)
        self.steps = 0  # engine steps taken
        self.step_log: deque[tuple[int, int, float]] = deque(maxlen=STEPS_LOGGED)
        self._held = 0  # requests finished in the engine, not yet yielded
        self.first_token_at: float | None = None  # this run()'s first token, epoch seconds
        # engine request id -> (step admitted, limit, id() of the EngineRequest it runs)
        self._inside: dict[str, tuple[int, int, int]] = {}
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.max_num_seqs = self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs
        self.core_apart = _engine_core_in_child_process()  # it steps on its own (see _whole)
        self.cpu_threads = None
        if not self.on_gpu:
            workers = self.llm.collective_rpc("process_id")
            self.cpu_threads = CpuThreads(self._set_cpu_threads, cpu_threads(), workers)
        watch_engine_core(self.llm.llm_engine.engine_core)
        log.info("engine ready in %.1f s (max_model_len %d)", self.load_seconds, self.max_model_len)

    def _llm_kwargs(self) -> dict[str, Any]:
        c = self.config
        kwargs: dict[str, Any] = {
            "model": c.model,
            "dtype": resolve_dtype(c.dtype, self.on_gpu),
            "seed": c.seed,
            "tensor_parallel_size": c.tensor_parallel_size,
            # The engine's own counters (tokens generated so far, requests running) feed the
            # live progress; they cost one small record per engine step.
            "disable_log_stats": False,
        }
        if self.pooling:
            kwargs["runner"] = "pooling"
        else:
            kwargs["structured_outputs_config"] = dict(STRUCTURED_OUTPUTS)
        optional = {
            "max_model_len": c.max_model_len,
            "max_num_seqs": c.max_num_seqs,
            "max_num_batched_tokens": c.max_num_batched_tokens,
            "enable_prefix_caching": c.enable_prefix_caching,
            "enable_chunked_prefill": c.enable_chunked_prefill,
            "quantization": c.quantization,
        }
        kwargs.update({k: v for k, v in optional.items() if v is not None})
        if c.max_loras:
            kwargs.update(enable_lora=True, max_loras=c.max_loras, max_lora_rank=c.max_lora_rank)
        if self.on_gpu:
            kwargs["gpu_memory_utilization"] = c.gpu_memory_utilization
        else:
            # Compiled mode costs 60-90 s at every start on CPU for little gain.
            kwargs["enforce_eager"] = True
            kwargs["worker_extension_cls"] = WORKER_EXTENSION
            if _engine_core_in_child_process() and c.tensor_parallel_size == 1:
                kwargs["distributed_executor_backend"] = _model_runner_in_engine_core()
        return kwargs

    def _set_cpu_threads(self, threads: int) -> None:
        self.llm.collective_rpc("set_cpu_threads", args=(threads,))

    def _generated_tokens(self) -> int:
        metric = next(m for m in self.llm.get_metrics() if m.name == "vllm:generation_tokens")
        return int(metric.value)

    def activity(self, of: Container[int] | None = None) -> EngineActivity:
        """What the engine is doing now, from its own counters (safe from another thread):
        tokens generated since it loaded, finished requests' and running ones' alike. With
        ``of`` (the ``id()`` of one job's requests inside), ``progress`` is theirs alone."""
        values = {m.name: m.value for m in self.llm.get_metrics() if m.name in ACTIVITY_METRICS}
        steps = self.steps
        return EngineActivity(
            generated_tokens=int(values.get("vllm:generation_tokens", 0)),
            prompt_tokens=int(values.get("vllm:prompt_tokens", 0)),
            steps=steps,
            running=int(values.get("vllm:num_requests_running", 0)),
            waiting=int(values.get("vllm:num_requests_waiting", 0)),
            kv_cache_usage=float(values.get("vllm:kv_cache_usage_perc", 0.0)),
            prefix_cache_queries=int(values.get("vllm:prefix_cache_queries", 0)),
            prefix_cache_hits=int(values.get("vllm:prefix_cache_hits", 0)),
            # list() of a dict's values is one step for the interpreter: safe while the
            # engine loop adds and removes entries.
            progress=tuple(
                (steps - at, limit)
                for at, limit, request in list(self._inside.values())
                if of is None or request in of
            ),
            held=self._held,
            recent_steps=tuple(self.step_log),
            first_token_at=self.first_token_at,
        )

    def _sampling_params(self, request: GeneratedRequest) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import StructuredOutputsParams

        kwargs = dict(request.sampling)
        if copies(request) > 1:
            kwargs["n"] = 1
        if _decides_calls(request):  # call tokens may be special: keep them to parse
            kwargs["skip_special_tokens"] = False
        if request.json_schema is not None:
            kwargs["structured_outputs"] = (
                StructuredOutputsParams(json=request.json_schema)
                if request.json_schema
                else StructuredOutputsParams(json_object=True)
            )
        return SamplingParams(**kwargs)

    def _read_calls(self, request: ChatRequest, result: Completion) -> None:
        """An ``auto`` answer's calls, read by the model's tool parser (none: text)."""
        parser = auto_support(self.config.model).parser
        for choice in result.choices:
            found = parser and read_calls(parser, self.tokenizer, choice.text, request.tools or [])
            if found:
                choice.calls, choice.text = found[0], found[1] or ""

    def close(self) -> None:
        """Releases the model's memory (best effort: vLLM keeps some process state)."""
        import gc

        # With the engine core in a child process, end it now rather than when the
        # collector finds the client: its memory is the model's.
        self.closed = True
        self.llm.llm_engine.engine_core.shutdown()
        del self.llm
        gc.collect()
        if self.on_gpu:
            import torch

            torch.cuda.empty_cache()

    def _engine_input(self, request: GeneratedRequest) -> dict[str, Any]:
        """The token ids to run: the chat template applied to the messages, as ``LLM.chat``
        does (the template emits any BOS itself), or a completions prompt as it is."""
        if isinstance(request, CompletionRequest):
            return {"prompt_token_ids": self.tokenizer.encode(request.prompt)}
        text = self.tokenizer.apply_chat_template(
            request.messages, tools=request.tools, add_generation_prompt=True, tokenize=False
        )
        return {"prompt_token_ids": self.tokenizer.encode(text, add_special_tokens=False)}

    def stream(
        self, requests: Iterable[EngineRequest], window: int, flush_seconds: float = 1.0
    ) -> Iterator[list[tuple[EngineRequest, Completion | Embeddings | EngineRequestError]]]:
        """Runs requests with continuous batching and yields them as they finish.

        On an embedding model each input of an embeddings request is an engine request of
        its own; the request finishes (with :class:`Embeddings`) when its last input does.

        Up to ``window`` requests are inside the engine at once; as each finishes the next
        one is added, so the engine never drains between batches. ``requests`` is asked
        again at each step once it ran dry (a mix of jobs gives again when a job joins), and
        the stream ends when it gives none and nothing is inside. The requests that
        :attr:`take_out` names are aborted at the next step. Once :attr:`stopped` is
        set (a cancel), the requests inside are aborted at the next step and those already
        finished are yielded. Finished requests are yielded as the first finish, then about
        every ``flush_seconds`` (and at the end). A request the engine refuses (e.g. its prompt
        is longer than the context) comes back at once as an :class:`EngineRequestError`.
        If the engine itself fails, requests still inside it are aborted before the
        exception propagates, so a caller may run them again (as after a stop).

        Each :class:`Completion` carries its ``latency_ms``: monotonic time from the request
        being added to the engine to the step that returned its final output (queueing
        inside the engine included, waiting in ``requests`` before that not).
        """
        from vllm.exceptions import VLLMClientError
        from vllm.v1.engine.exceptions import EngineDeadError

        if self.closed:  # a job beside found its process ended, and the pool let it go
            raise EngineDied("the engine's process ended (closed after it)")
        engine = self.llm.llm_engine
        queue = iter(requests)
        # engine request id -> (request, its key, input index): an embeddings request is
        # one engine request per input, and finishes when the last of them does.
        inside: dict[str, tuple[EngineRequest, str, int]] = {}
        added_at: dict[str, float] = {}  # request key -> monotonic time it entered the engine
        gathering: dict[str, Gathering] = {}  # request key -> its vectors so far
        finished: list[tuple[EngineRequest, Completion | Embeddings | EngineRequestError]] = []
        # The first finished requests are yielded at once (a warm engine's first result
        # should not wait a flush interval), then about every ``flush_seconds``.
        last_flush = float("-inf")
        self.first_token_at = None
        # Answers come back only when finished, so until the first token the engine's
        # token counter is read after each step (the prompts' steps: a few).
        tokens_before = None if self.pooling else self._generated_tokens()
        if self.cpu_threads is not None:
            self.cpu_threads.restart()  # idle since the last run: read the load afresh
        try:
            while not self.stopped:
                if self.take_out is not None and (
                    gone := self.take_out(window, {id(r) for r, _, _ in inside.values()})
                ):
                    self._abort(gone, inside, added_at, gathering)
                with self._whole(idle=not inside):
                    while len(inside) < window:
                        request = next(queue, None)
                        if request is None:
                            break
                        key = f"{next(self._ids)}"
                        added: list[str] = []
                        try:
                            parts = self._engine_requests(request, key)
                            entered = time.monotonic()
                            lora = self._lora_request(request)
                            for index, (request_id, engine_input, params) in enumerate(parts):
                                engine.add_request(
                                    request_id, engine_input, params, lora_request=lora
                                )
                                added.append(request_id)
                                inside[request_id] = (request, key, index)
                                limit = getattr(params, "max_tokens", 0) or 0
                                self._inside[request_id] = (self.steps, limit, id(request))
                        except (VLLMClientError, ValueError, TypeError) as exc:
                            if added:  # an embeddings request refused at a later input
                                engine.abort_request(added)
                            for request_id in added:
                                inside.pop(request_id)
                                self._inside.pop(request_id, None)
                            finished.append((request, EngineRequestError(str(exc))))
                            continue
                        added_at[key] = entered
                        if isinstance(request, PooledRequest):
                            gathering[key] = Gathering(
                                [None] * len(parts), left=len(parts), scores=self.cross_encoder
                            )
                if not inside:
                    break
                if self.cpu_threads is not None:
                    self.cpu_threads.check()
                running, started = len(inside), time.monotonic()
                outputs = engine.step()
                now = time.monotonic()
                self.steps += 1
                self.step_log.append((self.steps, running, now - started))
                if tokens_before is not None and self._generated_tokens() > tokens_before:
                    self.first_token_at, tokens_before = time.time(), None
                for output in outputs:
                    if not output.finished:
                        continue
                    self._inside.pop(output.request_id, None)
                    request, key, index = inside.pop(output.request_id)
                    if isinstance(request, PooledRequest):
                        result = gathering[key].add(index, output)
                        if result is None:
                            continue  # inputs of this request still in the engine
                        del gathering[key]
                        if isinstance(request, EmbeddingRequest):
                            result.encoding_format = request.encoding_format
                    else:
                        result = _completion(output, request.sampling.get("logprobs") or 0)
                        result.choices *= copies(request)
                        if _decides_calls(request):
                            self._read_calls(request, result)
                    result.latency_ms = round((now - added_at.pop(key)) * 1000)
                    finished.append((request, result))
                self._held = len(finished)
                if finished and time.monotonic() - last_flush >= flush_seconds:
                    yield finished
                    finished, last_flush, self._held = [], time.monotonic(), 0
        except EngineDeadError as exc:
            inside.clear()  # nothing to abort: the process that held them is gone
            raise EngineDied(f"the engine's process ended ({type(exc).__name__})") from exc
        finally:
            if inside:
                engine.abort_request(list(inside))
            self._inside.clear()
            self._held = 0
            self.stopped = False  # a stop ends this run, not the pooled engine's next one
        if finished:
            yield finished

    @contextlib.contextmanager
    def _whole(self, idle: bool) -> Iterator[None]:
        """While requests enter an idle engine whose core runs in a process of its own
        (a resident worker's), its scheduling waits, so its first step holds all of them.

        Such a core steps on its own: it wakes at the first request to arrive and schedules
        it alone, the rest a step later (measured: 100 chats entered a warm engine in
        0.14 s, yet its first step ran 1 and the next prefilled 99 for 5 s, while the
        Monitor read 1 running and a low speed). An in-process core steps only when asked,
        after every request is in. ``sleep(level=0)`` is vLLM's own way to queue requests
        unscheduled; ``keep`` holds any inside."""
        if not (idle and self.core_apart):
            yield
            return
        self.llm.sleep(level=0, mode="keep")
        try:
            yield
        finally:
            self.llm.wake_up(tags=["scheduling"])

    def _abort(
        self,
        requests: list[EngineRequest],
        inside: dict[str, tuple[EngineRequest, str, int]],
        added_at: dict[str, float],
        gathering: dict[str, Gathering],
    ) -> None:
        """Takes ``requests`` out of the engine (a cancelled job's, or those making room
        for a job that joined); the others run on."""
        gone = {id(request) for request in requests}
        ids = [rid for rid, (request, _, _) in inside.items() if id(request) in gone]
        if ids:
            self.llm.llm_engine.abort_request(ids)
        for rid in ids:
            _, key, _ = inside.pop(rid)
            self._inside.pop(rid, None)
            added_at.pop(key, None)
            gathering.pop(key, None)

    def _engine_requests(self, request: EngineRequest, key: str) -> list[tuple[str, Any, Any]]:
        """``(request id, input, params)`` of each engine request that runs ``request``.

        Raises:
            ValueError: the request is of the other kind than the loaded model.
        """
        pooled = isinstance(request, PooledRequest)
        if pooled != self.pooling:
            kind = "a chat"
            if self.pooling:
                kind = "a cross-encoder" if self.cross_encoder else "an embedding"
            raise ValueError(
                f"{Path(self.config.model).name} is {kind} model; this request "
                f"needs {'an embedding' if pooled else 'a chat'} model"
            )
        if isinstance(request, PooledRequest):
            if self.cross_encoder:
                return pair_requests(self.llm, request, key, Path(self.config.model).name)
            from vllm.pooling_params import PoolingParams

            return [
                (f"{key}.{i}", self._embedding_input(item), PoolingParams(task="embed"))
                for i, item in enumerate(request.inputs)
            ]
        from vllm.sampling_params import RequestOutputKind

        params = self._sampling_params(request)
        params.output_kind = RequestOutputKind.FINAL_ONLY
        return [(key, self._engine_input(request), params)]

    def _lora_request(self, request: EngineRequest) -> Any:
        """The ``LoRARequest`` a request runs with, beside its sampling params (None: the
        base model). Each adapter keeps its id (its place among the engine's adapters, from
        1) while the engine lives, so vLLM loads it once.

        Raises:
            ValueError: the engine was not loaded for the request's adapter.
        """
        adapter = request.adapter if isinstance(request, GeneratedRequest) else None
        if adapter is None:
            return None
        if adapter.folder not in self.config.lora_adapters:
            raise ValueError(
                f"the engine of {self.config.model_name} was not loaded for the adapter "
                f"{adapter.name}"
            )
        from vllm.lora.request import LoRARequest

        lora_id = self.config.lora_adapters.index(adapter.folder) + 1
        return LoRARequest(adapter.name, lora_id, adapter.folder)

    def _embedding_input(self, item: str | list[int]) -> dict[str, Any]:
        """One input's token ids: a text tokenized with the model's special tokens (as
        ``LLM.embed`` does), or the ids the line gave."""
        ids = self.tokenizer.encode(item) if isinstance(item, str) else list(item)
        return {"prompt_token_ids": ids}


STEPS_LOGGED = 4_096
ACTIVITY_METRICS = frozenset(
    {
        "vllm:generation_tokens",
        "vllm:prompt_tokens",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",  # a share, 0 to 1, despite its name
        "vllm:prefix_cache_queries",  # prompt tokens looked up in the prefix cache
        "vllm:prefix_cache_hits",  # of them, found there
    }
)


@dataclass(frozen=True)
class EngineActivity:
    """The engine's counters at one moment."""

    generated_tokens: int = 0  # since the engine loaded, requests still running included
    prompt_tokens: int = 0  # prompt tokens processed since the engine loaded
    steps: int = 0  # engine steps since it loaded
    running: int = 0
    waiting: int = 0
    beside: int = 0  # other jobs' requests running beside this job's (jobs side by side)
    progress: tuple[tuple[int, int], ...] = ()  # (tokens written, limit) per request inside
    held: int = 0  # finished, not yet handed back (they are written within a second)
    recent_steps: tuple[tuple[int, int, float], ...] = ()  # (step, requests in it, seconds)
    kv_cache_usage: float = 0.0  # share of the KV cache in use
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # of them, found cached
    first_token_at: float | None = None  # when the run's first token came (epoch seconds)

    def numbers(self) -> dict[str, float | int | None]:
        """What the Monitor shows of the engine: requests running and waiting, the KV
        cache in use and the prefix cache's hit rate (None before a prompt was looked up)."""
        queries = self.prefix_cache_queries
        return {
            "running": self.running,
            "waiting": self.waiting,
            "kv_cache_usage": round(self.kv_cache_usage, 4),
            "prefix_cache_hit_rate": round(self.prefix_cache_hits / queries, 4)
            if queries
            else None,
        }


class EngineLoadError(RuntimeError):
    """The model could not be loaded; the message is vLLM's reason."""


CORE_WATCH_SECONDS = 1.0  # how often a dead engine process is looked for


def watch_engine_core(client: Any) -> None:
    """Wakes a step that waits on an engine process that has died.

    vLLM's client notices the process's end (its monitor sets ``resources.engine_dead``)
    and shuts its output thread down, but puts nothing on the queue ``step()`` waits on
    (vLLM 0.32, ``SyncMPClient``): the step would wait for ever. A daemon thread puts
    vLLM's own ``EngineDeadError`` there once the flag is set, and the step raises it.
    An engine run in this process (no client of a child) needs none.
    """
    resources, outputs = getattr(client, "resources", None), getattr(client, "outputs_queue", None)
    if resources is None or outputs is None:
        return
    from vllm.v1.engine.exceptions import EngineDeadError

    held = weakref.ref(client)  # the watch must not keep a dropped engine's model alive

    def open_() -> bool:
        found = held()
        return found is not None and found._finalizer.alive  # False once shut down

    def watch() -> None:
        # vLLM's monitor sets the flag before it shuts the client down; a shutdown of ours
        # leaves it unset, and nothing is waiting then
        while not resources.engine_dead and open_():
            time.sleep(CORE_WATCH_SECONDS)
        if resources.engine_dead:
            outputs.put_nowait(EngineDeadError())

    threading.Thread(target=watch, name="engine-core-watch", daemon=True).start()


class EngineDied(RuntimeError):
    """The engine's process ended (killed, out of memory, crashed): nothing it held is
    left, and no retry on it can succeed; the job loads the model afresh."""


class EngineRequestError(Exception):
    """The engine refused one request (e.g. its prompt is longer than the context)."""


def _logprobs(output: Any, top: int) -> list[dict[str, Any]] | None:
    """vLLM's per-position logprobs in OpenAI's ``logprobs.content`` shape."""
    if output.logprobs is None:
        return None

    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode())}

    content = []
    for token_id, position in zip(output.token_ids, output.logprobs, strict=False):
        chosen = position[token_id]
        ranked = sorted(position.values(), key=lambda lp: lp.rank)[:top]
        item = entry(chosen.decoded_token or "", chosen.logprob)
        item["top_logprobs"] = [entry(lp.decoded_token or "", lp.logprob) for lp in ranked]
        content.append(item)
    return content


def _decides_calls(request: GeneratedRequest) -> bool:
    """A chat request whose model decides itself whether to call a tool (``auto``)."""
    return isinstance(request, ChatRequest) and request.tool_choice == AUTO


def copies(request: GeneratedRequest) -> int:
    """How many answers the engine's one answer stands for: ``n`` for a greedy request of
    ``n`` answers (``core.check.sampling.copied_answers``), else 1."""
    n = request.sampling.get("n") or 1
    return 1 + copied_answers(n, request.sampling.get("temperature"))


def _completion(output: Any, top_logprobs: int) -> Completion:
    return Completion(
        prompt_tokens=len(output.prompt_token_ids or []),
        cached_tokens=output.num_cached_tokens or 0,
        choices=[
            Choice(
                text=o.text,
                finish_reason=o.finish_reason,
                completion_tokens=len(o.token_ids),
                stop_reason=o.stop_reason,
                logprobs=_logprobs(o, top_logprobs),
            )
            for o in output.outputs
        ],
    )
