"""``keys``: the Batch API's keys (core/api/keys.py): create one (printed once), list, revoke;
and whether a call from this machine needs one too (``keys loopback``); the quotas of keys
and users (core/jobs/quotas.py); a key's own run windows and policy for sensitive data."""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from core.api.keys import (
    ApiAccess,
    KeyProblem,
    create_key,
    read_access,
    read_keys,
    revoke_key,
    revoked_with_name,
    write_access,
)
from core.check.sensitive import POLICIES, PolicyProblem, read_policy, save_policy
from core.cli.common import EXIT_USAGE
from core.config import data_paths
from core.jobs.quotas import LIMITS, Quota, QuotaProblem, quota_of, read_quotas, set_quota
from core.jobs.windows import WindowProblem, set_owner_default
from core.jobs.windows import read_settings as read_windows


def cmd_create(args: argparse.Namespace) -> int:
    home = data_paths().home
    revoked = revoked_with_name(home, args.name)
    try:
        key = create_key(home, args.name)
    except KeyProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(key)
    print(
        f"key {args.name!r} created: it is shown only now (only its hash is kept); its "
        "holder owns the files and batches it makes and sees only those",
        file=sys.stderr,
    )
    if revoked:
        print(
            f"note: a key named {args.name!r} was revoked before ({revoked[-1].revoked_at}); "
            "this key is another one and does not see that key's files and batches (they "
            "stay visible on this machine: the app, and the API without a key)",
            file=sys.stderr,
        )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    home = data_paths().home
    records = read_keys(home)
    try:
        quotas = read_quotas(home)
    except QuotaProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if not records:
        print("no keys (beyond this machine the API refuses every call)")
    for record in records:
        quota = quotas.get(f"key:{record.identity}")
        limits = f"\tquota {quota.describe()}" if quota else ""
        print(f"{record.name}\t{record.hint}…\tcreated {record.created_at}{limits}")
    for owner, quota in quotas.items():
        if owner.startswith("user:"):
            print(f"user {owner.removeprefix('user:')}\tquota {quota.describe()}")
    return 0


def _limit(text: str) -> int | None:
    """A limit as given: a whole number of at least 1, or ``none`` for no limit."""
    if text.strip().lower() == "none":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of at least 1, or none")
    return value


def cmd_quota(args: argparse.Namespace) -> int:
    home = data_paths().home
    if args.user is not None:
        user = args.user or getpass.getuser()
        owner, who = f"user:{user}", f"user {user}"
    else:
        found = [r for r in read_keys(home) if r.name == args.name]
        if not found:
            print(f"error: no key named {args.name!r} (core keys list)", file=sys.stderr)
            return EXIT_USAGE
        owner, who = f"key:{found[0].identity}", f"key {args.name}"
    try:
        quota = quota_of(home, owner)
        given = {n: getattr(args, n) for n in LIMITS if getattr(args, n) is not _UNSET}
        if given:
            quota = Quota(**{**quota.model_dump(), **given})
            set_quota(home, owner, quota)
    except QuotaProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{who}: {quota.describe() if quota.is_set else 'no quota (nothing is limited)'}")
    return 0


_UNSET = object()  # a limit not given: kept as it is


def _is_key(home: Path, name: str) -> bool:
    """Whether a key has this name (saying so on stderr where none has)."""
    if any(r.name == name for r in read_keys(home)):
        return True
    print(f"error: no key named {name!r} (core keys list)", file=sys.stderr)
    return False


def cmd_windows(args: argparse.Namespace) -> int:
    home = data_paths().home
    if not _is_key(home, args.name):
        return EXIT_USAGE
    try:
        settings = read_windows(home)
        if args.windows is not None:
            settings = set_owner_default(home, args.name, args.windows)
    except WindowProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    own = settings.owners.get(args.name)
    if own:
        print(f"key {args.name}: its jobs run in {own} ({settings.time_zone})")
    else:
        studio = settings.default or "any time"
        print(f"key {args.name}: no windows of its own; the studio's default: {studio}")
    return 0


