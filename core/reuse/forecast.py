"""Said before a run: how many of a file's lines will take an answer already made, and
what that saves (tokens, time at the model's measured speed, cost at the price table)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.check.background import checked
from core.check.digests import RequestDigests
from core.check.report import CheckReport
from core.jobs.folder import local_owner
from core.model_folders import weight_manifest
from core.plan.estimate import format_duration
from core.plan.measured import model_record
from core.plan.pricing import PriceTable, Usage, format_money, usage_cost
from core.reuse.key_files import jobs_on_disk
from core.reuse.keys import RequestKeys
from core.schemas import JobSpec

if TYPE_CHECKING:
    import numpy as np


@dataclass
class ReuseForecast:
    """What a run of a file would take from answers already made.

    Attributes:
        earlier: lines an earlier job already answered.
        duplicates: lines that repeat a deterministic request earlier in the file.
        prompt_tokens, completion_tokens: the earlier answers' tokens (a duplicate's are
            not known before its first copy runs).
        seconds: the time those output tokens took at the model's measured speed (None
            where no run of it was measured).
        cost: what those tokens cost at the price table (None where it has no price).
    """

    earlier: int = 0
    duplicates: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float | None = None
    cost: float | None = None
    currency: str = "USD"
    keyed: int = 0  # lines whose answer may be reused (deterministic, reuse on)
    settings: str = ""  # the engine settings the keys assume (RequestKeys.settings)

    def lines(self) -> list[str]:
        """The forecast for a person, and the settings it assumed ([] when no line could
        take an answer already made)."""
        if not self.keyed:
            return []
        said = []
        if self.earlier:
            saved = [f"{self.prompt_tokens:,} prompt and {self.completion_tokens:,} output tokens"]
            if self.seconds is not None:
                saved.append(f"about {format_duration(self.seconds)} of engine time")
            if self.cost is not None:
                saved.append(format_money(self.cost, self.currency))
            one = self.earlier == 1
            takes = (
                "line takes an answer an earlier job" if one else "lines take answers earlier jobs"
            )
            said.append(f"{self.earlier:,} {takes} made, saving " + ", ".join(saved))
        if self.duplicates:
            repeats = "line repeats" if self.duplicates == 1 else "lines repeat"
            said.append(f"{self.duplicates:,} {repeats} a request earlier in the file: run once")
        if not said:
            said.append("no line takes an answer an earlier job made")
        said.append(f"forecast for {self.settings}; other engine settings on Run change it")
        return said


def forecast_reuse(
    digests: RequestDigests,
    spec: JobSpec,
    *,
    jobs_dir: Path,
    prices: PriceTable,
    home: Path | None = None,
    owner: str | None = None,
) -> ReuseForecast:
    """The :class:`ReuseForecast` of running a file as the job ``spec`` (the settings
    :func:`core.jobs.submit.planned_spec` says a submission runs with), by the keys the
    worker uses, for a job of ``owner`` (:func:`core.reuse.index.reuse_owner`; None: this
    machine's user), who takes only answers of its own jobs.

    ``digests`` are those the file's check kept (:func:`digests_for`): the file is not
    read again."""
    keys = RequestKeys(spec)
    forecast = ReuseForecast(currency=prices.currency, settings=keys.settings())
    owner = owner or local_owner()
    if not jobs_dir.is_dir() or not jobs_on_disk(jobs_dir):
        # No job holds an answer, so none is earlier: only the repeats are counted, without
        # numpy and the index (their import is a tenth of a 300,000-line check's time).
        forecast.keyed, distinct = keys.distinct(digests)
        forecast.duplicates = forecast.keyed - distinct
        _price(forecast, {}, prices, home)
        return forecast
    import numpy as np

    from core.reuse.index import EarlierLineError, EarlierLines, find_earlier
    from core.run.outputs import token_usage

    folders: list[str] = []
    by_folder = list(keys.of_digests(digests))
    for folder, folder_keys in by_folder:
        folders.append(folder)
        forecast.keyed += len(folder_keys)
    everything = np.concatenate([k for _, k in by_folder]) if by_folder else np.empty(0, "V16")
    first = first_of_each(everything)
    forecast.duplicates = forecast.keyed - len(first)
    folder_of_line = np.repeat(np.arange(len(by_folder)), [len(k) for _, k in by_folder])
    folder_of_key = folder_of_line[first]
    earlier = find_earlier(jobs_dir, everything[first], skip="", owner=owner)
    by_model: dict[str, tuple[int, int, int]] = {}  # answers, prompt and output tokens
    with EarlierLines() as earlier_lines:
        for place, source in earlier.items():
            try:
                line = earlier_lines.read(source)
            except EarlierLineError:  # the run will recompute it, and say so
                continue
            forecast.earlier += 1
            prompt, completion = token_usage(line)
            name = Path(folders[folder_of_key[place]]).name
            answers, prompts, completions = by_model.get(name, (0, 0, 0))
            by_model[name] = (answers + 1, prompts + prompt, completions + completion)
    _price(forecast, by_model, prices, home)
    return forecast


def first_of_each(keys: np.ndarray) -> np.ndarray:
    """Where each key of ``keys`` (16-byte items) first stands, in order: one sort of their
    first halves as integers (a sort by both, or of 16-byte items, takes ten times as long),
    by both only where two keys share a first half."""
    import numpy as np

    halves = keys.view(np.uint64).reshape(-1, 2)
    order = np.argsort(halves[:, 0])
    ordered = halves[order]
    same_first = ordered[1:, 0] == ordered[:-1, 0]
    if (same_first & (ordered[1:, 1] != ordered[:-1, 1])).any():
        order = np.lexsort((halves[:, 1], halves[:, 0]))
        ordered = halves[order]
        same_first = ordered[1:, 0] == ordered[:-1, 0]
    new = np.ones(len(order), dtype=bool)
    new[1:] = ~(same_first & (ordered[1:, 1] == ordered[:-1, 1]))
    if not len(order):
        return order
    return np.sort(np.minimum.reduceat(order, np.flatnonzero(new)))


def digests_for(report: CheckReport, spec: JobSpec) -> RequestDigests:
    """The digests of the file ``report`` checked, as a job of ``spec`` builds its requests:
    the report's own when it was made with the job's defaults (which fill the requests);
    else those of a structural check with them (made once per file and defaults,
    :func:`core.check.background.checked`)."""
    if report.digests is not None and report.defaults == spec.defaults.model_dump():
        return report.digests
    return checked(report.path, defaults=spec.defaults).digests or RequestDigests()


def _price(
    forecast: ReuseForecast,
    by_model: dict[str, tuple[int, int, int]],
    prices: PriceTable,
    home: Path | None,
) -> None:
    """Adds each model's saved tokens, their time at its measured speed and their cost (by
    the one pricing rule: what the answers would have cost, computed)."""
    seconds = cost = 0.0
    timed = priced = True
    for name, (answers, prompt, completion) in by_model.items():
        forecast.prompt_tokens += prompt
        forecast.completion_tokens += completion
        run = model_record(name, home).throughput
        took: float | None = None
        if run is not None and run.output_tokens_per_s > 0:
            took = completion / run.output_tokens_per_s
            seconds += took
        elif completion:
            timed = False
        usage = Usage(
            reused=answers,
            reused_prompt_tokens=prompt,
            reused_completion_tokens=completion,
            reused_engine_seconds=took,
        )
        spent = usage_cost(prices, name, usage).saved
        if spent is None:
            priced = False
        else:
            cost += spent
    forecast.seconds = seconds if timed and by_model else None
    forecast.cost = cost if priced and by_model else None


class BackgroundForecast:
    """:func:`forecast_reuse` in a thread, so a page stays live while a model's weights are
    hashed the first time (minutes for a large model; cached after,
    :func:`core.model_folders.weight_manifest`) and can show how far it got.

    Attributes:
        hashed, to_hash: bytes of model files hashed so far, and to hash (0: none).
        forecast: the forecast once done; ``error`` holds the reason when it failed.
    """

    def __init__(self, report: CheckReport, spec: JobSpec, **options: Any) -> None:
        self.hashed = self.to_hash = 0
        self.forecast: ReuseForecast | None = None
        self.error: str | None = None
        self.started = time.monotonic()
        self._thread = threading.Thread(
            target=self._run, args=(report, spec, options), name="reuse-forecast", daemon=True
        )
        self._thread.start()

    def _progress(self, hashed: int, to_hash: int) -> None:
        self.hashed, self.to_hash = hashed, to_hash

    def _run(self, report: CheckReport, spec: JobSpec, options: dict[str, Any]) -> None:
        try:
            if spec.reuse:  # hashed here first, with progress; the forecast finds them cached
                for folder in dict.fromkeys([spec.engine.model, *spec.model_map.values()]):
                    weight_manifest(Path(folder), self._progress)
            self.forecast = forecast_reuse(digests_for(report, spec), spec, **options)
        except OSError as exc:
            self.error = f"the reuse forecast could not read a file: {exc}"
        except Exception as exc:  # shown on the page instead of killing the thread silently
            self.error = f"the reuse forecast stopped on an unexpected error: {exc!r}"

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def wait(self, timeout: float | None = None) -> bool:
        self._thread.join(timeout)
        return self.done
