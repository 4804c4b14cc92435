"""``review``: a sample's label schema and guidelines, its owner, reviewers' agreement on
it (Krippendorff's alpha per question and per pair, the items they differ on) and an owner's
adjudication of an item's final label, with the rules Review's page calls
(core/human/label_schemas.py, core/human/owners.py, core/store/agreement.py)."""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from typing import TYPE_CHECKING

from core.cli.common import EXIT_USAGE, open_store

if TYPE_CHECKING:
    from pathlib import Path

    from core.store.db import Store


def _text(path: str) -> str | None:
    """A file's text (``-``: standard input), or None after saying why it cannot be read."""
    try:
        return sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: cannot read {path}: {exc}", file=sys.stderr)
        return None


def _has_sample(store: Store, sample_id: str) -> bool:
    """Whether the sample exists (else it says so, on standard error)."""
    from core.store import samples as sm

    if sm.list_samples(store).query("sample_id == @sample_id").empty:
        print(f"error: no sample {sample_id!r}: Review lists the samples", file=sys.stderr)
        return False
    return True


def _sample_folder(sample_id: str) -> Path | None:
    """The folder of people's work holding the sample's schema and owner, once the sample
    is found in the index (None, said on standard error, when it or the store is not)."""
    store = open_store([])
    if store is None:
        return None
    try:
        return store.human_dir if _has_sample(store, sample_id) else None
    finally:
        store.close()


def cmd_schema(args: argparse.Namespace) -> int:
    from core.access import access_config
    from core.human import label_schemas as lsc
    from core.human import owners as ow
    from core.human.questions import SchemaError, questions_text

    folder = _sample_folder(args.sample)
    if folder is None:
        return EXIT_USAGE
    schema = lsc.schema_of(folder, args.sample)
    if args.clear or args.questions is not None or args.guidelines is not None:
        # the page's rule of who may change it; the command line is this machine's user
        # with the data folder's own access, an admin (core/human/owners.py)
        refused = ow.change_refusal(folder, args.sample, ow.command_line(), access_config().sign_in)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return EXIT_USAGE
        questions = "" if args.clear else questions_text(schema.questions)
        guidelines = "" if args.clear else schema.guidelines
        if args.questions is not None and (questions := _text(args.questions)) is None:
            return EXIT_USAGE
        if args.guidelines is not None and (guidelines := _text(args.guidelines)) is None:
            return EXIT_USAGE
        try:  # one rule, the page's: nothing is written when it refuses
            schema = lsc.set_schema(folder, args.sample, questions, guidelines, args.by)
        except SchemaError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    if args.json:
        print(schema.model_dump_json(indent=2))
        return 0
    if not schema.questions:
        print(f"sample {args.sample}: pass / fail / unsure with a score (no schema)")
    else:
        print(f"sample {args.sample}: {len(schema.questions)} questions")
        print(questions_text(schema.questions))
    if schema.guidelines:
        print("guidelines:")
        print(schema.guidelines)
    return 0


def cmd_agreement(args: argparse.Namespace) -> int:
    from core.store import agreement as ag

    store = open_store([])
    if store is None:
        return EXIT_USAGE
    try:
        if not _has_sample(store, args.sample):
            return EXIT_USAGE
        found = ag.sample_agreement(store, args.sample)
    finally:
        store.close()
    if args.json:
        pairs = found.pairs.drop(columns=[a.question for a in found.questions], errors="ignore")
        tables = {  # pandas writes a missing value as null (json.dumps would write NaN)
            "pairs": json.loads(pairs.to_json(orient="records")),
            "disagreements": json.loads(
                found.disagreements.to_json(orient="records", date_format="iso")
            ),
        }
        shown = {
            "reviewers": found.reviewers,
            "problem": found.problem(),
            "questions": [vars(a) for a in found.questions],
            **tables,
        }
        print(json.dumps(shown, indent=2))
        return 0
    problem = found.problem()
    print(f"sample {args.sample}: {len(found.reviewers)} reviewers")
    if problem:
        print(problem)
        return 0
    for got in found.questions:
        print(f"{got.question} ({ag.LEVELS[got.level]}) alpha: {got.describe()}")
    for row in found.pairs.to_dict("records"):
        figures = "; ".join(f"{a.question} {row[a.question]}" for a in found.questions)
        pair = f"{row['reviewer A']} / {row['reviewer B']}"
        print(f"  {pair}: {row['both labelled']} items both labelled; {figures}")
    shown = found.disagreements
    print(f"{len(shown)} items whose reviewers' verdicts differ")
    for row in shown.to_dict("records"):
        final = row["adjudicated"]
        decided = f" -> final {final} by {row['adjudicated_by']}" if isinstance(final, str) else ""
        print(f"  item {row['item']} {row['job_id']} {row['custom_id']}: {row['labels']}{decided}")
    return 0


