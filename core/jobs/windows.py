"""Run windows: the weekly hours a job may run in, in the studio's time zone.

One short text form, shared by ``core run --windows``, the Run page and Settings::

    weekdays 20:00-07:00, weekends all day

Windows are separated by ``,`` or ``;``. Each is its days (``daily``, ``weekdays``,
``weekends``, a day ``mon``, a range ``mon-thu``; none is every day) then its hours
(``HH:MM-HH:MM`` or ``all day``; none is all day). Hours are times of day on those days: a
range that passes midnight is the day's early and late hours (``mon 20:00-07:00`` is
Monday before 07:00 and from 20:00), so "weekdays 20:00-07:00, weekends all day" runs
from Friday 20:00 to Monday 07:00 and on weeknights. Two windows may touch but not
overlap, and a window must open: bad text is refused whole with every reason, and nothing is kept.

Times are wall-clock times in the time zone (:mod:`zoneinfo`), so a window opens at 20:00
in winter and in summer; on the night clocks go forward, a window that opens in the
skipped hour opens when the clock jumps past it.
"""

from __future__ import annotations

import os
import re
import time as time_module
from datetime import UTC, date, datetime, time, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import Field, ValidationError, field_validator

from core.files import write_atomic
from core.schemas import WAITING_STATES, FrozenModel, JobSpec, JobStatus, Model, to_json

SETTINGS_FILE = "run_windows.json"  # in the data folder: the zone and the defaults
METADATA_KEY = "run_window"  # the Batch API's metadata key giving a batch its windows
NEXT_RUN_KEY = "next_run"  # ...and the one saying when a batch outside them runs next

DAY = 24 * 60  # minutes
WEEK = 7 * DAY
DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
FULL_NAMES = (
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
)
GROUPS = {
    "daily": tuple(range(7)),
    "every day": tuple(range(7)),
    "weekdays": tuple(range(5)),
    "weekends": (5, 6),
}
_HOURS = re.compile(r"^(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})$")


class WindowProblem(ValueError):
    """Run windows that cannot be kept; the message says every reason."""


def local_zone() -> str:
    """This machine's time zone by its IANA name (``UTC`` where it has none)."""
    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        return name
    try:
        link = os.path.realpath("/etc/localtime")
        if "zoneinfo/" in link:
            return link.split("zoneinfo/", 1)[1]
    except OSError:
        pass
    return "UTC"


def check_zone(name: str) -> str:
    """``name`` if it is a time zone this machine knows.

    Raises:
        WindowProblem: it is not one.
    """
    try:
        ZoneInfo(name.strip())
    except (ZoneInfoNotFoundError, ValueError):
        raise WindowProblem(
            f"unknown time zone {name!r}: give an IANA name such as Europe/Paris or UTC"
        ) from None
    return name.strip()


class Window(FrozenModel):
    """One window: its days (0 Monday) and its hours, in minutes of the day; ``end`` below
    ``start`` passes midnight (the day's early and late hours); 0-1440 is all day."""

    days: tuple[int, ...]
    start: int = Field(0, ge=0, lt=DAY)
    end: int = Field(DAY, gt=0, le=DAY)

    def spans(self) -> list[tuple[int, int]]:
        """Its minutes of the week, as [from, to) spans."""
        out = []
        for day in self.days:
            base = day * DAY
            if self.start < self.end:
                out.append((base + self.start, base + self.end))
            else:  # passes midnight: the day's early hours and its late ones
                out += [(base, base + self.end), (base + self.start, base + DAY)]
        return [(a, b) for a, b in out if b > a]

    @property
    def text(self) -> str:
        """Its short text form (as parsed)."""
        days = _days_text(self.days)
        if (self.start, self.end) == (0, DAY):
            return f"{days} all day"
        return f"{days} {_clock(self.start)}-{_clock(self.end)}"


