"""``python -m core``: the headless command line, for scripts and pipelines.

python -m core check FILE.jsonl [--json] [--model DIR] [--map NAME=DIR] [--valid-out FILE]
python -m core build TABLE.{csv,parquet,xlsx} -o OUT.jsonl --user-template "..." [options]
python -m core run FILE.jsonl -o OUT.jsonl [--model DIR] [--name NAME] [--skip-invalid] [--restart]
python -m core resume JOB [--retry] | retry JOB | cancel JOB
python -m core approve JOB [--by WHO] | reject JOB --why TEXT [--by WHO]
python -m core jobs list [--json] | jobs rename JOB NAME
python -m core reconcile JOB [--json] [--write-rerun FILE] | verify JOB | watch
python -m core export JOB... -o OUT.{csv,parquet,jsonl,xlsx} [--what ...] [filters]
python -m core review agreement --sample ID [--json]
python -m core review adjudicate JOB ID VERDICT [--by WHO] [--note TEXT] [--sample ID]
python -m core review owner SAMPLE [--set EMAIL] [--json] | review schema SAMPLE [--questions FILE]
python -m core grade JOB... --rules RULES.yaml [--json]
python -m core judge JOB --template FILE [--model DIR] [--failures-of RULE | --sample ID]
python -m core judge JOB --template FILE --against JOB_B   (pairwise)
python -m core experiment run FILE [--map NAME=DIR] [--no-wait] | grade ID | export ID -o OUT.csv
python -m core models prepare
python -m core embed --model DIR --text TEXT [--text ...] [--stdin]
python -m core engine status [--json] | engine unload MODEL | engine stop
python -m core serve [--host 127.0.0.1] [--port 8501] [--engine-idle SECONDS]
python -m core keys create NAME | keys list | keys revoke NAME
python -m core sensitive [POLICY] [--region XX]
python -m core webhooks add URL [--events ...] | webhooks list | remove ID | rotate ID | deliver

One module per command group (check, jobs, approval, experiment, export, review, grade, judge,
models, embed, engine, serve, keys, sensitive, webhooks); each adds its commands.
"""

from __future__ import annotations

import argparse

from core.cli import (
    approval,
    check,
    embed,
    engine,
    experiment,
    export,
    grade,
    jobs,
    judge,
    keys,
    models,
    review,
    sensitive,
    serve,
    webhooks,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m core", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    groups = (check, jobs, approval, experiment, export, review, grade, judge, models, embed)
    for group in (*groups, engine, serve, keys, sensitive, webhooks):
        group.add_commands(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)
