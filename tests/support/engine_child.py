"""Engine work a test runs in a process of its own, as the product runs it in the worker.

vLLM, as it loads, looks at every attribute of every loaded module; in the test process
other tests have imported Flask (the sign-in tests' OpenID provider), whose
``current_app`` raises on that look, and the load fails. So a test that needs the engine
itself (not through ``core run``) runs one of these commands and reads its JSON:

    door VALID.jsonl MODEL OUT.json [--run N] [--max-tokens M]
    embed MODEL OUT.json TEXT [TEXT ...]
    score MODEL BATCH.jsonl OUT.json
    lora MODEL ADAPTER BATCH.jsonl OUT.json

through the ``engine_child`` fixture: one process for the session (``python -m
tests.support.engine_child serve FD``, started at the first command), which runs them in
turn, each engine closed before the next loads, so the tests that need it pay one cold
process start (vLLM and torch imported once), not one each. ``python -m
tests.support.engine_child COMMAND ...`` runs one command alone, by hand.
"""

from __future__ import annotations

import json
import os
import random
import select
import subprocess
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.config import REPO_ROOT


class EngineChild:
    """The session's engine process: started at the first command, ended with the session."""

    def __init__(self, log: Path) -> None:
        self.log = log  # the child's own output (vLLM's logs), shown when a command fails
        self.process: subprocess.Popen[str] | None = None
        self.replies: Any = None

    def run(self, out: Path, *args: str, timeout: float = 900) -> dict[str, Any]:
        """Runs a command of this module (``args``, naming ``out``) in the child; returns
        what it wrote to ``out``."""
        if self.process is None:
            self._start()
        assert self.process is not None and self.process.stdin is not None
        self.process.stdin.write(json.dumps(args) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.replies], [], [], timeout)
        line = self.replies.readline() if ready else ""
        assert line, f"the engine child gave no answer: {self.log.read_text()[-3000:]}"
        reply = json.loads(line)
        assert reply["ok"], reply["error"] + self.log.read_text()[-3000:]
        return json.loads(out.read_text())

    def _start(self) -> None:
        read, write = os.pipe()  # its answers, apart from vLLM's logs on stdout and stderr
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.support.engine_child", "serve", str(write)],
                cwd=REPO_ROOT,
                stdin=subprocess.PIPE,
                stdout=log,
                stderr=subprocess.STDOUT,
                text=True,
                pass_fds=(write,),
            )
        os.close(write)
        self.replies = os.fdopen(read)

    def close(self) -> None:
        if self.process is not None:
            assert self.process.stdin is not None
            self.process.stdin.close()  # its loop ends
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
            self.replies.close()


@pytest.fixture(scope="session")
def engine_child(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EngineChild]:
    """The session's one engine process (this module's commands, run in turn)."""
    child = EngineChild(tmp_path_factory.mktemp("engine-child") / "child.log")
    yield child
    child.close()


def serve(reply_fd: int) -> None:
    """Runs the commands read from stdin (a JSON list of arguments a line) in turn, and
    answers each on ``reply_fd`` (``{"ok": true}`` or the error's traceback)."""
    from core.run.engine import configure_cpu_environment

    configure_cpu_environment(1.0)  # before vLLM is imported
    with os.fdopen(reply_fd, "w") as replies:
        for line in sys.stdin:
            try:
                main(json.loads(line))
                reply: dict[str, Any] = {"ok": True}
            except Exception:
                reply = {"ok": False, "error": traceback.format_exc()}
            replies.write(json.dumps(reply) + "\n")
            replies.flush()


def door(valid: Path, model: str, out: Path, run: int, max_tokens: int) -> None:
    """Every request of ``valid`` at the engine's door, where vLLM checks a request against
    the model (sampling fields, logprobs, token ids, the output schema): admitted, then
    dropped; then a seeded ``run`` of them run to their last token."""
    from core.check.scanner import scan
    from core.run.engine import Engine, EngineRequestError, configure_cpu_environment
    from core.schemas import EngineConfig, JobDefaults

    configure_cpu_environment(1.0)
    requests = [line.request for line in scan(valid, JobDefaults(max_tokens=max_tokens))]
    engine = Engine(EngineConfig(model=model, max_model_len=512))
    refused: dict[str, str] = {}
    door = engine.llm.llm_engine
    for request in requests:
        try:
            params = engine._sampling_params(request)
            door.add_request(request.custom_id, engine._engine_input(request), params)
            door.abort_request([request.custom_id])
        except (ValueError, TypeError) as exc:
            refused[request.custom_id] = str(exc)
    chosen = random.Random(7).sample(requests, min(run, len(requests)))
    ran: dict[str, Any] = {}
    for batch in engine.stream(chosen, window=256):
        for request, result in batch:
            ran[request.custom_id] = (
                str(result)
                if isinstance(result, EngineRequestError)
                else [c.completion_tokens for c in result.choices]
            )
    engine.close()  # the next command's engine loads in this process
    out.write_text(json.dumps({"admitted": len(requests), "refused": refused, "ran": ran}))


