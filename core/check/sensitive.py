"""Sensitive data in prompts, found by the check before anything runs.

Each line's prompt text (chat message contents, a completion's ``prompt``, an embedding's
``input``, score/rerank texts) is searched for e-mail addresses, phone numbers
(``phonenumbers``, libphonenumber's rules), payment card numbers (Luhn, ``python-stdnum``),
IBANs (``python-stdnum``), IP addresses (``ipaddress``) and credentials (the regex plugins
of ``detect-secrets``). A finding is kept masked, never in full.

Speed: the check reads 100,000 lines/s, so the line's raw bytes first meet a prefilter (an
``@``, a run of digits, an IBAN's start, a credential's well-known prefix); only a line it
matches is decoded and searched, and each detector runs only on text that has what it needs
(the phone matcher on a run of 7 or more digits, the secrets plugins on a known prefix: all
of them on every line would cost about 0.7 ms a line). The check runs the prefilter over a
batch of lines at once (:func:`lines_worth_a_look`), on the bytes mapped to a few classes,
where each search skips to a literal; ``phonenumbers`` and ``stdnum`` are imported by the
first line that passes it.

The studio's policy (``sensitive.json`` in the data folder, set on Settings): ``allow``
(no scan), ``warn`` (the default: the report lists the findings, the file runs), ``refuse``
(the file is refused, the lines named), ``redact`` (the report lists them, the file runs,
and the engine sees each one as a placeholder: :func:`redact`, applied to each request by
:mod:`core.check.redaction`; the job's input file stays as given). Beside it, the region a
phone number written without a ``+country`` code is read as (``phone_region``, one of
libphonenumber's regions, default ``US``): every scan takes it as a parameter, resolved
once per check, export or job (:func:`finder`), never per line.
"""

from __future__ import annotations

import bisect
import importlib
import inspect
import ipaddress
import itertools
import pkgutil
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Literal, NamedTuple

import msgspec
from pydantic import Field, field_validator

from core.files import write_atomic
from core.schemas import DEFAULT_PHONE_REGION, Model

Policy = Literal["allow", "warn", "refuse", "redact"]


class PolicyProblem(ValueError):
    """A policy that cannot be kept: the message says why."""


POLICIES: tuple[str, ...] = ("allow", "warn", "refuse", "redact")
POLICY_FILE = "sensitive.json"  # in the data folder
SENSITIVE_DATA = "sensitive_data"  # the code of the refusal's Problem
KINDS = {
    "email": "e-mail address",
    "phone": "phone number",
    "card": "payment card number",
    "iban": "IBAN",
    "ip": "IP address",
    "credential": "credential",
}
LISTED_FINDINGS = 50  # findings kept (line and masked value) per kind; all are counted

# A line worth decoding: anything one of the detectors below could match. Separate
# patterns, each led by a literal or one character class: one alternation of them all
# costs several times their sum (the regex engine then tries every branch at every byte).
_DIGITS_HINT = re.compile(rb"\d(?:[\d .()/+-]{5,}\d|\.\d{1,3}\.\d)")  # phone, card, IBAN, IPv4
_IPV6_HINT = re.compile(rb":[0-9A-Fa-f]{0,4}:")
# A credential's well-known start: a PEM header, AWS and Google key prefixes, a long token
# after "_" or "-" (ghp_, sk_live_, npm_, sk-, glpat-, a Slack token's last part), a JWT's
# second part, SendGrid's "SG.". Each alternative starts with a literal, so the regex
# engine skips the bytes no alternative can start with.
_SECRET_HINT_RAW = re.compile(
    rb"-----BEGIN|A(?:KIA|SIA|Iza)|_[A-Za-z0-9]{20}|-[A-Za-z0-9]{20}|\.eyJ|SG\."
)


