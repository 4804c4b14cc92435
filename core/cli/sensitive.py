"""``sensitive``: the studio's policy for sensitive data in prompts and its phone region,
shown or set through the rule Settings saves through (core/check/sensitive.py,
``save_studio``); an owner's own policy is ``keys sensitive``."""

from __future__ import annotations

import argparse
import sys

from core.check.sensitive import (
    POLICIES,
    PolicyProblem,
    SensitivePolicy,
    read_policy,
    region_label,
    save_studio,
)
from core.cli.common import EXIT_USAGE
from core.config import data_paths


def describe(kept: SensitivePolicy) -> list[str]:
    """The studio's setting as the command prints it, one fact a line."""
    owners = ", ".join(f"{name} = {policy}" for name, policy in sorted(kept.owners.items()))
    region = region_label(kept.phone_region)
    return [
        f"sensitive data: {kept.policy} (the studio's policy"
        + (f"; owners' own: {owners})" if owners else ")"),
        f"phone numbers without a +country code are read as in {region}",
    ]


def cmd_sensitive(args: argparse.Namespace) -> int:
    home = data_paths().home
    try:
        if args.policy is None and args.region is None:
            kept = read_policy(home)
        else:
            kept = save_studio(home, policy=args.policy, phone_region=args.region)
    except PolicyProblem as exc:
        print(f"error: {exc}; nothing was saved", file=sys.stderr)
        return EXIT_USAGE
    print("\n".join(describe(kept)))
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    sensitive = commands.add_parser(
        "sensitive",
        help="show or set the studio's policy for sensitive data and its phone region",
        description="Shows the studio's policy for sensitive data in prompts and the region "
        "phone numbers without a +country code are read as, or sets either or both, as "
        "Settings does (Sensitive data). A wrong policy or region is named and nothing is "
        "saved. An owner's own policy: core keys sensitive NAME POLICY. "
        "Example: core sensitive redact --region DE.",
    )
    sensitive.add_argument(
        "policy",
        nargs="?",
        metavar="POLICY",
        help=f"one of {', '.join(POLICIES)}; none: keep it (warn unless set)",
    )
    sensitive.add_argument(
        "--region",
        metavar="XX",
        help="libphonenumber's region (ISO 3166 alpha-2, e.g. US, DE) that numbers written "
        "without +country are read as (US unless set)",
    )
    sensitive.set_defaults(handler=cmd_sensitive)