class RunWindows(FrozenModel):
    """The weekly windows a job may run in, and the time zone they are read in.

    Stored in a job's spec (``job.json``), so the worker reads them without Settings."""

    windows: tuple[Window, ...]
    zone: str = "UTC"

    @field_validator("zone")
    @classmethod
    def _zone(cls, value: str) -> str:
        return check_zone(value)

    @property
    def text(self) -> str:
        return ", ".join(w.text for w in self.windows)

    def describe(self) -> str:
        return f"{self.text} ({self.zone})"

    # -- the week as spans --------------------------------------------------------------

    def _merged(self) -> list[tuple[int, int]]:
        spans = sorted(s for w in self.windows for s in w.spans())
        merged: list[tuple[int, int]] = []
        for a, b in spans:
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        return merged

    def _tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    def _minute_of_week(self, moment: datetime) -> float:
        local = _aware(moment).astimezone(self._tz())
        return (
            local.weekday() * DAY
            + local.hour * 60
            + local.minute
            + (local.second + local.microsecond / 1e6) / 60
        )

    def is_open(self, now: datetime) -> bool:
        """Whether a job may start work at ``now`` (an aware datetime; naive is UTC)."""
        minute = self._minute_of_week(now)
        return any(a <= minute < b for a, b in self._merged())

    def _instants(self, day: date, minute: int) -> list[datetime]:
        """The UTC instants at which the local clock reads ``minute`` on ``day`` (two at
        the hour clocks go back; none exact in the skipped hour, then the jump itself)."""
        wall = datetime.combine(day, time()) + timedelta(minutes=minute)
        tz = self._tz()
        found = []
        for fold in (0, 1):
            utc = wall.replace(tzinfo=tz, fold=fold).astimezone(UTC)
            if utc.astimezone(tz).replace(tzinfo=None) == wall:
                found.append(utc)
        if not found:  # skipped: the first instant whose clock reads later than ``wall``
            early = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
            late = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
            early, late = min(early, late), max(early, late)
            while late - early > timedelta(seconds=1):
                mid = early + (late - early) / 2
                if mid.astimezone(tz).replace(tzinfo=None) >= wall:
                    late = mid
                else:
                    early = mid
            found.append(late)
        return sorted(set(found))

    def _boundaries(self, start: datetime, days: int) -> list[tuple[datetime, bool]]:
        """Every opening (True) and closing (False) from the local day before ``start``
        for ``days`` days, as UTC instants in order."""
        first = _aware(start).astimezone(self._tz()).date() - timedelta(days=1)
        merged = self._merged()
        if merged == [(0, WEEK)]:
            return []
        out = []
        for offset in range(days + 2):
            day = first + timedelta(days=offset)
            base = day.weekday() * DAY
            for a, b in merged:
                # a span that wraps the week's end (Sunday into Monday) is two spans
                # merged only within the week: its edges at 0 and WEEK are no boundaries
                if base <= a < base + DAY and not (a == 0 and merged[-1][1] == WEEK):
                    out += [(t, True) for t in self._instants(day, a - base)[:1]]
                if base < b <= base + DAY and not (b == WEEK and merged[0][0] == 0):
                    out += [(t, False) for t in self._instants(day, b - base)[-1:]]
        return sorted(out)

    def next_open(self, now: datetime) -> datetime:
        """When a job may next start work: ``now`` itself if a window is open."""
        now = _aware(now)
        if self.is_open(now):
            return now
        for moment, opens in self._boundaries(now, 8):
            if opens and moment > now:
                return moment
        raise AssertionError("run windows that never open")  # refused when parsed

    def next_close(self, now: datetime) -> datetime | None:
        """When the open window at ``now`` closes (None: never, or not open now)."""
        now = _aware(now)
        if not self.is_open(now):
            return None
        for moment, opens in self._boundaries(now, 8):
            if not opens and moment > now:
                return moment
        return None

    def open_seconds(self, start: datetime, end: datetime) -> float:
        """Seconds between ``start`` and ``end`` in which a job may run (the ETA counts
        only these)."""
        start, end = _aware(start), _aware(end)
        if end <= start:
            return 0.0
        total, since = 0.0, start if self.is_open(start) else None
        days = (end - start).days + 2
        for moment, opens in self._boundaries(start, days):
            if moment <= start or moment >= end:
                continue
            if opens and since is None:
                since = moment
            elif not opens and since is not None:
                total += (moment - since).total_seconds()
                since = None
        if since is not None:
            total += (end - since).total_seconds()
        return total

    def finish_after(self, start: datetime, seconds: float) -> datetime:
        """When ``seconds`` of work that may run only in the windows ends, begun at
        ``start``: the moment that much open time has passed. Every ETA of a job with
        windows is this (:func:`open_eta`)."""
        moment, left = _aware(start), max(seconds, 0.0)
        while True:
            moment = self.next_open(moment)
            close = self.next_close(moment)
            if close is None or (close - moment).total_seconds() >= left:
                return moment + timedelta(seconds=left)
            left -= (close - moment).total_seconds()
            moment = close