def embed(model: str, out: Path, texts: list[str]) -> None:
    """``LLM.embed`` of the texts on the model as the engine loads it, and its length limit."""
    from core.run.engine import configure_cpu_environment

    configure_cpu_environment(1.0)
    from vllm import LLM

    llm = LLM(model=model, runner="pooling", enforce_eager=True)
    outputs = llm.embed(texts, use_tqdm=False)
    out.write_text(
        json.dumps(
            {
                "max_model_len": llm.llm_engine.model_config.max_model_len,
                "vectors": [o.outputs.embedding for o in outputs],
                "prompt_tokens": [len(o.prompt_token_ids) for o in outputs],
            }
        )
    )


def score(model: str, batch: Path, out: Path) -> None:
    """Each score or rerank line of ``batch`` run by the product's engine in float32 (the
    worker's ``auto`` is bfloat16 on a CPU that has it), as its output line; and the kind
    of scorer vLLM took the model for."""
    from core.check.requests import parse_request
    from core.run.engine import Engine
    from core.run.retry import result_line
    from core.schemas import EngineConfig, JobDefaults

    lines = [json.loads(raw) for raw in batch.read_text().splitlines()]
    requests = [parse_request(x["url"], x["custom_id"], x["body"], JobDefaults()) for x in lines]
    engine = Engine(EngineConfig(model=model, dtype="float32"))
    results = [
        result_line(request, Path(model).name, result)
        for finished in engine.stream(requests, window=8)
        for request, result in finished
    ]
    config = engine.llm.llm_engine.model_config
    kind = {"score_type": config.score_type, "max_model_len": config.max_model_len}
    engine.close()
    out.write_text(json.dumps({**kind, "lines": results}))


def lora(model: str, adapter: str, batch: Path, out: Path) -> None:
    """The chat lines of ``batch`` whose ``body.model`` is ``lora``, greedy, through
    ``vllm.LLM(enable_lora=True).chat`` directly with the adapter's ``LoRARequest``; the
    answers by custom id."""
    from core.run.engine import configure_cpu_environment, resolve_dtype

    configure_cpu_environment(1.0)
    from vllm import LLM, SamplingParams
    from vllm.lora.request import LoRARequest

    lines = [json.loads(raw) for raw in batch.read_text().splitlines()]
    lines = [line for line in lines if line["body"]["model"] == "lora"]
    llm = LLM(model=model, dtype=resolve_dtype("auto", False), enforce_eager=True,
              enable_lora=True, max_loras=1, max_lora_rank=8, seed=0)  # fmt: skip
    outputs = llm.chat(
        [line["body"]["messages"] for line in lines],
        SamplingParams(temperature=0, max_tokens=lines[0]["body"]["max_tokens"]),
        lora_request=LoRARequest("lora", 1, adapter),
        use_tqdm=False,
    )
    answers = {line["custom_id"]: o.outputs[0].text for line, o in zip(lines, outputs, strict=True)}
    out.write_text(json.dumps(answers))


def main(argv: list[str]) -> None:
    if argv[0] == "serve":
        serve(int(argv[1]))
    elif argv[0] == "door":
        options = dict(zip(argv[4::2], argv[5::2], strict=True))
        run, max_tokens = int(options.get("--run", 0)), int(options.get("--max-tokens", 4))
        door(Path(argv[1]), argv[2], Path(argv[3]), run, max_tokens)
    elif argv[0] == "embed":
        embed(argv[1], Path(argv[2]), argv[3:])
    elif argv[0] == "score":
        score(argv[1], Path(argv[2]), Path(argv[3]))
    elif argv[0] == "lora":
        lora(argv[1], argv[2], Path(argv[3]), Path(argv[4]))
    else:
        raise SystemExit(f"unknown command {argv[0]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