def worth_a_look(raw: bytes) -> bool:
    """Whether a line's bytes hold anything a detector could match (an ``@`` also covers
    a URL with a user and password in it)."""
    return (
        b"@" in raw
        or _DIGITS_HINT.search(raw) is not None
        or _IPV6_HINT.search(raw) is not None
        or _SECRET_HINT_RAW.search(raw) is not None
    )


def _classes(*mapped: tuple[bytes, bytes]) -> bytes:
    """A ``bytes.translate`` table: each byte of a group to its class, any other to ``x``."""
    table = bytearray(b"x" * 256)
    for members, to in mapped:
        for byte in members:
            table[byte] = to[0]
    return bytes(table)


_HEX_LETTERS = b"abcdefABCDEF"
_OTHER_LETTERS = bytes(c for c in range(256) if chr(c).isascii() and chr(c).isalpha()).translate(
    None, _HEX_LETTERS
)
# The hints above, on a line's bytes mapped to classes (digits 0, hex letters h, other
# letters g, the digit hint's separators s, and . - _ : as themselves): each pattern then
# starts with one literal, which the regex engine skips to (a leading class like \d is
# tried at every byte, about 8 ns each: 5 us on a line of 600 bytes).
_CLASSES = _classes(
    (b"0123456789", b"0"),
    (_HEX_LETTERS, b"h"),
    (_OTHER_LETTERS, b"g"),
    (b" ()/+", b"s"),
    (b".", b"."),
    (b"-", b"-"),
    (b"_", b"_"),
    (b":", b":"),
)
_CLASS_HINTS = (
    re.compile(rb"0(?:[0s.-]{5,}0|\.0{1,3}\.0)"),  # _DIGITS_HINT
    re.compile(rb":[0h]{0,4}:"),  # _IPV6_HINT
    re.compile(rb"_[0hg]{20}"),  # _SECRET_HINT_RAW's long tokens
    re.compile(rb"-[0hg]{20}"),
)
# _SECRET_HINT_RAW's literal starts, on the bytes as they are (an "@" first: "in" finds it).
_AT = re.compile(rb"@")
_LITERAL_HINTS = tuple(
    re.compile(pattern) for pattern in (rb"-----BEGIN", rb"A(?:KIA|SIA|Iza)", rb"\.eyJ", rb"SG\.")
)


def lines_worth_a_look(raws: list[bytes]) -> list[int]:
    """The positions in ``raws`` of the lines :func:`worth_a_look` picks, found by searching
    them all at once, joined by newlines (no hint matches across one): about 2.7x cheaper
    a line than line by line (3.9 against 10.4 µs of CPU on a clean line, 2026-12-06)."""
    if not raws:
        return []
    joined = b"\n".join(raws)
    mapped = joined.translate(_CLASSES)
    ends: list[int] | None = None  # where each line ends in the joined bytes, when needed
    picked: set[int] = set()
    at = (_AT,) if b"@" in joined else ()
    for text, patterns in ((mapped, _CLASS_HINTS), (joined, (*at, *_LITERAL_HINTS))):
        for pattern in patterns:
            found = pattern.search(text)
            while found is not None:
                if ends is None:
                    ends = list(itertools.accumulate(len(raw) + 1 for raw in raws))
                line = bisect.bisect_right(ends, found.start())
                picked.add(line)
                found = pattern.search(text, ends[line]) if line + 1 < len(raws) else None
    # The exact rule on each picked line (the searches above may pick a line it would not).
    return [line for line in sorted(picked) if worth_a_look(raws[line])]


