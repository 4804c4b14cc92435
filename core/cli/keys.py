"""``keys``: the Batch API's keys (core/api/keys.py): create one (printed once), list, revoke;
and whether a call from this machine needs one too (``keys loopback``)."""

from __future__ import annotations

import argparse
import sys

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
from core.cli.common import EXIT_USAGE
from core.config import data_paths


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
    records = read_keys(data_paths().home)
    if not records:
        print("no keys (beyond this machine the API refuses every call)")
    for record in records:
        print(f"{record.name}\t{record.hint}…\tcreated {record.created_at}")
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
