""" "Similar to this text": a typed text embedded with a job's model, then searched.

The UI process must not load vLLM (it owns its process; a crash or out-of-memory there
must not take the pages down), so the text is embedded by a child process,
``python -m core embed`` (:mod:`core.cli.embed`), which loads the model, embeds and prints
the vectors as JSON. Each call loads the model again: about 20 s on a 2-core CPU machine
for all-MiniLM-L6-v2 (23 s measured on a busy one), nearly all of it start-up, so callers
cache the vector per (model, text).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from core.config import REPO_ROOT, default_embedding_model_dir
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
    """The texts' vectors as an (n, d) float32 matrix, made by ``python -m core embed``.

    Raises:
        VectorError: the command failed (its own last words say why) or ran out of time.
    """
    command = [sys.executable, "-m", "core", "embed", "--model", str(model), "--stdin"]
    try:
        done = subprocess.run(
            command,
            input=json.dumps(texts),
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=REPO_ROOT,
            env=os.environ.copy(),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise VectorError(f"embedding the text took more than {timeout:.0f} s") from None
    if done.returncode != 0:
        said = [line for line in done.stderr.splitlines() if line.startswith("error:")]
        reason = said[-1] if said else (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise VectorError(f"the text could not be embedded: {reason.removeprefix('error: ')}")
    try:
        vectors = json.loads(done.stdout)["vectors"]
    except (ValueError, KeyError, TypeError):
        raise VectorError("the embed command printed no vectors") from None
    return np.asarray(vectors, dtype=np.float32)
