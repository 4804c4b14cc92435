"""Where Batch Studio keeps its files; every location can be moved by an environment variable.

- ``BATCH_STUDIO_HOME``: the data folder (jobs, uploads, inbox, people's work, the DuckDB
  file);
  default ``data/`` in the checkout.
- ``BATCH_STUDIO_MODELS``: the models folder, where the built-in models are prepared and where
  the app looks for other model folders; default ``~/.cache/batch-studio/models``.

It also holds the one setting read from the environment that changes what a job does by
default: ``BATCH_STUDIO_REUSE`` (:func:`reuse_default`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DATA = REPO_ROOT / "sample_data"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
DEFAULT_EMBEDDING_MODEL_NAME = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class DataPaths:
    """The folders and files under one data folder."""

    home: Path

    @property
    def jobs(self) -> Path:
        return self.home / "jobs"

    @property
    def uploads(self) -> Path:
        return self.home / "uploads"

    @property
    def inbox(self) -> Path:
        return self.home / "inbox"

    @property
    def database(self) -> Path:
        return self.home / "studio.duckdb"

    @property
    def human(self) -> Path:
        """Review labels, preferences and samples: written here first, then indexed."""
        return self.home / "human"

    def ensure(self) -> DataPaths:
        for folder in (self.jobs, self.uploads, self.inbox):
            folder.mkdir(parents=True, exist_ok=True)
        return self


_HOMES: dict[str, Path] = {}


def data_home() -> Path:
    """The data folder named by ``BATCH_STUDIO_HOME`` (not created: see :func:`data_paths`),
    resolved once per absolute value (what every API poll asks)."""
    named = os.path.expanduser(os.environ.get("BATCH_STUDIO_HOME", REPO_ROOT / "data"))
    home = _HOMES.get(named)
    if home is None:
        home = Path(named).resolve()
        if os.path.isabs(named):  # a relative one moves with the working folder
            _HOMES[named] = home
    return home


def data_paths() -> DataPaths:
    """The data folder named by ``BATCH_STUDIO_HOME``, created if missing."""
    return DataPaths(data_home()).ensure()


def models_dir() -> Path:
    """The models folder named by ``BATCH_STUDIO_MODELS``."""
    default = Path.home() / ".cache" / "batch-studio" / "models"
    return Path(os.environ.get("BATCH_STUDIO_MODELS", default)).expanduser().resolve()


def default_model_dir() -> Path:
    """The Hugging Face folder of the built-in model (prepared by ``core.model_folders``)."""
    return models_dir() / DEFAULT_MODEL_NAME


def default_embedding_model_dir() -> Path:
    """The Hugging Face folder of the built-in embedding model (``core.model_folders``)."""
    return models_dir() / DEFAULT_EMBEDDING_MODEL_NAME


PAGE_WAIT_ENV = "BATCH_STUDIO_PAGE_WAIT"


def page_wait_seconds() -> float | None:
    """How long a page waits for figures it computes for the first time (over a million
    results, seconds) before it shows "Computing…" and draws them when they are done:
    ``BATCH_STUDIO_PAGE_WAIT`` seconds, default 0.3; "none" waits as long as it takes."""
    value = os.environ.get(PAGE_WAIT_ENV, "0.3").strip().lower()
    if value == "none":
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return 0.3


REUSE_ENV = "BATCH_STUDIO_REUSE"


def reuse_default() -> bool:
    """Whether a job takes the answers earlier jobs already made (core/reuse) when its
    submitter did not say (``core run`` without ``--reuse``/``--no-reuse``, the Batch API
    without ``metadata.reuse``, Run's checkbox as it opens): ``BATCH_STUDIO_REUSE``, on
    unless "0". The test suite turns it off, so a test's engine runs every request it
    sends even where an earlier test in the same home asked the same; the tests of reuse
    turn it on for their jobs."""
    return os.environ.get(REUSE_ENV, "1").strip() != "0"