def of_spec(spec: JobSpec) -> RunWindows | None:
    """The windows a job runs in (None: any time), as its spec keeps them."""
    if not spec.run_windows:
        return None
    return parse(spec.run_windows, spec.run_windows_zone)


def readable_windows(spec: JobSpec) -> RunWindows | None:
    """:func:`of_spec`, with windows that no longer parse (a spec edited by hand) read as
    none: what a page or the worker's gate judges by, never an error."""
    try:
        return of_spec(spec)
    except WindowProblem:
        return None


class Clock:
    """The wall time windows are judged at, and the worker's wait; a test passes one that
    moves time on at each wait instead of waiting for hours."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def sleep(self, seconds: float) -> None:
        time_module.sleep(seconds)


class Gate:
    """Whether a running job may let another request into the engine: until the close
    of the window it runs in (closed at once where none is open). Asked before each
    request enters (:mod:`core.run.feed`); once closed it stays closed for this run, and
    the job pauses when the requests inside have finished."""

    def __init__(self, windows: RunWindows, clock: Clock) -> None:
        self.windows, self.clock = windows, clock
        now = clock.now()
        # judged once: a run ends at its window's close, and the next run starts a gate anew
        self.closes_at = windows.next_close(now) if windows.is_open(now) else now
        self.closed_at: datetime | None = None

    def __call__(self) -> bool:
        if self.closed_at is None and self.closes_at is not None:
            now = self.clock.now()
            if now >= self.closes_at:
                self.closed_at = now
        return self.closed_at is None

    @property
    def closed(self) -> bool:
        return not self()


def open_eta(windows: RunWindows | None, now: datetime, seconds: float) -> float:
    """Seconds from ``now`` until ``seconds`` of work that runs only in ``windows`` is
    done: the closed hours on the way count as waiting (no windows: ``seconds``)."""
    if windows is None:
        return seconds
    return (windows.finish_after(now, seconds) - _aware(now)).total_seconds()


def when(moment: datetime, zone: str) -> str:
    """A moment as people read it, in the windows' zone: ``Mon 7 Dec 20:00 CET``."""
    local = _aware(moment).astimezone(ZoneInfo(zone))
    return f"{local:%a} {local.day} {local:%b %H:%M} {local.tzname()}"


def completion_problem(
    windows: RunWindows, hours: float | None, seconds: float | None, at: datetime
) -> str | None:
    """Why a job submitted at ``at`` cannot end within its completion window of ``hours``
    when it runs only in ``windows`` and takes ``seconds`` (None: not estimated, then only
    a window that never opens in time is said); None when it can, or has no such window."""
    if not hours:
        return None
    end = _aware(at) + timedelta(hours=hours)
    open_for = windows.open_seconds(at, end)
    if open_for <= 0:
        return (
            f"no run window opens within its completion window of {hours:g} h "
            f"({windows.describe()}; the next opens {when(windows.next_open(at), windows.zone)})"
            ": it will expire before it runs"
        )
    if seconds is not None and seconds > open_for:
        return (
            f"its run windows ({windows.describe()}) leave {open_for / 3600:.1f} h of its "
            f"completion window of {hours:g} h, and it is estimated at {seconds / 3600:.1f} h: "
            "what has not run by then expires"
        )
    return None


