"""What a check finds: a :class:`Problem` per finding, a :class:`CheckedLine` per line, and
the :class:`CheckReport` of a whole file (with its summary as lines of text)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from core.check.digests import RequestDigests
from core.check.engine_requests import EngineRequest
from core.check.sensitive import SENSITIVE_DATA, SensitiveFindings

Severity = Literal["error", "warning", "note"]
MAX_REPORTED_PROBLEMS = 10_000
HISTOGRAM_EDGES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
LISTED_LINES = 20  # line numbers quoted in a summary finding
# Problem codes that counters and the submission rules read.
DUPLICATE_ID = "duplicate_custom_id"
CONTEXT_EXCEEDED = "context_length_exceeded"
EMPTY_FILE = "empty_file"
# The url and model the summary counts a line under when it is no JSON object.
UNREADABLE = "(not a JSON object)"


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding about one line (line 0 means the file as a whole).

    Like OpenAI's ``BatchError``: ``code`` names the kind of problem (counters and rules
    read it, never the message) and ``param`` the field it is about, where there is one.
    """

    line: int
    severity: Severity
    message: str
    custom_id: str | None = None
    code: str = "invalid_request"
    param: str | None = None

    def __str__(self) -> str:
        where = f"line {self.line}" if self.line else "file"
        return f"{where}: {self.severity}: {self.message}"


@dataclass(slots=True)
class CheckedLine:
    """A non-blank line of the file and what the check made of it.

    ``request`` is kept whenever the body could be read, even if the line has errors
    (a repeated id, a url the engine does not run yet); ``valid`` says whether it runs.
    """

    line_no: int
    custom_id: str | None
    request: EngineRequest | None
    problems: list[Problem]
    raw: bytes = b""  # the line as read (its line ending may be kept)

    @property
    def valid(self) -> bool:
        if self.request is None:
            return False
        return not self.problems or all(p.severity != "error" for p in self.problems)


def histogram_labels() -> list[str]:
    """Readable labels for the bins of ``CheckReport.token_histogram``."""
    labels, low = [], 0
    for edge in HISTOGRAM_EDGES:
        labels.append(f"{low}-{edge - 1}")
        low = edge
    labels.append(f"{low}+")
    return labels


