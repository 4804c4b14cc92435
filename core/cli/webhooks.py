"""``webhooks``: endpoints told when a batch ends (core/webhooks): add one (its secret
printed once), list, remove, rotate its secret; ``deliver`` runs the dispatcher (started by
itself when an event is recorded)."""

from __future__ import annotations

import argparse
import sys

from core.cli.common import EXIT_USAGE
from core.config import data_paths
from core.webhooks.outbox import deliver, pending_events
from core.webhooks.registry import (
    EVENT_TYPES,
    OLD_SECRET_SECONDS,
    WebhookProblem,
    add_endpoint,
    read_endpoints,
    remove_endpoint,
    rotate_secret,
)


def cmd_add(args: argparse.Namespace) -> int:
    try:
        endpoint = add_endpoint(data_paths().home, args.url, args.events)
    except WebhookProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(endpoint.secret)
    print(
        f"endpoint {endpoint.id} added for {', '.join(endpoint.events)}: its secret is shown "
        "only now (Settings shows it too); verify with openai's client.webhooks.unwrap",
        file=sys.stderr,
    )
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    home = data_paths().home
    endpoints = read_endpoints(home)
    if not endpoints:
        print("no webhook endpoints (`python -m core webhooks add URL`)")
    for e in endpoints:
        print(f"{e.id}\t{e.url}\t{','.join(e.events)}\tcreated {e.created_at}")
    waiting = sum(not d.done for entry in pending_events(home) for d in entry.deliveries)
    if waiting:
        print(f"{waiting} deliveries waiting to be sent or retried")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    try:
        gone = remove_endpoint(data_paths().home, args.endpoint)
    except WebhookProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"endpoint {gone.id} ({gone.url}) removed: no event is sent to it any more")
    return 0


def cmd_rotate(args: argparse.Namespace) -> int:
    try:
        endpoint = rotate_secret(data_paths().home, args.endpoint)
    except WebhookProblem as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(endpoint.secret)
    print(
        f"endpoint {endpoint.id} has a new secret, shown only now; the old one signs beside "
        f"it for {OLD_SECRET_SECONDS // 3600} h",
        file=sys.stderr,
    )
    return 0


def cmd_deliver(args: argparse.Namespace) -> int:
    if not deliver(data_paths().home):
        print("another dispatcher is sending the events", file=sys.stderr)
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    hooks = commands.add_parser("webhooks", help="endpoints told, signed, when a batch ends")
    actions = hooks.add_subparsers(dest="action", required=True)
    add = actions.add_parser(
        "add",
        help="register an endpoint; its whsec_ secret is printed once",
        description="Registers URL (any http:// or https:// URL, loopback included) to be "
        "POSTed OpenAI's batch event, signed per Standard Webhooks, whenever a batch ends.",
    )
    add.add_argument("url")
    add.add_argument(
        "--events",
        nargs="+",
        choices=EVENT_TYPES,
        metavar="EVENT",
        help=f"the events it wants (default: all of {', '.join(EVENT_TYPES)})",
    )
    add.set_defaults(handler=cmd_add)
    actions.add_parser("list", help="the endpoints, and deliveries waiting").set_defaults(
        handler=cmd_list
    )
    for name, handler, what in (
        ("remove", cmd_remove, "remove an endpoint: nothing more is sent to it"),
        ("rotate", cmd_rotate, "give an endpoint a new secret; the old one signs for 24 h"),
    ):
        action = actions.add_parser(name, help=what)
        action.add_argument("endpoint", help="its id (webhooks list) or URL")
        action.set_defaults(handler=handler)
    actions.add_parser(
        "deliver",
        help="send the events waiting, retrying until each is sent (started by itself)",
    ).set_defaults(handler=cmd_deliver)
