"""Said before a run: how many of a file's lines will take an answer already made, and
what that saves (tokens, time at the model's measured speed, cost at the price table)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from core.check import scan
from core.plan.estimate import format_duration
from core.plan.measured import model_record
from core.plan.pricing import PriceTable, Usage, format_money, usage_cost
from core.reuse.index import EarlierLineError, EarlierLines, find_earlier, local_owner
from core.reuse.keys import RequestKeys, model_folder
from core.run.outputs import token_usage
from core.schemas import EngineConfig, JobDefaults, JobSpec


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

    def lines(self) -> list[str]:
        """The forecast for a person ([] when nothing would be reused)."""
        if not self.earlier and not self.duplicates:
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
        return said


def forecast_reuse(
    file: str | Path,
    *,
    model: str | Path,
    jobs_dir: Path,
    prices: PriceTable,
    defaults: JobDefaults | None = None,
    model_map: dict[str, str] | None = None,
    embedding_model: str | None = None,
    on_gpu: bool = False,
    home: Path | None = None,
    owner: str | None = None,
) -> ReuseForecast:
    """The :class:`ReuseForecast` of running ``file`` on ``model`` (with ``model_map`` and
    ``embedding_model`` as a job would), by the keys the worker uses, for a job of
    ``owner`` (:func:`core.reuse.index.reuse_owner`; None: this machine's user), who takes
    only answers of its own jobs."""
    spec = JobSpec(
        job_id="",
        created_at="",
        engine=EngineConfig(model=str(model)),
        defaults=defaults or JobDefaults(),
        model_map=dict(model_map or {}),
        embedding_model=embedding_model,
    )
    keys = RequestKeys(spec, on_gpu)
    forecast = ReuseForecast(currency=prices.currency)
    first: dict[bytes, str] = {}  # key -> the folder of the line that asks it first
    for checked in scan(file, spec.defaults):
        key = keys.of(checked.request) if checked.valid else None
        if key is None:
            continue
        if key in first:
            forecast.duplicates += 1
        else:
            first[key] = model_folder(spec, checked.request)
    asked = list(first)
    earlier = find_earlier(jobs_dir, asked, skip="", owner=owner or local_owner())
    by_model: dict[str, tuple[int, int, int]] = {}  # answers, prompt and output tokens
    with EarlierLines() as earlier_lines:
        for place, source in earlier.items():
            try:
                line = earlier_lines.read(source)
            except EarlierLineError:  # the run will recompute it, and say so
                continue
            forecast.earlier += 1
            prompt, completion = token_usage(line)
            name = Path(first[asked[place]]).name
            answers, prompts, completions = by_model.get(name, (0, 0, 0))
            by_model[name] = (answers + 1, prompts + prompt, completions + completion)
    _price(forecast, by_model, prices, home)
    return forecast


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
