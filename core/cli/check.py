"""``check`` and ``build``: a batch file checked line by line, or built from a table."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from core.check import check_file
from core.check.sampling import RequestError
from core.check.tools import forced_tool
from core.cli.common import (
    EXIT_INVALID,
    EXIT_USAGE,
    defaults_arguments,
    input_file,
    job_defaults,
    model_map_of,
    print_report,
)
from core.config import data_paths, default_model_dir


def cmd_check(args: argparse.Namespace) -> int:
    from core.check import summary_lines
    from core.jobs.queue import models_loaded
    from core.jobs.submit import Submission, planned_spec
    from core.plan.estimate import estimate, estimate_lines
    from core.plan.pricing import load_prices
    from core.reuse.forecast import digests_for, forecast_reuse
    from core.schemas import EngineConfig

    file = input_file(args.file)
    model_map = model_map_of(args.map)
    defaults = job_defaults(args)
    if file is None or model_map is None or defaults is None:
        return EXIT_USAGE
    model: Path | None = Path(args.model).expanduser() if args.model else default_model_dir()
    if args.no_tokens:
        # No tokenizer is loaded; the model still judges tool_choice "auto" lines (its chat
        # template decides whether it can run them). None: they are flagged unchecked.
        model = model if model.is_dir() else None
    elif not (model / "tokenizer.json").is_file():
        if args.model:
            print(f"error: {model} has no tokenizer.json", file=sys.stderr)
            return EXIT_USAGE
        model = None  # the built-in model is not prepared: check the structure only
    report = check_file(
        file,
        defaults,
        model_folder=model,
        model_map=model_map,
        count_tokens=not args.no_tokens,
        valid_out=args.valid_out,
    )
    prices = load_prices()
    if args.budget is not None:
        prices.budget = args.budget
    result = estimate(report, prices, loaded=models_loaded(data_paths().jobs))
    # The job `core run` would make of this file (its engine defaults: it has no engine flags).
    planned = planned_spec(
        Submission(
            engine=EngineConfig(model=str(model or default_model_dir())),
            defaults=defaults,
            model_map=model_map,
        )
    )
    # Keyed from the digests the check's own pass kept: the file is read once.
    reuse = forecast_reuse(
        digests_for(report, planned), planned, jobs_dir=data_paths().jobs, prices=prices
    )
    data = report.to_dict()
    data["estimate"] = result.to_dict()
    data["reuse"] = asdict(reuse)
    if args.report:
        Path(args.report).write_text(json.dumps(data, ensure_ascii=False, indent=1), "utf-8")
    if args.json:
        print(json.dumps(data, ensure_ascii=False, indent=1))
        return 0 if report.ok else EXIT_INVALID
    print_report(report)
    print("summary:")
    for line in summary_lines(report):
        print(f"  {line}")
    if args.no_tokens:
        print("  prompt tokens not counted (--no-tokens)")
    elif model is None:
        print("  prompt tokens not counted (no model folder with a tokenizer; see --model)")
    print("estimate:")
    for line in estimate_lines(result):
        print(f"  {line}")
    for line in reuse.lines():  # docs/reuse.md; `run --no-reuse` computes them all
        print(f"  {line}")
    if args.valid_out:
        print(f"valid lines written to {args.valid_out} ({report.valid})")
    return 0 if report.ok else EXIT_INVALID


def cmd_build(args: argparse.Namespace) -> int:
    from core.plan.builder import BuildError, BuildSpec, build_file, preview, read_table
    from core.plan.embed_builder import DEFAULT_EMBEDDING_MODEL, EmbedSpec
    from core.plan.rerank_builder import RerankSpec

    table_file = input_file(args.table)
    if table_file is None:
        return EXIT_USAGE
    if not args.preview and not args.output:
        print("error: give -o OUTPUT (or --preview N)", file=sys.stderr)
        return EXIT_USAGE
    spec: BuildSpec | EmbedSpec | RerankSpec
    if args.rerank_query:  # a rerank batch: one line per query, its rows' documents
        if not args.rerank_document:
            print("error: --rerank-query needs --rerank-document", file=sys.stderr)
            return EXIT_USAGE
        spec = RerankSpec(
            query_column=args.rerank_query,
            document_column=args.rerank_document,
            label_column=args.rerank_label,
            id_column=args.id_column,
            task=args.task,
            model=args.model_name or "rerank-model",
            top_n=args.top_n,
            job_id=args.job_id or "",
        )
    elif args.embed_column:  # an embeddings batch: one column's texts, no templates
        spec = EmbedSpec(
            column=args.embed_column,
            id_column=args.id_column,
            task=args.task,
            model=args.model_name or DEFAULT_EMBEDDING_MODEL,
            rows_per_line=args.rows_per_line,
            encoding_format=args.encoding_format,
            job_id=args.job_id or "",
            metadata=not args.no_metadata,
            metadata_columns=args.metadata_column,
        )
    else:
        user_template = args.user_template
        if args.user_template_file:
            user_template = Path(args.user_template_file).read_text(encoding="utf-8")
        if not user_template:
            print(
                "error: give --user-template or --user-template-file (or --embed-column)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        params = {
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "top_p": args.top_p,
        }
        if args.tool_schema:  # every answer a call of this function (a forced tool call)
            try:
                text = Path(args.tool_schema).read_text(encoding="utf-8")
                params.update(forced_tool(args.tool_name, text))
            except (OSError, RequestError) as exc:
                print(f"error: --tool-schema: {exc}", file=sys.stderr)
                return EXIT_INVALID
        spec = BuildSpec(
            user_template=user_template,
            system_prompt=args.system or "",
            id_column=args.id_column,
            task=args.task,
            model=args.model_name or "gpt-4o-mini",
            prompt_version=args.prompt_version,
            job_id=args.job_id or "",
            params=params,
            skip_empty=not args.keep_empty,
        )
    try:
        table = read_table(table_file)
        if args.preview:
            result = preview(table, spec, args.preview)
            for line in result.lines:
                print(json.dumps(line, ensure_ascii=False, indent=1))
        else:
            result = build_file(table, spec, args.output, replace=True)  # a path one named
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_INVALID
    for problem in result.problems[:50]:
        print(f"  {problem}")
    if len(result.problems) > 50:
        print(f"  ... and {len(result.problems) - 50} more")
    if not args.preview:
        lines = f" in {result.line_count} lines" if result.line_count != result.written else ""
        print(f"{result.written} of {result.rows} rows written{lines} to {args.output}")
    return 0 if result.written else EXIT_INVALID


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Adds this group's commands to the parser."""
    check = commands.add_parser("check", help="check a batch file line by line")
    check.add_argument("file")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument(
        "--model",
        help=f"model folder whose tokenizer counts tokens (default: {default_model_dir()})",
    )
    check.add_argument(
        "--no-tokens",
        action="store_true",
        help="check the structure only: no prompt tokens counted (the model still "
        "judges tool_choice 'auto' lines by its chat template)",
    )
    check.add_argument(
        "--map",
        action="append",
        default=[],
        metavar="NAME=FOLDER",
        help="run body.model NAME on a local model folder (repeatable; default: --model)",
    )
    check.add_argument("--valid-out", metavar="FILE", help="write the valid lines to FILE")
    check.add_argument("--report", metavar="FILE", help="write the JSON report to FILE")
    check.add_argument("--budget", type=float, help="budget for this run (price table currency)")
    defaults_arguments(check)
    check.set_defaults(handler=cmd_check)

    build = commands.add_parser(
        "build", help="build a batch file from a CSV, Parquet or Excel table"
    )
    build.add_argument("table")
    build.add_argument("-o", "--output", help="the batch JSONL to write")
    build.add_argument("--user-template", default="", help="user prompt, Jinja2: {{ column }}")
    build.add_argument("--user-template-file", help="read the user prompt template from a file")
    build.add_argument("--system", help="system prompt (may use {{ column }} too)")
    build.add_argument("--id-column", help="column with each row's id (default: row numbers)")
    build.add_argument("--task", default="task", help="task name; custom_id is TASK:ID")
    build.add_argument(
        "--model-name",
        help="body.model of each line (default gpt-4o-mini; embeddings: text-embedding-3-small)",
    )
    build.add_argument("--prompt-version", default="v1")
    build.add_argument("--job-id", help="job_id put into each body's metadata")
    build.add_argument("--max-tokens", type=int)
    build.add_argument("--temperature", type=float)
    build.add_argument("--top-p", type=float)
    build.add_argument(
        "--tool-schema",
        metavar="FILE",
        help="answer with a call of one function: its parameters' JSON Schema",
    )
    build.add_argument("--tool-name", default="extract", help="the function's name (--tool-schema)")
    build.add_argument(
        "--keep-empty",
        action="store_true",
        help="render empty cells as '' instead of leaving rows out",
    )
    rerank = build.add_argument_group("a rerank batch (/v1/rerank) instead of chats")
    rerank.add_argument("--rerank-query", metavar="COLUMN", help="the queries' column")
    rerank.add_argument("--rerank-document", metavar="COLUMN", help="the documents' column")
    rerank.add_argument(
        "--rerank-label", metavar="COLUMN", help="relevance labels (metadata.relevance)"
    )
    rerank.add_argument("--top-n", type=int, default=0, help="ranked documents kept (0: all)")
    embed = build.add_argument_group("an embeddings batch (/v1/embeddings) instead of chats")
    embed.add_argument("--embed-column", metavar="COLUMN", help="embed this column's texts")
    embed.add_argument(
        "--rows-per-line",
        type=int,
        default=1,
        metavar="N",
        help="rows per request line (N > 1: input is a list of N texts)",
    )
    embed.add_argument("--encoding-format", choices=("float", "base64"), default="float")
    embed.add_argument(
        "--metadata-column",
        action="append",
        default=[],
        metavar="COLUMN",
        help="copy this column into each body's metadata (repeatable)",
    )
    embed.add_argument(
        "--no-metadata",
        action="store_true",
        help="no body.metadata (OpenAI's embeddings API does not know the field)",
    )
    build.add_argument(
        "--preview", type=int, metavar="N", help="print the first N lines; write nothing"
    )
    build.set_defaults(handler=cmd_build)
