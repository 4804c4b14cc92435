"""What Upload & check hands to Run: one typed object in the session, not loose keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st

from core.check import CheckReport, file_signature
from core.schemas import JobDefaults

KEY = "checked_batch"


@dataclass(frozen=True)
class CheckedBatch:
    """A batch file ready to run, with what its check chose and found.

    Attributes:
        path: the file on disk.
        name: the file as the user knows it (the upload's name, or the ``s3://`` URI).
        report: Upload & check's report of it; None for a file Run fetched itself.
        signature: the file's path, size and time when ``report`` was made.
        model: the model it was checked with (Run offers it first).
        model_map: each ``body.model`` of the file and the model folder it runs on.
        defaults: the job defaults for fields a body leaves out.
        estimate: the estimate (``Estimate.to_dict()``) made for it, if any.
    """

    path: Path
    name: str
    report: CheckReport | None = None
    signature: tuple[str, int, int] | None = None
    model: str | None = None
    model_map: dict[str, str] = field(default_factory=dict)
    defaults: JobDefaults = field(default_factory=JobDefaults)
    estimate: dict | None = None

    def report_of_this_file(self) -> CheckReport | None:
        """The check's report, only while the file is the one it checked."""
        if self.report is None or self.signature != file_signature(self.path):
            return None
        return self.report

    def mapped_elsewhere(self) -> dict[str, str]:
        """The ``body.model`` names sent to a folder other than the checked model (an A/B
        test in one job), with their folders."""
        return {
            name: folder
            for name, folder in self.model_map.items()
            if folder and folder != self.model
        }


def hand_to_run(batch: CheckedBatch) -> None:
    st.session_state[KEY] = batch


def handed_to_run() -> CheckedBatch | None:
    """The batch handed to Run, while its file is still there."""
    batch = st.session_state.get(KEY)
    return batch if isinstance(batch, CheckedBatch) and batch.path.is_file() else None


def take_back() -> None:
    """Nothing is ready to run (the file checked last has no valid line, or waits for a
    cost to be confirmed)."""
    st.session_state.pop(KEY, None)