def held_note(spec: JobSpec, status: JobStatus, at: datetime | None = None) -> str | None:
    """When a job waiting to start runs next, if it is outside its run windows now (None:
    it is not waiting, or may start); what Monitor, Jobs and the Batch API say. A job
    that a window's close paused says so, with the results it has."""
    if status.state not in WAITING_STATES:
        return None
    windows = readable_windows(spec)
    at = at or Clock().now()
    if windows is None or windows.is_open(at):
        return None
    return waiting_message(windows, status, at)


def waiting_message(windows: RunWindows, status: JobStatus, at: datetime) -> str:
    """What a queued job outside its windows at ``at`` says: when it starts, or, paused by
    its window's close, when it resumes (its status message, and :func:`held_note`)."""
    if status.paused_at:
        return paused_message(windows, at, status.done, status.total)
    return held_message(windows, at)


def submission_notes(
    windows: RunWindows | None, hours: float | None, seconds: float | None, at: datetime
) -> tuple[str, ...]:
    """What a submitter is told of a job's windows before it starts: when it runs (outside
    them now), and a completion window they cannot meet (a warning)."""
    if windows is None:
        return ()
    notes = [] if windows.is_open(at) else [held_message(windows, at)]
    problem = completion_problem(windows, hours, seconds, at)
    if problem:
        notes.append(f"warning: {problem}")
    return tuple(notes)


def held_message(windows: RunWindows, at: datetime) -> str:
    """What a queued job outside its windows says: when it runs next."""
    return (
        f"outside its run windows ({windows.describe()}): runs next at "
        f"{when(windows.next_open(at), windows.zone)}"
    )


def paused_message(windows: RunWindows, at: datetime, done: int, total: int) -> str:
    """What a job that its window's close paused says: what it has, and when it goes on."""
    return (
        f"paused at the close of its run windows ({windows.describe()}) with {done:,} of "
        f"{total:,} requests done: resumes by itself at {when(windows.next_open(at), windows.zone)}"
    )


# -- the text form --------------------------------------------------------------------------


def parse(text: str, zone: str) -> RunWindows | None:
    """Run windows from their text form (None: empty text, any time).

    Raises:
        WindowProblem: every reason the text cannot be kept (malformed, a window that
        never opens, windows that overlap, an unknown time zone); nothing is kept.
    """
    problems: list[str] = []
    try:
        zone = check_zone(zone)
    except WindowProblem as exc:
        problems.append(str(exc))
    parts = [p.strip() for p in re.split(r"[,;\n]", text or "")]
    windows = []
    for number, part in enumerate(parts, start=1):
        if not part:
            if len(parts) > 1:
                problems.append(f"window {number} is empty (two separators in a row?)")
            continue
        try:
            windows.append(_window(part))
        except WindowProblem as exc:
            problems.append(f"window {number} {part!r}: {exc}")
    for i, first in enumerate(windows):
        for second in windows[i + 1 :]:
            overlap = _overlap(first, second)
            if overlap:
                problems.append(f"windows {first.text!r} and {second.text!r} overlap on {overlap}")
    if problems:
        raise WindowProblem("; ".join(problems))
    if not windows:
        return None
    return RunWindows(windows=tuple(windows), zone=zone)


