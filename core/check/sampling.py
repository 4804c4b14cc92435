"""The sampling fields of a body, checked and mapped onto vLLM's ``SamplingParams``.

Each rule about a field, or between two fields the engine would refuse together (such as
``min_tokens`` above ``max_tokens``), lives here once, for every endpoint. Rules that need
the model (token ids in its vocabulary, prompts within its context) are checked with the
model in :mod:`core.check.summary`. ``tests/engine/test_sampling_sweep.py`` runs generated
combinations of these fields on the real engine.
"""

from __future__ import annotations

import math
import re
from typing import Any

from core.schemas import SAMPLING_BOUNDS, JobDefaults

# Fields a body may carry that change nothing about generation.
PASSIVE_FIELDS = {"model", "metadata", "user", "store", "service_tier", "stream"}


class RequestError(ValueError):
    """A body the engine cannot run; the message names the field and what to change.

    ``param`` is that field (``body.min_tokens``; ``body.messages`` for ``messages[2]...``),
    read from the message's first word where it names one.
    """

    code = "invalid_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        named = re.match(r"body\.[A-Za-z_]+(?:\.[A-Za-z_]+)*|(messages|input)\[", message)
        self.param = (f"body.{named[1]}" if named[1] else named[0]) if named else None


def copied_answers(n: int, temperature: float | None) -> int:
    """How many of a request's ``n`` answers are copies of another: vLLM refuses ``n`` > 1
    with greedy decoding (temperature 0), where every answer is the same text, and OpenAI
    serves it; so such a request runs once and its answer is copied (usage counts each
    copy, as OpenAI bills it, but the engine spends no time on them)."""
    return n - 1 if n > 1 and temperature == 0 else 0


def number(
    body: dict, name: str, low: float, high: float | None, *, low_open: bool = False
) -> float:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"body.{name} must be a number, got {value!r}")
    if (high is not None and value > high) or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise RequestError(f"body.{name} must be in {bracket}{low}, {high}], got {value}")
    return float(value)


def integer(body: dict, name: str, low: int, high: int | None = None) -> int:
    value = body[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"body.{name} must be an integer, got {value!r}")
    if value < low or (high is not None and value > high):
        upper = f" and at most {high}" if high is not None else ""
        raise RequestError(f"body.{name} must be at least {low}{upper}, got {value}")
    return value


def sampling_number(body: dict, name: str, field: str | None = None) -> float:
    """:func:`number` in the sampling field's range (:data:`core.schemas.SAMPLING_BOUNDS`,
    under ``field`` where the body's name is an alias)."""
    low, high, low_open = SAMPLING_BOUNDS[field or name]
    return number(body, name, low, high, low_open=low_open)


def sampling_integer(body: dict, name: str, field: str | None = None) -> int:
    """:func:`integer` in the sampling field's range (see :func:`sampling_number`)."""
    low, high, _ = SAMPLING_BOUNDS[field or name]
    return integer(body, name, int(low), None if high is None else int(high))


class Sampling:
    """Collects sampling fields from a body and remembers which fields it read."""

    def __init__(self, body: dict[str, Any], defaults: JobDefaults) -> None:
        self.body = body
        self.handled = set(PASSIVE_FIELDS)
        self.defaulted: list[str] = []
        self.max_name = "max_tokens"  # how the body named the limit, for messages
        self.values: dict[str, Any] = {
            "max_tokens": defaults.max_tokens,
            "temperature": defaults.temperature,
            "top_p": defaults.top_p,
        }

    def present(self, *names: str) -> str | None:
        """The first of ``names`` the body sets (not null), or None."""
        self.handled.update(names)
        return next((n for n in names if self.body.get(n) is not None), None)

    def common(self, *max_names: str) -> None:
        body, values = self.body, self.values
        name = self.present(*max_names)
        if name:
            values["max_tokens"] = sampling_integer(body, name, "max_tokens")
            self.max_name = f"body.{name}"
        else:
            self.defaulted.append("max_tokens")
            self.max_name = "the job's default max_tokens"
        if self.present("temperature"):
            values["temperature"] = sampling_number(body, "temperature")
        else:
            self.defaulted.append("temperature")
        if self.present("top_p"):
            values["top_p"] = sampling_number(body, "top_p")
        else:
            self.defaulted.append("top_p")

    def penalties_and_more(self) -> None:
        body, values = self.body, self.values
        if self.present("top_k"):
            values["top_k"] = sampling_integer(body, "top_k")
        if self.present("min_p"):
            values["min_p"] = sampling_number(body, "min_p")
        if self.present("presence_penalty"):
            values["presence_penalty"] = sampling_number(body, "presence_penalty")
        if self.present("frequency_penalty"):
            values["frequency_penalty"] = sampling_number(body, "frequency_penalty")
        name = self.present("repetition_penalty", "repeat_penalty")
        if name:
            values["repetition_penalty"] = sampling_number(body, name, "repetition_penalty")
        if self.present("seed"):
            values["seed"] = sampling_integer(body, "seed")
        if self.present("n"):
            values["n"] = sampling_integer(body, "n")
        if self.present("min_tokens"):
            values["min_tokens"] = sampling_integer(body, "min_tokens")
        if self.present("stop"):
            stop = body["stop"]
            if isinstance(stop, str):
                stop = [stop]
            if not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop):
                raise RequestError("body.stop must be a string or a list of non-empty strings")
            values["stop"] = stop
        if self.present("logit_bias"):
            values["logit_bias"] = _logit_bias(body["logit_bias"])
        if values.get("min_tokens", 0) > values["max_tokens"]:
            raise RequestError(
                f"body.min_tokens ({values['min_tokens']}) is above {self.max_name} "
                f"({values['max_tokens']}); an answer cannot be longer than its limit"
            )

    def unknown_field_warnings(self) -> list[str]:
        return [
            f"body.{name} is not a field the engine knows; it is ignored"
            for name in sorted(set(self.body) - self.handled)
        ]


def _logit_bias(bias: Any) -> dict[int, float]:
    """OpenAI's ``logit_bias``: token ids (as strings) to a bias in [-100, 100]. Whether each
    id is in the model's vocabulary is checked with the model (see ``core.check.summary``)."""
    try:
        parsed = {int(k): float(v) for k, v in bias.items()}
    except (AttributeError, TypeError, ValueError, OverflowError):
        raise RequestError(
            'body.logit_bias must map token ids to numbers, e.g. {"1234": -100}'
        ) from None
    for token, value in parsed.items():
        if token < 0:
            raise RequestError(f"body.logit_bias has token id {token}; ids start at 0")
        if not -100 <= value <= 100:
            raise RequestError(
                f"body.logit_bias[{token}] is {value}; a bias must be in [-100, 100]"
            )
    return parsed