def cmd_sensitive(args: argparse.Namespace) -> int:
    home = data_paths().home
    if not _is_key(home, args.name):
        return EXIT_USAGE
    try:
        kept = read_policy(home)
        if args.policy is not None:
            kept = save_policy(home, "" if args.policy == "studio" else args.policy, args.name)
    except PolicyProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    own = kept.owners.get(args.name)
    if own:
        print(f"key {args.name}: its batches' sensitive data: {own}")
    else:
        print(f"key {args.name}: the studio's policy for sensitive data applies: {kept.policy}")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    try:
        revoke_key(data_paths().home, args.name)
    except KeyProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"key {args.name!r} revoked")
    return 0


def cmd_loopback(args: argparse.Namespace) -> int:
    home = data_paths().home
    if args.rule is not None:
        write_access(home, ApiAccess(keys_on_loopback=args.rule == "require"))
    if read_access(home).keys_on_loopback:
        print("a call from this machine needs a key too (`keys loopback open` to lift it)")
    else:
        print(
            "a call with no key from this machine sees every file and batch; a key is judged "
            "as a key everywhere (`keys loopback require` to need one here too)"
        )
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    keys = commands.add_parser("keys", help="API keys for the Batch API beyond this machine")
    actions = keys.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="make a key (printed once) named after its owner")
    create.add_argument("name", help="the owner: letters, digits and . _ @ -")
    create.set_defaults(handler=cmd_create)
    actions.add_parser("list", help="the keys' names and first characters").set_defaults(
        handler=cmd_list
    )
    revoke = actions.add_parser(
        "revoke", help="revoke a key: its holder is refused; its work stays its own"
    )
    revoke.add_argument("name")
    revoke.set_defaults(handler=cmd_revoke)
    loopback = actions.add_parser(
        "loopback",
        help="whether a call with no key from this machine (or a tunnel to it) is admitted",
    )
    loopback.add_argument(
        "rule",
        nargs="?",
        choices=["open", "require"],
        help="open: admitted, sees everything (the default); require: it needs a key; "
        "none: say which holds",
    )
    loopback.set_defaults(handler=cmd_loopback)
    windows = actions.add_parser(
        "windows",
        help="show or set a key's default run windows: the hours its batches may run in",
        description='Shows a key\'s default run windows, or sets them ("": none of its own, '
        "the studio's default applies). A batch's own run_window metadata comes first. "
        'Example: core keys windows alice "weekdays 20:00-07:00, weekends all day".',
    )
    windows.add_argument("name", help="the key's name")
    windows.add_argument("windows", nargs="?", help="the windows, in the studio's time zone")
    windows.set_defaults(handler=cmd_windows)
    sensitive = actions.add_parser(
        "sensitive",
        help="show or set a key's policy for sensitive data in its batches' prompts",
        description="Shows the policy a key's batches are checked and run under, or sets one "
        "of its own (studio: none of its own, the studio's applies; Settings, Sensitive "
        "data). Example: core keys sensitive alice redact.",
    )
    sensitive.add_argument("name", help="the key's name")
    sensitive.add_argument("policy", nargs="?", choices=[*POLICIES, "studio"])
    sensitive.set_defaults(handler=cmd_sensitive)
    quota = actions.add_parser(
        "quota",
        help="show or set the quota of a key or a user: a batch beyond it is refused",
        description="Shows the quota of a key (or, with --user, of a user), or sets the limits "
        "given (the others are kept). A new job beyond a limit is refused, by the API with "
        "429, by Run and core run with the same message. No limit: nothing is limited.",
    )
    who = quota.add_mutually_exclusive_group(required=True)
    who.add_argument("name", nargs="?", help="the key's name")
    who.add_argument(
        "--user",
        nargs="?",
        const="",
        metavar="USER",
        help="a user instead: a signed-in user's email, or without USER this machine's user "
        "(core run, the inbox, the API on loopback without a key)",
    )
    for name, what in (
        ("running_jobs", "jobs not yet ended (queued ones count)"),
        ("queued_lines", "lines of jobs not yet answered, the new job's included"),
        ("tokens_per_day", "prompt + completion tokens computed in the last 24 h"),
    ):
        quota.add_argument(
            f"--{name.replace('_', '-')}",
            dest=name,
            type=_limit,
            default=_UNSET,
            metavar="N",
            help=f"at most N {what}; none: no limit",
        )
    quota.set_defaults(handler=cmd_quota)