@dataclass
class CheckReport:
    """The summary of a whole file.

    Token fields are filled only when a model folder was given to :func:`check_file`.
    ``by_local_model`` holds, per local model folder name, the valid lines' ``lines``,
    ``prompt_tokens`` and ``max_output_tokens``: what an estimate needs.
    """

    path: str
    lines: int = 0
    valid: int = 0
    invalid: int = 0
    warnings: int = 0
    problems: list[Problem] = field(default_factory=list)
    problems_dropped: int = 0
    # Every line is counted: by body.model, by url (valid and invalid lines apart; "" where
    # a line names none, UNREADABLE where it is no JSON object) and its messages by role.
    models: Counter = field(default_factory=Counter)
    urls: Counter = field(default_factory=Counter)  # valid lines by url
    invalid_urls: Counter = field(default_factory=Counter)  # invalid lines by url
    roles: Counter = field(default_factory=Counter)
    duplicates: int = 0
    max_output_tokens: int = 0
    default_max_lines: int = 0
    effective: dict[str, Counter] = field(default_factory=dict)
    defaults: dict[str, Any] = field(default_factory=dict)
    model_map: dict[str, str] = field(default_factory=dict)
    tokens_counted: bool = False
    token_notes: list[str] = field(default_factory=list)
    prompt_tokens: int = 0
    prompt_tokens_max: int = 0
    token_histogram: list[int] = field(default_factory=lambda: [0] * (len(HISTOGRAM_EDGES) + 1))
    over_context: int = 0
    by_local_model: dict[str, dict[str, Any]] = field(default_factory=dict)
    bytes_read: int = 0
    seconds: float = 0.0
    processes: int = 1  # processes whose work is in the report (see check_file)
    cancelled: bool = False
    # Sensitive data in the prompts (core/check/sensitive.py): None where the policy is allow.
    sensitive: SensitiveFindings | None = None
    # The digests of the valid deterministic lines, for the reuse forecast: kept from the
    # check's own pass so the forecast never reads the file again; not in to_dict (16 bytes
    # a line), and None in a report made without them.
    digests: RequestDigests | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when every line is valid and the file has at least one."""
        return (
            self.invalid == 0
            and self.valid > 0
            and not self.cancelled
            and not any(p.code == SENSITIVE_DATA for p in self.problems)
        )

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    def add(self, problem: Problem) -> None:
        if len(self.problems) < MAX_REPORTED_PROBLEMS:
            self.problems.append(problem)
        else:
            self.problems_dropped += 1

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, digests=None))
        del data["digests"]
        data["ok"] = self.ok
        for name in ("models", "urls", "invalid_urls", "roles"):
            data[name] = dict(getattr(self, name))
        data["effective"] = {k: dict(v) for k, v in self.effective.items()}
        data["token_histogram"] = dict(zip(histogram_labels(), self.token_histogram, strict=True))
        return data


def setting_rows(report: CheckReport) -> list[dict[str, Any]]:
    """What the valid lines run with: per sampling field, each value (and where it comes
    from) with its line count, most lines first; none for an embeddings-only file."""
    return [
        {"field": name, "value (source)": value, "lines": n}
        for name, counter in report.effective.items()
        for value, n in sorted(counter.items(), key=lambda item: -item[1])
    ]


def summary_lines(report: CheckReport) -> list[str]:
    """The report's summary as short lines of text (for the command line)."""

    def counts(counter: dict[str, int]) -> str:
        return ", ".join(
            f"{k or '(none)'} {v}" for k, v in sorted(counter.items(), key=lambda i: -i[1])
        )

    lines = []
    if report.urls:
        lines.append(f"urls (valid lines): {counts(report.urls)}")
    if report.invalid_urls:
        lines.append(f"urls of invalid lines: {counts(report.invalid_urls)}")
    for name, lines_of in sorted(report.models.items(), key=lambda i: -i[1]):
        local = report.model_map.get(name)
        target = f" -> {local}" if local else ""
        lines.append(f"model {name or '(none)'}: {lines_of} lines{target}")
    if report.roles:
        lines.append(f"roles: {counts(report.roles)}")
    if report.duplicates:
        lines.append(f"duplicate custom_ids: {report.duplicates}")
    for name, counter in report.effective.items():
        if counter:
            lines.append(f"runs with {name}: {counts(counter)}")
    lines.append(f"max output tokens (valid lines): {report.max_output_tokens:,}")
    if report.tokens_counted:
        counted = sum(report.token_histogram)
        mean = report.prompt_tokens / counted if counted else 0
        lines.append(
            f"prompt tokens: {report.prompt_tokens:,} in {counted:,} valid lines "
            f"(mean {mean:.0f}, max {report.prompt_tokens_max:,})"
        )
        bins = [
            f"{label}: {n}"
            for label, n in zip(histogram_labels(), report.token_histogram, strict=True)
            if n
        ]
        lines.append("prompt token histogram: " + ", ".join(bins))
        if report.over_context:
            lines.append(f"lines that do not fit the context: {report.over_context}")
    if report.sensitive is not None:
        found = report.sensitive.summary()
        lines += [f"sensitive data: {text}" for text in found] or ["sensitive data: none found"]
        lines.append(f"sensitive data: {report.sensitive.region_line()}")
        if found and report.sensitive.policy == "redact":
            lines.append("sensitive data: redacted before the run (the engine reads placeholders)")
    processes = f" ({report.processes} processes)" if report.processes > 1 else ""
    lines.append(f"checked in {report.seconds:.2f} s{processes}")
    return lines
