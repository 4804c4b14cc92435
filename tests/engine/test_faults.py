"""Faults a job must survive, on the real engine: kill -9, cancel, resume.

One job of all three kinds (chat, embeddings, and rerank on a cross-encoder) starts on the
session's warm worker (tests/support/warm_engine.py), beside two small chat jobs on the
same engine, and the worker is killed: the rerun's worker, started cold, is the warm one
from then on. One kill for the three kinds and for jobs side by side, not one each: a kill
costs a cold start (issue 56). The worker runs a job's models one after another (chat
first here), so the kill and the cancel land among the chat answers and the resume runs
the rest of the chat, then every embeddings and rerank line, on the same ledger; the
rerun's worker queues the two small jobs again by itself (issue 41 item 2). The kill is
the resident worker's: none of its engine's child processes outlives it. Then the resumed
run's engine process alone is killed, and the job reloads its model and goes on."""

import json
import os
import signal
from pathlib import Path

import psutil
import pytest
from vllm.entrypoints.pooling.scoring.protocol import RerankResponse

from core.endpoints import RERANK_URL
from core.jobs.folder import JobFolder, create_job, start_worker
from core.jobs.ledger import reconcile, verify
from core.schemas import EngineConfig
from tests.support.cli import run_cli
from tests.support.cross_encoder_batches import DOCS, LONG, QUERY, _line
from tests.support.embedding_lines import decoded, embed_line
from tests.support.warm_engine import run_in_background, wait_until

pytestmark = pytest.mark.engine
CHUNK = 8
# Enough work that a resumed run is still running when the test looks and cancels. Every
# answer is as long as its max_tokens (min_tokens), and those take four lengths in turn:
# requests in one engine step end together, so answers of one length, all inside the
# engine at once beside the small jobs, came in one step and the chat ended between two
# looks of the test.
COUNT = 120
OUTPUT_TOKENS = (8, 16, 24, 32)
EMBEDDINGS = 300  # d000..: after the chat, as the worker runs a job's models in turn
RERANKS = 200  # r000..: after the embeddings, on the cross-encoder
CHAT_IDS = [f"q{i:03d}" for i in range(COUNT)]
EMBEDDING_IDS = [f"d{i:03d}" for i in range(EMBEDDINGS)]
RERANK_IDS = [f"r{i:03d}" for i in range(RERANKS)]
ANSWERED = CHAT_IDS + EMBEDDING_IDS + RERANK_IDS  # and "long", past the reranker's limit


def chat_line(i: int) -> dict:
    return {
        "custom_id": f"q{i:03d}",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": "m",
            "messages": [{"role": "user", "content": f"Count to {i % 7 + 2} (line {i})."}],
            "max_tokens": OUTPUT_TOKENS[i % 4],
            "min_tokens": OUTPUT_TOKENS[i % 4],
            "temperature": 0,
            # Seeded, as most chat jobs of the run are: the resume's worker, the warm one for
            # the tests after this, then loads SmolLM2 with the settings those jobs run on
            # (chunked prefill off: core.run.engine.fit_to_requests), not one to reload.
            "seed": i,
        },
    }


BESIDE = 60  # lines of each small job beside the big one


def small_job(tmp_path: Path, home: Path, model: Path, name: str) -> JobFolder:
    """A chat job started beside the big one. Its answers are 4 or 32 tokens long: requests
    in one engine step end together, so two lengths give it first results long before
    its last. Seeded, as the big job's chats: one engine serves both (chunked prefill off)."""
    lines = [
        {
            "custom_id": f"{name}-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": "m",
                "messages": [{"role": "user", "content": f"Tell a story about {name} {i}."}],
                "max_tokens": (4, 32)[i % 2],
                "temperature": 0,
                "seed": i,
            },
        }
        for i in range(BESIDE)
    ]
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    job = create_job(path, home / "jobs", EngineConfig(model=str(model)))
    start_worker(job)
    return job


def batch(tmp_path: Path) -> tuple[Path, list[dict]]:
    lines = [chat_line(i) for i in range(COUNT)]
    lines += [embed_line(f"d{i:03d}", input=f"Ticket {i}: the export fails " * 8)
              for i in range(EMBEDDINGS)]  # fmt: skip
    lines += [_line(f"r{i:03d}", RERANK_URL, {"query": f"refund {i}?", "documents": DOCS})
              for i in range(RERANKS)]  # fmt: skip
    lines.append(_line("long", RERANK_URL, {"query": QUERY, "documents": [LONG]}))
    path = tmp_path / "batch.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path, lines


def start_run(home, path, out, reranker):
    return run_in_background(home, str(path), "-o", str(out), "--chunk-size", str(CHUNK),
                             "--map", f"reranker={reranker}", "--skip-invalid")  # fmt: skip


def success_ids(job: JobFolder) -> list[str]:
    return [json.loads(x)["custom_id"] for x in job.output.read_text().splitlines()]