def cmd_owner(args: argparse.Namespace) -> int:
    from core.access import access_config
    from core.human import owners as ow

    folder = _sample_folder(args.sample)
    if folder is None:
        return EXIT_USAGE
    if args.set is not None:
        # the page's rule of who may name an owner; the command line is this machine's user
        # with the data folder's own access, an admin (core/human/owners.py)
        refused = ow.set_owner_refusal(ow.command_line(), access_config().sign_in)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            return EXIT_USAGE
        try:  # the page's check of the email: nothing is written when it refuses
            ow.record_owner(folder, args.sample, args.set, ow.command_line().user)
        except ow.OwnerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
    owner = ow.owner_of(folder, args.sample)
    if args.json:
        print(json.dumps({"sample_id": args.sample, "owner": owner}, indent=2))
    elif owner is None:
        print(
            f"sample {args.sample}: no owner recorded (anyone may change its schema, "
            "guidelines and queue, or set final labels, until an admin names one)"
        )
    else:
        print(f"sample {args.sample}: owner {owner}")
    return 0


def cmd_adjudicate(args: argparse.Namespace) -> int:
    from core.access import access_config
    from core.human import owners as ow
    from core.store import agreement as ag
    from core.store import samples as sm
    from core.store.review import ReviewError

    store = open_store([args.job])
    if store is None:
        return EXIT_USAGE
    try:
        holding = sm.samples_of_item(store, args.job, args.custom_id)
        if args.sample is not None:
            # the adjudication is for that sample's item, as on Review's page of the sample
            if not _has_sample(store, args.sample):
                return EXIT_USAGE
            if args.sample not in holding:
                print(
                    f"error: item {args.job} {args.custom_id} is not in sample "
                    f"{args.sample}: adjudicate one of its items, or leave out --sample",
                    file=sys.stderr,
                )
                return EXIT_USAGE
            holding = [args.sample]
        # the page's rule, asked of the sample named (without one, of every sample that
        # holds the item); the command line is this machine's user with the data folder's
        # own access, an admin (it may)
        sign_in = access_config().sign_in
        for sample_id in holding:
            refused = ow.change_refusal(store.human_dir, sample_id, ow.command_line(), sign_in)
            if refused:
                print(f"error: sample {sample_id}: {refused}", file=sys.stderr)
                return EXIT_USAGE
        note = args.note or ""
        ag.adjudicate(store, args.job, args.custom_id, args.verdict, args.by, note, args.sample)
    except ReviewError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        store.close()
    where = f" (sample {args.sample})" if args.sample is not None else ""
    print(
        f"{args.job} {args.custom_id}{where}: final label {args.verdict}, adjudicated by {args.by}"
    )
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    group = commands.add_parser(
        "review", help="a sample's label schema, reviewers' agreement and adjudication"
    )
    sub = group.add_subparsers(dest="review_command", required=True)
    schema = sub.add_parser(
        "schema",
        help="show a sample's label schema and guidelines, or set them as Review does: "
        "questions a line (single: Title | a, b / multiple: Title | a, b / rating: Title | "
        "1..5 / corrected: Title / comment: Title)",
    )
    schema.add_argument("sample", metavar="SAMPLE_ID", help="the sample's id")
    schema.add_argument("--questions", metavar="FILE", help="the questions (- : standard input)")
    schema.add_argument("--guidelines", metavar="FILE", help="the guidelines, plain text")
    schema.add_argument(
        "--clear", action="store_true", help="back to pass / fail / unsure with a score"
    )
    schema.add_argument("--by", default=getpass.getuser(), help="who sets it (default: this user)")
    schema.add_argument("--json", action="store_true", help="print the schema as JSON")
    schema.set_defaults(handler=cmd_schema)
    agree = sub.add_parser(
        "agreement",
        help="Krippendorff's alpha per question (verdict nominal, score ordinal, a schema's "
        "multiple choices by the MASI distance) with a 95%% bootstrap interval, per pair of "
        "reviewers, and the items whose verdicts differ",
    )
    agree.add_argument("--sample", required=True, metavar="SAMPLE_ID", help="the sample's id")
    agree.add_argument("--json", action="store_true", help="print JSON")
    agree.set_defaults(handler=cmd_agreement)
    owner = sub.add_parser(
        "owner",
        help="show a sample's owner (where sign-in is on, only the owner or an admin may "
        "change its schema, guidelines and queue, or set final labels), or name one as an "
        "admin does on Review",
    )
    owner.add_argument("sample", metavar="SAMPLE_ID", help="the sample's id")
    owner.add_argument(
        "--set", metavar="EMAIL", help="name the owner: their sign-in email (needs sign-in on)"
    )
    owner.add_argument("--json", action="store_true", help="print JSON")
    owner.set_defaults(handler=cmd_owner)
    adj = sub.add_parser(
        "adjudicate",
        help="set an item's final label over its reviewers' verdicts (theirs are kept)",
    )
    adj.add_argument("job", help="job id")
    adj.add_argument("custom_id", help="the item's custom_id")
    adj.add_argument("verdict", help="pass, fail, unsure, or a label a reviewer gave")
    adj.add_argument("--by", default=getpass.getuser(), help="who decides (default: this user)")
    adj.add_argument("--note", help="why (kept in the item's history)")
    adj.add_argument(
        "--sample",
        metavar="SAMPLE_ID",
        help="the sample whose item it is (its owner rule alone is asked, as on its Review "
        "page; default: every sample holding the item)",
    )
    adj.set_defaults(handler=cmd_adjudicate)