# An e-mail address is found from its "@": a pattern led by the local part would try every
# word of the text (10x the cost on a line of prose).
_EMAIL_LOCAL = re.compile(r"[A-Za-z0-9._%+-]{1,64}\Z")
_EMAIL_DOMAIN = re.compile(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
_DIGIT_RUN = re.compile(r"\d(?:[ ().-]{0,3}\d){6,}")  # led by a digit: the engine skips to one
# A date is a run of digits the phone matcher would try and reject (at ~40 us a try).
_DATE = re.compile(r"\d{4}[-/.]\d\d?[-/.]\d\d?|\d\d?[-/.]\d\d?[-/.]\d{2,4}")
_CARD = re.compile(r"(?<![\d-])[2-6]\d{3}(?:[ -]?\d){9,15}(?![\d-])")
_IBAN = re.compile(r"\b[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}\b")
_IPV4 = re.compile(r"(?<![\d.])\d{1,3}(?:\.\d{1,3}){3}(?![\d.])")
_IPV6 = re.compile(r"(?<![\w:])[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w:])")
_SECRET_HINT = re.compile(
    r"-----BEGIN|A(?:KIA|SIA|Iza)|_[A-Za-z0-9]{20}|-[A-Za-z0-9]{20}|\.eyJ|SG\.|://[^/\s@]+:[^/\s@]+@"
)
_decode = msgspec.json.Decoder().decode


@cache
def phone_regions() -> dict[str, str]:
    """libphonenumber's regions (ISO 3166 alpha-2 codes, and a few it adds such as ``AC``)
    by code, each with its English name where pycountry knows one, sorted by code."""
    import phonenumbers
    import pycountry

    names = {}
    for code in sorted(phonenumbers.SUPPORTED_REGIONS):
        country = pycountry.countries.get(alpha_2=code)
        names[code] = country.name if country is not None else ""
    return names


def region_label(code: str) -> str:
    """A region as people read it: ``DE (Germany)``, or the code alone where it has no name."""
    if code == DEFAULT_PHONE_REGION:  # named without importing the region tables
        return "US (United States)"
    name = phone_regions().get(code, "")
    return f"{code} ({name})" if name else code


def check_region(value: str) -> str:
    """``value`` as a region phone numbers without a country code are read as (upper case,
    spaces around it dropped).

    Raises:
        PolicyProblem: it is not one of libphonenumber's regions; the message names it.
    """
    code = value.strip().upper()
    if code == DEFAULT_PHONE_REGION:  # no import for the default (a check may never need one)
        return code
    import phonenumbers

    if code not in phonenumbers.SUPPORTED_REGIONS:
        raise PolicyProblem(
            f"{value!r} is not a region libphonenumber knows; give an ISO 3166 alpha-2 "
            "code such as US, DE, FR or GB"
        )
    return code


class SensitivePolicy(Model):
    """The studio's policy for sensitive data in prompts, the owners' (an API key's or a
    user's name) that differ from it, and the region phone numbers without a country code
    are read as (the studio's, whoever owns the job)."""

    policy: Policy = "warn"
    owners: dict[str, Policy] = Field(default_factory=dict)
    phone_region: str = DEFAULT_PHONE_REGION

    @field_validator("phone_region")
    @classmethod
    def _region(cls, value: str) -> str:
        return check_region(value)

    def of(self, owner: str | None) -> str:
        """The policy a job of ``owner`` is checked and run under."""
        return self.owners.get(owner or "", self.policy)


def read_policy(home: Path) -> SensitivePolicy:
    """The studio's policy (``warn`` when never set).

    Raises:
        PolicyProblem: the file is not one the studio wrote (edited by hand, say).
    """
    path = home / POLICY_FILE
    try:
        return SensitivePolicy.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return SensitivePolicy()
    except (OSError, ValueError) as exc:
        raise PolicyProblem(f"{path}: {exc}") from None


class PolicyNow(NamedTuple):
    """What a check keeps: the policy, the phone region, and a note when the file is
    unreadable (then the check scans and warns, refuses nothing, and reads numbers without
    a country code as the default region's)."""

    policy: str
    phone_region: str
    note: str | None


def policy_now(home: Path | None = None, owner: str | None = None) -> PolicyNow:
    """The policy a check keeps (``owner``'s where it has one, else the studio's) and the
    studio's phone region (see :class:`PolicyNow`)."""
    from core.config import data_home

    try:
        kept = read_policy(home or data_home())
    except PolicyProblem as exc:
        note = f"the policy for sensitive data is unreadable ({exc}); warn is kept"
        return PolicyNow("warn", DEFAULT_PHONE_REGION, note)
    return PolicyNow(kept.of(owner), kept.phone_region, None)


def phone_region_now(home: Path | None = None) -> str:
    """The studio's phone region (the default where its file is unreadable: the check says
    why, see :func:`policy_now`)."""
    return policy_now(home).phone_region


def save_studio(
    home: Path, policy: str | None = None, phone_region: str | None = None
) -> SensitivePolicy:
    """Keeps the studio's policy, its phone region, or both (None: kept as it is), the
    owners' policies kept: the one rule Settings and ``core sensitive`` save through. Both
    are checked before anything is written, so a wrong one keeps nothing, the other neither.

    Raises:
        PolicyProblem: ``policy`` is not one of POLICIES, ``phone_region`` is not one of
            libphonenumber's regions (the message names it), or the kept file cannot be
            read and no policy is given (a studio policy saved anew mends the file).
    """
    if policy is not None and policy not in POLICIES:
        raise PolicyProblem(
            f"{policy!r} is not a policy for sensitive data; use one of {', '.join(POLICIES)}"
        )
    region = None if phone_region is None else check_region(phone_region)
    try:
        kept = read_policy(home)
    except PolicyProblem:
        if policy is None:  # nothing to mend it with
            raise
        kept = SensitivePolicy()  # a studio policy saved anew mends an unreadable file
    kept = SensitivePolicy(
        policy=kept.policy if policy is None else policy,
        owners=kept.owners,
        phone_region=kept.phone_region if region is None else region,
    )
    write_atomic(home / POLICY_FILE, kept.model_dump_json().encode())
    return kept


def save_policy(home: Path, policy: str, owner: str | None = None) -> SensitivePolicy:
    """Keeps the studio's policy (:func:`save_studio`), or with ``owner`` that owner's ("" clears
    it: the studio's applies); a name other than those of POLICIES keeps nothing.

    Raises:
        PolicyProblem: ``policy`` is not one of them, or the kept file cannot be read.
    """
    if owner is None:
        return save_studio(home, policy=policy)
    if policy and policy not in POLICIES:
        raise PolicyProblem(
            f"{policy!r} is not a policy for sensitive data; use one of {', '.join(POLICIES)}"
        )
    kept = read_policy(home)  # unreadable: the owners' policies in it would be lost
    owners = {name: p for name, p in kept.owners.items() if name != owner}
    kept = kept.model_copy(update={"owners": {**owners, **({owner: policy} if policy else {})}})
    write_atomic(home / POLICY_FILE, kept.model_dump_json().encode())
    return kept


def save_phone_region(home: Path, region: str) -> SensitivePolicy:
    """Keeps the studio's phone region, the policies kept as they are (:func:`save_studio`).

    Raises:
        PolicyProblem: ``region`` is not one of libphonenumber's (nothing is kept), or the
            kept file cannot be read.
    """
    return save_studio(home, phone_region=region)


def owner_policies_text(kept: SensitivePolicy) -> str:
    """The owners' own policies as Settings shows them: ``NAME = POLICY`` a line."""
    return "\n".join(f"{name} = {policy}" for name, policy in sorted(kept.owners.items()))


def save_owner_policies(home: Path, text: str) -> SensitivePolicy:
    """Keeps the owners' own policies from ``NAME = POLICY`` lines (blank lines skipped),
    the studio's kept; nothing is kept where a line is wrong.

    Raises:
        PolicyProblem: which lines are wrong and why, or the kept file cannot be read.
    """
    kept = read_policy(home)
    owners: dict[str, str] = {}
    wrong = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, sep, policy = (part.strip() for part in line.partition("="))
        if not sep or not name or policy not in POLICIES:
            wrong.append(
                f"line {number}: {line.strip()!r} is not NAME = one of {', '.join(POLICIES)}"
            )
        elif name in owners:
            wrong.append(f"line {number}: {name!r} is given twice")
        else:
            owners[name] = policy
    if wrong:
        raise PolicyProblem("; ".join(wrong))
    saved = SensitivePolicy.model_validate({**kept.model_dump(), "owners": owners})
    write_atomic(home / POLICY_FILE, saved.model_dump_json().encode())
    return saved


# -- masking ---------------------------------------------------------------------------------


def _mask_digits(value: str, keep: int) -> str:
    """Every digit but the last ``keep`` as ``*``, separators kept."""
    digits = sum(c.isdigit() for c in value)
    out, seen = [], 0
    for c in value:
        if c.isdigit():
            seen += 1
            out.append(c if seen > digits - keep else "*")
        else:
            out.append(c)
    return "".join(out)


def mask(kind: str, value: str) -> str:
    """A finding as the report shows it: enough to find it in the line, never all of it."""
    if kind == "email":
        local, _, domain = value.partition("@")
        name, _, tld = domain.rpartition(".")
        return f"{local[:1]}***@{name[:1]}***.{tld}"
    if kind == "card":
        return _mask_digits(value, 4)
    if kind == "phone":
        return _mask_digits(value, 2)
    if kind == "iban":
        compact = value.replace(" ", "")
        return f"{compact[:2]}** **** {compact[-4:]}"
    if kind == "ip":
        if ":" in value:
            return value.split(":", 1)[0] + ":***"
        return value.split(".", 1)[0] + ".***.***.***"
    return value[:4] + "***"  # a credential: its well-known prefix at most


# -- finding ---------------------------------------------------------------------------------


@cache
def _secret_plugins() -> tuple[Any, ...]:
    """detect-secrets' regex plugins, less its IP one (IP addresses are a kind of their own)."""
    import detect_secrets.plugins as plugins
    from detect_secrets.plugins.base import RegexBasedDetector

    found = []
    for module_info in pkgutil.iter_modules(plugins.__path__):
        module = importlib.import_module(f"{plugins.__name__}.{module_info.name}")
        for _, kind in inspect.getmembers(module, inspect.isclass):
            if (
                issubclass(kind, RegexBasedDetector)
                and kind is not RegexBasedDetector
                and kind.__module__ == module.__name__
                and kind.__name__ != "IPPublicDetector"
            ):
                found.append(kind())
    return tuple(found)


def _credentials(text: str) -> list[str]:
    found = []
    for plugin in _secret_plugins():
        for pattern in plugin.denylist:
            found += [match.group(0) for match in pattern.finditer(text)]
    return found


CACHED_TEXT = 4096  # characters: texts up to this long keep their findings (4,096 of them)
Findings = tuple[tuple[str, str], ...]


def find(text: str, region: str) -> Findings:
    """``(kind, value)`` of each sensitive item in ``text``, in the order of KINDS; a phone
    number without a +country code is read as ``region``'s."""
    return finder(region)(text)


@cache
def finder(region: str) -> Callable[[str], Findings]:
    """:func:`find` for one region, taken once by a check (its lines then cost what they
    did before there was a region: one call, the text the cache's key)."""
    kept = lru_cache(maxsize=4096)(lambda text: _find(text, region))

    def find_in(text: str) -> Findings:
        # A batch repeats its system prompts on every line; long texts are not kept (memory).
        return kept(text) if len(text) <= CACHED_TEXT else _find(text, region)

    return find_in


def _find(text: str, region: str) -> Findings:
    # Imported here: a check whose lines hold nothing the prefilter picks never loads them
    # (about 0.1 s of CPU in each of its processes).
    import phonenumbers
    from stdnum import iban, luhn

    found: list[tuple[str, str]] = []
    at = text.find("@")
    while at != -1:
        local = _EMAIL_LOCAL.search(text, max(0, at - 64), at)
        domain = _EMAIL_DOMAIN.match(text, at + 1)
        if local and domain:
            found.append(("email", text[local.start() : domain.end()]))
        at = text.find("@", at + 1)
    cards: list[str] = []
    runs = [m.span() for m in _DIGIT_RUN.finditer(text)]
    if runs:
        cards = [m.group(0) for m in _CARD.finditer(text) if luhn.is_valid(_digits(m.group(0)))]
        card_digits = {_digits(card) for card in cards}
        for start, end in runs:
            if _DATE.fullmatch(text, start, end):
                continue
            # The matcher on the run and a character around it (a "(" before an area code),
            # not on the whole text: it tries every number-like piece, at 100s of us each.
            start, end = max(0, start - 1), end + 1
            for m in phonenumbers.PhoneNumberMatcher(text[start:end], region):
                before = text[start + m.start - 1] if start + m.start > 0 else " "
                # A number glued to a word or code (INV-2024-000123) is a reference.
                if before.isalnum() or before in "-/_" or _digits(m.raw_string) in card_digits:
                    continue
                found.append(("phone", m.raw_string))
    found += [("card", card) for card in cards]
    for m in _IBAN.finditer(text):
        if iban.is_valid(m.group(0)):
            found.append(("iban", m.group(0)))
    for pattern in (_IPV4, _IPV6) if ("." in text or ":" in text) else ():
        for m in pattern.finditer(text):
            if not any(c.isdigit() for c in m.group(0)):  # "abc::def" is C++, not an address
                continue
            try:
                ipaddress.ip_address(m.group(0))
            except ValueError:
                continue
            found.append(("ip", m.group(0)))
    if _SECRET_HINT.search(text):
        found += [("credential", value) for value in _credentials(text)]
    return tuple(found)


def placeholder(kind: str, number: int) -> str:
    """What the engine reads in place of a request's ``number``-th item of ``kind``."""
    return f"[{kind.upper()}_{number}]"


def redact(texts: list[str], region: str) -> tuple[list[str], list[tuple[str, str, str]]]:
    """``texts`` (one request's) with each sensitive item replaced by a placeholder, and
    ``(placeholder, kind, value)`` for each item replaced (phone numbers without a country
    code read as ``region``'s). An item gets one placeholder wherever it occurs in the
    texts; items of a kind are numbered in order of first appearance (``[EMAIL_1]``,
    ``[EMAIL_2]``, ``[PHONE_1]``)."""
    items: dict[str, tuple[str, str]] = {}  # value -> (placeholder, kind)
    counts: dict[str, int] = {}
    find_in = finder(region)
    for text in texts:
        for kind, value in find_in(text):
            if value not in items:
                counts[kind] = counts.get(kind, 0) + 1
                items[value] = (placeholder(kind, counts[kind]), kind)
    if not items:
        return texts, []
    # Longest first: an item inside a longer one (a phone number within a card's digits)
    # is replaced with the longer one.
    longest = sorted(items, key=len, reverse=True)
    pattern = re.compile("|".join(re.escape(value) for value in longest))
    out = [pattern.sub(lambda m: items[m.group(0)][0], text) for text in texts]
    return out, [(held, kind, value) for value, (held, kind) in items.items()]


def _digits(text: str) -> str:
    return re.sub(r"\D", "", text)


def _texts(value: Any) -> list[str]:
    """The strings in a prompt value (a string, a list of strings or of content parts)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        out = []
        for item in value:
            if isinstance(item, dict):
                out += _texts(item.get("text") or item.get("content"))
            else:
                out += _texts(item)
        return out
    return []


def prompt_texts(raw: bytes) -> list[str]:
    """The prompt text of one batch line (its messages' contents, ``prompt``, ``input``,
    score/rerank texts); none when the line is no JSON object with a body."""
    try:
        line = _decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return []
    body = line.get("body") if isinstance(line, dict) else None
    if not isinstance(body, dict):
        return []
    texts = []
    for message in body.get("messages") or []:
        if isinstance(message, dict):
            texts += _texts(message.get("content"))
    for name in ("prompt", "input", "text_1", "text_2", "query", "documents"):
        texts += _texts(body.get(name))
    return texts


@dataclass
class SensitiveFindings:
    """What the scan found in a file (or a part of it): per kind, the items and lines
    counted, and the first LISTED_FINDINGS ``(line, masked value)`` in file order; phone
    numbers without a country code read as ``region``'s."""

    policy: str = "warn"
    region: str = DEFAULT_PHONE_REGION
    found: dict[str, int] = field(default_factory=dict)  # items, by kind
    lines: dict[str, int] = field(default_factory=dict)  # lines with one, by kind
    listed: dict[str, list[tuple[int, str]]] = field(default_factory=dict)
    line_numbers: list[int] = field(default_factory=list)  # lines with any, first ones
    flagged_lines: int = 0  # lines with any

    def add_line(self, line_no: int, raw: bytes) -> None:
        """Scans one line (its raw bytes as read)."""
        if worth_a_look(raw):
            self._search(line_no, raw)

    def add_lines(self, line_nos: list[int], raws: list[bytes]) -> None:
        """Scans consecutive lines, as :meth:`add_line` each (the prefilter on all at once)."""
        for index in lines_worth_a_look(raws):
            self._search(line_nos[index], raws[index])

    def _search(self, line_no: int, raw: bytes) -> None:
        kinds_here: set[str] = set()
        find_in = finder(self.region)  # a dict lookup a flagged line (not picklable: no field)
        for text in prompt_texts(raw):
            for kind, value in find_in(text):
                self.found[kind] = self.found.get(kind, 0) + 1
                listed = self.listed.setdefault(kind, [])
                if len(listed) < LISTED_FINDINGS:
                    listed.append((line_no, mask(kind, value)))
                if kind not in kinds_here:
                    kinds_here.add(kind)
                    self.lines[kind] = self.lines.get(kind, 0) + 1
        if kinds_here:
            self.flagged_lines += 1
            if len(self.line_numbers) < LISTED_FINDINGS:
                self.line_numbers.append(line_no)

    def merge(self, other: SensitiveFindings) -> None:
        """Adds those of a later part of the file."""
        for kind, n in other.found.items():
            self.found[kind] = self.found.get(kind, 0) + n
        for kind, n in other.lines.items():
            self.lines[kind] = self.lines.get(kind, 0) + n
        for kind, items in other.listed.items():
            listed = self.listed.setdefault(kind, [])
            listed += items[: LISTED_FINDINGS - len(listed)]
        self.line_numbers += other.line_numbers[: LISTED_FINDINGS - len(self.line_numbers)]
        self.flagged_lines += other.flagged_lines

    def summary(self) -> list[str]:
        """One line of text per kind found: how many, on how many lines, which (masked)."""
        out = []
        for kind, label in KINDS.items():
            if kind not in self.found:
                continue
            listed = self.listed[kind]
            shown = ", ".join(f"line {line} {value}" for line, value in listed[:10])
            more = " ..." if self.found[kind] > min(len(listed), 10) else ""
            out.append(
                f"{label}: {self.found[kind]:,} on {self.lines[kind]:,} lines ({shown}{more})"
            )
        return out

    def region_line(self) -> str:
        """The region the scan assumed, said where the phone findings are."""
        return (
            "phone numbers without a +country code are read as in "
            f"{region_label(self.region)} (Settings, Sensitive data)"
        )

    def refusal(self) -> str:
        """The refusal's message: what was found and on which lines."""
        lines = ", ".join(str(n) for n in self.line_numbers)
        more = " ..." if self.flagged_lines > len(self.line_numbers) else ""
        kinds = ", ".join(
            f"{self.found[kind]:,} {label}" for kind, label in KINDS.items() if kind in self.found
        )
        return (
            f"sensitive data in the prompts of {self.flagged_lines:,} lines ({kinds}), and "
            f"the studio's policy refuses such a file (Settings, Sensitive data): remove it "
            f"from lines {lines}{more}"
        )