def test_kill_cancel_and_resume_lose_nothing_and_repeat_nothing_in_chat_embeddings_and_rerank(
    warm_home, tmp_path, default_model, cross_encoder_model
):
    (path, lines), out = batch(tmp_path), tmp_path / "out.jsonl"

    # 1. kill -9 the worker once results of this job and of two small jobs beside it on
    # the same engine have been written.
    cli, job = start_run(warm_home, path, out, cross_encoder_model)
    beside = [small_job(tmp_path, warm_home, default_model, f"beside{n}") for n in range(2)]
    wait_until(job, lambda s: s.done >= CHUNK + 1 and s.state == "running")
    for small in beside:
        wait_until(small, lambda s: s.state == "running" and s.done > 0)
    worker = job.read_status().pid
    assert {small.read_status().pid for small in beside} == {worker}  # one worker, side by side
    engine_processes = psutil.Process(worker).children(recursive=True)
    assert engine_processes  # the resident worker's engine cores run in child processes
    os.kill(worker, signal.SIGKILL)
    cli.communicate(timeout=60)
    assert cli.returncode == 3
    assert job.read_status().interrupted  # the UI shows it as interrupted, with Resume
    # None of the killed worker's engine processes goes on holding a model.
    _, alive = psutil.wait_procs(engine_processes, timeout=30)
    assert not alive, [p.pid for p in alive]
    written_before = len(success_ids(job))
    assert 0 < len(reconcile(job).missing) < len(lines)  # killed midway
    for small in beside:
        wait_until(small, lambda s: s.interrupted, timeout=60)
    made = [len(reconcile(small).missing) for small in beside]
    assert all(0 < missing < BESIDE for missing in made), made  # killed midway, each

    # 2. The same command again continues the same job: nothing lost, nothing twice.
    cli, job2 = start_run(warm_home, path, out, cross_encoder_model)
    assert job2.job_id == job.job_id
    # A new answer written (succeeded, not done: the resume writes the skipped long line's
    # error first, and a cancel then kept nothing new: "assert 8 < 8" below, seen once).
    wait_until(job, lambda s: s.state == "running" and s.succeeded > written_before)

    # 2b. The engine's own process killed (as the kernel's out-of-memory killer would): the
    # job loads its model afresh by itself and goes on, its history saying so.
    cores = [p for p in psutil.Process(job.read_status().pid).children(recursive=True)
             if "EngineCore" in p.name()]  # fmt: skip
    assert cores  # the rerun's worker holds the chat model's engine core
    for core in cores:
        core.kill()
    done = job.read_status().done

    def went_on(status):
        noted = any("the engine's process ended" in h.get("note", "") for h in status.history)
        return noted and status.state == "running" and status.done > done

    status = wait_until(job, lambda s: went_on(s) or s.is_final, timeout=600)
    assert went_on(status), (status.state, status.message, status.history[-4:])

    # 3. Cancel while it runs: the engine stops (the requests in it are aborted), what
    # finished is kept, and the job ends cancelled saying how many of its lines have a
    # result, in the numbers output.jsonl holds.
    result = run_cli("cancel", job.job_id)
    assert "the engine stops within seconds" in result.stdout
    cli.communicate(timeout=60)
    status = job.read_status()
    assert status.state == "cancelled" and not status.interrupted
    kept = len(success_ids(job))
    assert written_before < kept < len(ANSWERED)
    assert f"{status.done} of {len(lines)} requests have a result ({kept} succeeded" in (
        status.message
    )
    assert f"{status.left} were cancelled without one" in status.message
    cancelled_report = reconcile(job)
    assert len(cancelled_report.missing) == status.left > 0  # to be resumed

    # 4. Resume by job id finishes the job: the rest of the chat, then the embeddings and
    # the reranks, each on its model.
    result = run_cli("resume", job.job_id)
    assert result.returncode == 4, result.stderr[-2000:]  # completed; the long line failed
    assert sorted(success_ids(job)) == sorted(ANSWERED)  # none missing, none twice
    final = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["custom_id"] for x in final] == [line["custom_id"] for line in lines]
    assert verify(job).ok
    assert job.read_status().succeeded == len(ANSWERED)
    final = {x["custom_id"]: x for x in final}
    assert all(len(decoded(final[i]["response"]["body"]["data"][0])) == 384
               for i in EMBEDDING_IDS)  # fmt: skip
    assert "at most 64 per pair" in final["long"]["error"]["message"]
    for custom_id in (RERANK_IDS[0], RERANK_IDS[-1]):
        rerank = RerankResponse.model_validate(final[custom_id]["response"]["body"])
        scores = [r.relevance_score for r in rerank.results]
        assert len(scores) == 3 and scores == sorted(scores, reverse=True)

    # 5. The rerun's worker queued the small jobs again by itself: each whole, once.
    for small in beside:
        status = wait_until(small, lambda s: s.is_final, timeout=600)
        report = reconcile(small)
        assert (status.state, status.succeeded) == ("completed", BESIDE), status.message
        assert report.complete and not report.duplicates  # nothing lost, nothing twice
