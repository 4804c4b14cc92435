"""``models prepare``: the built-in model folders (chat and embedding)."""

from __future__ import annotations

import argparse
import sys

from core.cli.common import (
    EXIT_USAGE,
)
from core.model_folders import ModelError, prepare_default_model, prepare_embedding_model


def cmd_models_prepare(_args: argparse.Namespace) -> int:
    try:
        folder = prepare_default_model()
        embedding = prepare_embedding_model()
    except ModelError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"default model ready: {folder}")
    print(f"embedding model ready: {embedding}")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    models = commands.add_parser("models", help="model folders")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    prepare = models_commands.add_parser("prepare", help="prepare the built-in models")
    prepare.set_defaults(handler=cmd_models_prepare)