def _window(part: str) -> Window:
    words = part.lower().split()
    hours = "all day"
    if len(words) >= 2 and words[-2:] == ["all", "day"]:
        days_text = " ".join(words[:-2])
    elif (words and _HOURS.match(words[-1])) or (len(words) >= 3 and words[-2] == "-"):
        if len(words) >= 3 and words[-2] == "-":  # "20:00 - 07:00"
            hours, days_text = "".join(words[-3:]), " ".join(words[:-3])
        else:
            hours, days_text = words[-1], " ".join(words[:-1])
    elif words and any(c.isdigit() for c in words[-1]):
        raise WindowProblem(f"hours {words[-1]!r} are not HH:MM-HH:MM (e.g. 20:00-07:00)")
    else:
        days_text = " ".join(words)
    days = _days(days_text)
    if hours == "all day":
        return Window(days=days)
    match = _HOURS.match(hours)
    if not match:
        raise WindowProblem(f"hours {hours!r} are not HH:MM-HH:MM")
    h1, m1, h2, m2 = (int(g) for g in match.groups())
    if h1 > 23 or m1 > 59 or h2 > 24 or m2 > 59 or (h2 == 24 and m2):
        raise WindowProblem(f"{hours!r} is not a time of day (00:00 to 24:00)")
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if start == end or (start, end) == (0, 0):
        raise WindowProblem("it never opens (it starts and ends at the same time)")
    if end == 0:
        end = DAY
    return Window(days=days, start=start, end=end)


def _days(text: str) -> tuple[int, ...]:
    if not text:  # hours alone: every day
        return GROUPS["daily"]
    if text in GROUPS:
        return GROUPS[text]
    if "-" in text:
        first, _, last = (t.strip() for t in text.partition("-"))
        a, b = _day(first), _day(last)
        return tuple((a + i) % 7 for i in range((b - a) % 7 + 1))
    return (_day(text),)


def _day(word: str) -> int:
    for index, (short, full) in enumerate(zip(DAY_NAMES, FULL_NAMES, strict=True)):
        if word == short or word == full.lower():
            return index
    raise WindowProblem(
        f"{word!r} is not a day: use daily, weekdays, weekends, mon..sun or a range (mon-fri)"
    )


def _overlap(first: Window, second: Window) -> str:
    """Where two windows overlap, in words ("" where they do not)."""
    for a1, b1 in first.spans():
        for a2, b2 in second.spans():
            lo, hi = max(a1, a2), min(b1, b2)
            if lo < hi:
                day = lo // DAY
                return f"{FULL_NAMES[day]} {_clock(lo - day * DAY)}-{_clock(hi - day * DAY)}"
    return ""


def _days_text(days: tuple[int, ...]) -> str:
    for name, group in GROUPS.items():
        if days == group:
            return name
    if len(days) == 1:
        return DAY_NAMES[days[0]]
    return f"{DAY_NAMES[days[0]]}-{DAY_NAMES[days[-1]]}"


def _clock(minute: int) -> str:
    return f"{minute // 60:02d}:{minute % 60:02d}"


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# -- the studio's settings: its time zone, and the defaults -----------------------------------


class WindowSettings(Model):
    """``run_windows.json``: the studio's time zone (None: this machine's) and the default
    windows, the studio's and per owner (an API key's name or a user), as text."""

    zone: str | None = None
    default: str = ""
    owners: dict[str, str] = Field(default_factory=dict)

    @property
    def time_zone(self) -> str:
        return self.zone or local_zone()


def settings_file(home: Path) -> Path:
    return home / SETTINGS_FILE


def read_settings(home: Path) -> WindowSettings:
    """The studio's window settings (none set: the machine's zone, no windows).

    Raises:
        WindowProblem: the file is not one the studio wrote.
    """
    try:
        return WindowSettings.model_validate_json(settings_file(home).read_bytes())
    except FileNotFoundError:
        return WindowSettings()
    except (OSError, ValueError) as exc:
        raise WindowProblem(f"{settings_file(home)}: {exc}") from None


