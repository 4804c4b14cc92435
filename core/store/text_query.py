""" "Similar to this text": a typed text embedded with a job's model, then searched.

The UI process must not load vLLM (it owns its process; a crash or out-of-memory there
must not take the pages down), so the text goes to the resident worker
(:mod:`core.run.resident`), which embeds it on the warm model through the same request path
as a batch job's embeddings lines (the same vectors). The first text loads the model there
(a worker is started if none runs); later ones take milliseconds while it stays loaded.
While the worker runs a job, a text is refused at once, saying so (texts are served
between jobs).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from core.config import data_paths, default_embedding_model_dir
from core.jobs.engine_files import EngineBusy, embed_on_engine
from core.model_folders import embedding_limits, is_embedding_model, is_model_folder
from core.store.vectors import VectorError

EMBED_TIMEOUT_SECONDS = 300  # a cold start on a busy CPU machine, with room to spare


def query_model(job_model: str | Path | None, dimensions: int | None) -> tuple[Path | None, str]:
    """The model folder that embeds a typed text for a job, and a note saying why it, or
    why none.

    The job's own model folder when it is an embedding model on this machine (the same
    model makes comparable vectors); else the built-in embedding model if its vectors
    have the job's size. A text embedded by another model than the job's is only roughly
    comparable, and the note says so.
    """
    if job_model and is_model_folder(Path(job_model)) and is_embedding_model(job_model):
        return Path(job_model), "the job's own model"
    builtin = default_embedding_model_dir()
    if not is_model_folder(builtin):
        return None, (
            f"the job's model folder {job_model} is not on this machine, and the built-in "
            "embedding model is not prepared (python -m core models prepare)"
        )
    size = embedding_limits(builtin).dimensions
    if dimensions is not None and size is not None and size != dimensions:
        return None, (
            f"the job's model folder {job_model} is not on this machine, and the built-in "
            f"embedding model makes {size}-d vectors, not the job's {dimensions}"
        )
    if job_model and Path(job_model).name == builtin.name:
        return builtin, "the built-in model, the job's model by name"
    return builtin, (
        f"the built-in model: the job's model folder {job_model} is not on this machine; "
        "its vectors are comparable only if the job used the same model"
    )


def embed_texts(
    model: str | Path, texts: list[str], timeout: float = EMBED_TIMEOUT_SECONDS
) -> np.ndarray:
    """The texts' vectors as an (n, d) float32 matrix, made by the resident worker's engine.

    Raises:
        VectorError: the folder is no model, the engine refused, or no answer came in time.
    """
    folder = Path(model).expanduser()
    if not is_model_folder(folder):
        raise VectorError(f"the text could not be embedded: {folder} is not a model folder")
    try:
        answer = embed_on_engine(data_paths().home, folder.resolve(), texts, timeout)
    except EngineBusy as exc:
        raise VectorError(f"the text could not be embedded: {exc}") from None
    if answer.error is not None or answer.vectors is None:
        raise VectorError(f"the text could not be embedded: {answer.error}")
    return np.asarray(answer.vectors, dtype=np.float32)
