"""Every page that names a job's model or a finish reason knows what kind of job it is
(issue 30, item 3): an embeddings job is named by its embedding model, its vectors are no
failures, and a typed text is embedded by the model the job used."""

from __future__ import annotations

from pathlib import Path

from core.jobs.submit import Submission, submit
from core.schemas import EngineConfig
from core.store import text_query as tq
from core.store.dashboards import Scope, finish_reasons_figure
from core.store.db import Store
from tests.support.jobs import finished_embedding_job, finished_job, rewrite_spec


def embeddings_file(folder: Path) -> Path:
    from core.config import SAMPLE_DATA
    from core.plan.builder import build_file, read_table
    from core.plan.embed_builder import EmbedSpec

    batch = folder / "tickets_embed.jsonl"
    build_file(read_table(SAMPLE_DATA / "tickets.csv"), EmbedSpec("subject", "ticket_id"), batch)
    return batch


def test_an_embeddings_job_is_named_by_its_embedding_model(
    tmp_path, default_model, embedding_model, no_worker
) -> None:
    """Submitted from the Run page with the chat model chosen, as a new user does."""
    submission = Submission(engine=EngineConfig(model=str(default_model)))
    job = submit(embeddings_file(tmp_path), submission, tmp_path / "jobs").job
    spec = job.read_spec()
    assert spec.endpoints == ["/v1/embeddings"] and spec.embeds_only
    assert spec.model_names() == [embedding_model.name]
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(job)
    (model,) = store.query("SELECT model FROM jobs")["model"]
    assert model == embedding_model.name != default_model.name
    # The typed-text search embeds with the job's own model, which is on this machine.
    assert tq.query_model(spec.vectors_folder, 384) == (
        Path(spec.vectors_folder),
        "the job's own model",
    )
    assert Path(spec.vectors_folder) == embedding_model


def test_a_chat_job_is_named_by_its_chat_model(tmp_path, model, no_worker) -> None:
    batch = tmp_path / "chat.jsonl"
    from tests.support.jobs import request_line

    batch.write_text(request_line("a", "hi") + "\n")
    job = submit(batch, Submission(engine=EngineConfig(model=str(model))), tmp_path / "jobs").job
    spec = job.read_spec()
    assert spec.endpoints == ["/v1/chat/completions"] and not spec.embeds
    assert spec.model_names() == [model.name]


def test_vectors_are_no_failures_among_the_finish_reasons(tmp_path) -> None:
    vectors = [{"custom_id": f"e{i}", "input": "text", "vectors": [[0.1, 0.2]]} for i in range(3)]
    vectors.append({"custom_id": "bad", "input": "text", "vectors": None})
    embed = finished_embedding_job(tmp_path / "e", vectors)
    rewrite_spec(embed, endpoints=["/v1/embeddings"])
    chat = finished_job(tmp_path / "c", {"a": "yes", "b": None})
    store = Store(tmp_path / "studio.duckdb")
    store.ingest(embed)
    store.ingest(chat)
    figure = finish_reasons_figure(store, Scope())
    counts = {
        (trace.name, job): n
        for trace in figure.data
        for job, n in zip(trace.x, trace.y, strict=True)
    }
    assert counts[("(vectors)", embed.job_id)] == 3
    assert counts[("(failed)", embed.job_id)] == 1
    assert counts[("stop", chat.job_id)] == 1 and counts[("(failed)", chat.job_id)] == 1
