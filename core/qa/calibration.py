"""A judge is offered only once it has shown it can judge: a short calibration.

Before a verdict judge runs on a model, the model grades :data:`ITEMS`, ten answers whose
verdict is known (five clear passes, five clear fails), rendered through the judge's own
template and asked exactly as the real judge job will ask (system message, verdict schema,
``max_tokens``). An item is *agreed* when the verdict is the known one and does not
contradict its own score (``core.store.judged``'s rule). A model that agrees on fewer than
:data:`MIN_AGREED` items is refused as a judge, with what it did and which model to choose.

The calibration is a small job like any other (queue, Monitor, Jobs), made by ``submit``;
its outcome is kept in the data folder under ``judge_calibration/``, one file per model
folder, template, system message, schema and ``max_tokens`` (:func:`calibration_key`), so a
judge is calibrated once, not at every run. On the built-in SmolLM2-135M every verdict of a
first real run contradicted its own score: it cannot judge, and calibration says so.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from core.config import data_paths
from core.files import write_atomic
from core.jobs.folder import JobFolder, JobUnreadable
from core.json_strict import strict_json
from core.run.outputs import answer_text
from core.store.judged import FAIL_SCORE_AT_LEAST_CONTRADICTS, PASS_SCORE_AT_MOST_CONTRADICTS

VERSION = 1  # of ITEMS and the rule: a change calibrates every judge again
MIN_AGREED = 8  # of the ten items
FOLDER = "judge_calibration"  # under the data folder
POLL_SECONDS = 1.0
CHOOSE = (
    "choose a bigger instruct model as the judge (7B-8B instruct models, e.g. Qwen2.5-7B-"
    "Instruct or Llama-3.1-8B-Instruct, on a GPU): put its Hugging Face folder under the "
    "models folder (BATCH_STUDIO_MODELS; docs/configuration.md) and pick it"
)


@dataclass(frozen=True)
class Item:
    """An answer whose verdict is known."""

    custom_id: str
    prompt: str
    answer: str
    verdict: Literal["pass", "fail"]


ITEMS = (
    Item("cal_capital", "What is the capital of France?", "Paris is the capital.", "pass"),
    Item("cal_sum", "What is 2 + 2?", "2 + 2 = 4.", "pass"),
    Item("cal_week", "How many days are in a week?", "A week has seven days.", "pass"),
    Item("cal_translate", "Translate 'merci' from French to English.", "Thank you.", "pass"),
    Item("cal_water", "At what temperature in Celsius does water boil at sea level?",
         "Water boils at 100 degrees Celsius at sea level.", "pass"),
    Item("cal_minus", "What is 10 minus 3?", "10 minus 3 is 13.", "fail"),
    Item("cal_japan", "What is the capital of Japan?", "The capital of Japan is Berlin.", "fail"),
    Item("cal_spider", "How many legs does a spider have?", "A spider has four legs.", "fail"),
    Item("cal_fruit", "Name a fruit.", "A hammer.", "fail"),
    Item("cal_planet", "Which planet is closest to the Sun?", "Jupiter is closest to the Sun.",
         "fail"),
)  # fmt: skip


class Calibration(BaseModel):
    """A judge's calibration, as kept in ``judge_calibration/<key>.json``.

    Attributes:
        state: ``running`` (its job has not ended), ``passed`` or ``failed``.
        agreed: items whose verdict was the known one and did not contradict its score.
        contradicted: verdicts that contradicted their own score.
        not_graded: answers that were no verdict (or a failed request).
    """

    model_config = ConfigDict(extra="ignore")

    key: str
    model: str
    job_id: str
    state: Literal["running", "passed", "failed"] = "running"
    items: int = len(ITEMS)
    agreed: int = 0
    contradicted: int = 0
    not_graded: int = 0
    finished_at: str | None = None

    @property
    def passed(self) -> bool:
        return self.state == "passed"

    def summary(self) -> str:
        """What the calibration found, in a sentence."""
        name = Path(self.model).name or self.model
        if self.state == "running":
            return f"{name} is being calibrated (job {self.job_id})"
        found = (
            f"{name} agreed with the known verdict on {self.agreed} of {self.items} "
            f"calibration answers (at least {MIN_AGREED} needed)"
        )
        if self.contradicted:
            found += f"; {self.contradicted} verdict(s) contradicted their own score"
        if self.not_graded:
            found += f"; {self.not_graded} answer(s) were no verdict"
        return found

    def refusal(self) -> str:
        """Why this model is not offered as a judge, and what to choose instead."""
        return f"{self.summary()}: it cannot judge. {CHOOSE[0].upper()}{CHOOSE[1:]}."


class NotCalibrated(Exception):
    """A judge whose calibration failed, or has not finished; ``calibration`` says which."""

    def __init__(self, calibration: Calibration) -> None:
        super().__init__(calibration.refusal() if calibration.state == "failed" else
                         calibration.summary())  # fmt: skip
        self.calibration = calibration


def _folder_identity(model: str) -> list[list[str | int]]:
    """The model folder's config and weight files by name, size and modification time: a
    folder whose weights change is calibrated again (without reading gigabytes to hash)."""
    folder = Path(model)
    if not folder.is_dir():
        return []
    return [
        [p.name, p.stat().st_size, p.stat().st_mtime_ns]
        for p in sorted(folder.iterdir())
        if p.suffix in (".safetensors", ".bin", ".gguf", ".json")
    ]


def calibration_key(
    model: str, template: str, max_tokens: int, system: str, schema: dict[str, object]
) -> str:
    """What a calibration holds for: the model folder, how the judge is asked, the items."""
    folder = str(Path(model).expanduser().resolve())
    parts = [VERSION, folder, _folder_identity(folder), template, system, schema, max_tokens]
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def _path(home: Path, key: str) -> Path:
    return home / FOLDER / f"{key}.json"


def _read(home: Path, key: str) -> Calibration | None:
    try:
        return Calibration.model_validate_json(_path(home, key).read_bytes())
    except (OSError, ValidationError):  # none yet, or unreadable: calibrate again
        return None


def _write(home: Path, calibration: Calibration) -> None:
    path = _path(home, calibration.key)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, calibration.model_dump_json(indent=1))


def grade(answers: dict[str, str | None]) -> tuple[int, int, int]:
    """``(agreed, contradicted, not_graded)`` of the judge's answers to :data:`ITEMS`, by
    ``custom_id`` (a missing or failed one is not graded)."""
    agreed = contradicted = not_graded = 0
    for item in ITEMS:
        try:
            value = strict_json(answers.get(item.custom_id) or "", unique_keys=True)
            verdict, score = value["verdict"], value["score"]
            if verdict not in ("pass", "fail") or not isinstance(score, int | float):
                raise ValueError("not a verdict")
        except (ValueError, TypeError, KeyError):
            not_graded += 1
            continue
        if (verdict == "pass" and score <= PASS_SCORE_AT_MOST_CONTRADICTS) or (
            verdict == "fail" and score >= FAIL_SCORE_AT_LEAST_CONTRADICTS
        ):
            contradicted += 1
        elif verdict == item.verdict:
            agreed += 1
    return agreed, contradicted, not_graded


def _answers(job: JobFolder) -> dict[str, str | None]:
    answers: dict[str, str | None] = {}
    if job.output.is_file():
        for raw in job.output.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                line = json.loads(raw)
                answers[line["custom_id"]] = answer_text(line)
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a torn line: that item is not graded
    return answers


def _settle(home: Path, calibration: Calibration) -> Calibration | None:
    """A running calibration whose job ended, graded (and kept); None where its job was
    cancelled, failed or is gone (it is calibrated again); else as it is."""
    job = JobFolder(home / "jobs" / calibration.job_id)
    try:
        status = job.read_status()
    except JobUnreadable:
        status = None
    if status is None or not job.path.is_dir() or (status.is_final and status.state != "completed"):
        _path(home, calibration.key).unlink(missing_ok=True)
        return None
    if not status.is_final:
        return calibration
    agreed, contradicted, not_graded = grade(_answers(job))
    done = calibration.model_copy(
        update={
            "state": "passed" if agreed >= MIN_AGREED else "failed",
            "agreed": agreed,
            "contradicted": contradicted,
            "not_graded": not_graded,
            "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
    )
    _write(home, done)
    return done


def lookup(key: str, home: Path | None = None) -> Calibration | None:
    """The calibration kept for ``key`` (a finished job graded now), or None."""
    home = home or data_paths().home
    found = _read(home, key)
    if found is not None and found.state == "running":
        found = _settle(home, found)
    return found


def record(key: str, model: str, job_id: str, home: Path | None = None) -> Calibration:
    """Keeps a calibration job just started for ``key``."""
    calibration = Calibration(key=key, model=model, job_id=job_id)
    _write(home or data_paths().home, calibration)
    return calibration


def wait(
    key: str,
    home: Path | None = None,
    timeout: float = 3600.0,
    tick: Callable[[Calibration], None] | None = None,
) -> Calibration | None:
    """Waits for the calibration of ``key`` to end (the CLI waits; pages do not)."""
    deadline = time.monotonic() + timeout
    while True:
        found = lookup(key, home)
        if found is None or found.state != "running" or time.monotonic() > deadline:
            return found
        if tick is not None:
            tick(found)
        time.sleep(POLL_SECONDS)