def check_settings(
    zone: str | None, default: str = "", owners: dict[str, str] | None = None
) -> WindowSettings:
    """The settings as given, checked whole (each text parsed in the zone).

    Raises:
        WindowProblem: every reason; nothing is kept.
    """
    problems = []
    zone = (zone or "").strip() or None
    in_zone = zone or local_zone()
    try:
        check_zone(in_zone)
    except WindowProblem as exc:
        problems.append(str(exc))
        in_zone = "UTC"  # still check the windows' text
    kept = {}
    for owner, text in {"": default, **(owners or {})}.items():
        try:
            windows = parse(text, in_zone)
        except WindowProblem as exc:
            problems.append(f"{owner}'s windows: {exc}" if owner else f"default windows: {exc}")
            continue
        if owner and windows is not None:
            kept[owner.strip()] = windows.text
    if problems:
        raise WindowProblem("; ".join(problems))
    try:
        parsed = parse(default, in_zone)
        return WindowSettings(zone=zone, default=parsed.text if parsed else "", owners=kept)
    except ValidationError as exc:  # a last guard; the checks above say it first
        raise WindowProblem(str(exc)) from None


def owner_lines(text: str) -> dict[str, str]:
    """Owners' default windows from lines ``NAME = WINDOWS`` (Settings' form of them).

    Raises:
        WindowProblem: a line that is not one, by its number.
    """
    owners, problems = {}, []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, windows = line.partition("=")
        if not sep or not name.strip() or not windows.strip():
            problems.append(f"line {number}: write NAME = WINDOWS (got {line.strip()!r})")
        elif name.strip() in owners:
            problems.append(f"line {number}: {name.strip()!r} is named twice")
        else:
            owners[name.strip()] = windows.strip()
    if problems:
        raise WindowProblem("; ".join(problems))
    return owners


def check_form(zone: str | None, default: str, owners: str) -> WindowSettings:
    """Settings' form checked whole: the zone, the default, and ``NAME = WINDOWS`` lines.

    Raises:
        WindowProblem: every reason; nothing is kept.
    """
    problems, named = [], {}
    try:
        named = owner_lines(owners)
    except WindowProblem as exc:
        problems.append(str(exc))
    try:
        settings = check_settings(zone, default, named)
    except WindowProblem as exc:
        problems.append(str(exc))
    if problems:
        raise WindowProblem("; ".join(problems))
    return settings


def sentence(text: str) -> str:
    """``text`` with its first letter a capital (a note shown on its own)."""
    return text[:1].upper() + text[1:]


def owners_text(settings: WindowSettings) -> str:
    return "\n".join(f"{name} = {text}" for name, text in settings.owners.items())


def save_settings(home: Path, settings: WindowSettings) -> None:
    write_atomic(settings_file(home), to_json(settings))


def set_owner_default(home: Path, owner: str, text: str) -> WindowSettings:
    """Sets (empty text: clears) one owner's default windows, keeping the rest.

    Raises:
        WindowProblem: the text cannot be kept; nothing changes.
    """
    settings = read_settings(home)
    owners = {k: v for k, v in settings.owners.items() if k != owner}
    if text.strip():
        owners[owner] = text
    checked = check_settings(settings.zone, settings.default, owners)
    save_settings(home, checked)
    return checked


def windows_for(home: Path, text: str | None, owner: str | None) -> RunWindows | None:
    """The windows a new job runs in: its own (``text``; "any" for none, overriding the
    defaults; empty or None: no own windows), else its owner's default, else the studio's;
    read in the studio's zone.

    Raises:
        WindowProblem: its own text cannot be kept, or the settings cannot be read.
    """
    settings = read_settings(home)
    if text is not None:
        if text.strip().lower() in ("any", "any time", "always"):
            return None
        if text.strip():
            return parse(text, settings.time_zone)
    chosen = settings.owners.get(owner or "", "") or settings.default
    return parse(chosen, settings.time_zone)
