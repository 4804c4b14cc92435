"""``models prepare``: the built-in model folders (chat and embedding); ``models
add-adapter``: a name for a LoRA adapter on its base."""

from __future__ import annotations

import argparse
import sys

from core.cli.common import (
    EXIT_USAGE,
)
from core.model_folders import ModelError, prepare_default_model, prepare_embedding_model
from core.model_names import add_adapter


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


def cmd_models_add_adapter(args: argparse.Namespace) -> int:
    try:
        adapter = add_adapter(args.name, args.folder, args.base)
    except (ValueError, ModelError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"{adapter.name}: LoRA adapter {adapter.folder} (rank {adapter.rank}) on {adapter.base}")
    return 0


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    models = commands.add_parser("models", help="model folders")
    models_commands = models.add_subparsers(dest="models_command", required=True)
    prepare = models_commands.add_parser("prepare", help="prepare the built-in models")
    prepare.set_defaults(handler=cmd_models_prepare)
    adapter = models_commands.add_parser(
        "add-adapter",
        help="name a LoRA adapter folder (peft's) so that lines naming it run on its base",
        description="Checks the adapter against its base (the modules it changes and their "
        "shapes) and keeps NAME for it: a line whose body.model is NAME runs on BASE's "
        "engine with the adapter, and its answer carries NAME.",
    )
    adapter.add_argument("name", metavar="NAME", help="the model name lines give")
    adapter.add_argument(
        "folder", metavar="FOLDER", help="adapter_config.json + adapter_model.safetensors"
    )
    adapter.add_argument(
        "--base",
        required=True,
        help="the base model folder (or the name of one under the models folder)",
    )
    adapter.set_defaults(handler=cmd_models_add_adapter)
