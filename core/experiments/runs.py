"""An experiment run as one job, kept in files, graded, and read as a matrix.

``data/experiments/exp_<hex>/`` holds the file as given (``experiment.yaml``), its plan and
the job it runs as (``state.json``) and its grades (``grades.json``): people's work, which
outlives the index. Every (test, prompt, provider) is one line of ONE batch file (its
``custom_id`` ``t<test>.p<prompt>.m<provider>``), submitted through
:func:`core.jobs.submit.submit`, so the engine, its prefix cache and the result cache are
shared and cancel / resume act on the whole experiment. Grading reads the job's output
file; :func:`matrix` and :func:`summary` are what a page or an export shows.
"""

from __future__ import annotations

import json
import re
import secrets
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pydantic import BaseModel, Field

from core.config import data_paths
from core.experiments import assertions as asserts
from core.experiments.config import ExperimentError, Plan, PromptVariant, TestCase
from core.files import write_atomic
from core.jobs.folder import JobFolder
from core.jobs.submit import Started, Submission, submit
from core.plan.bounded_render import Renderer, RenderError
from core.qa.evaluate import Item, python_outcome
from core.schemas import EngineConfig, read_name
from core.store.export import write_frame

ID_PATTERN = re.compile(r"^exp_[0-9a-f]{12}$")
CUSTOM_ID = re.compile(r"^t(\d+)\.p(\d+)\.m(\d+)$")


class ExperimentState(BaseModel):
    """``state.json``: what an experiment runs and the job it runs as."""

    experiment_id: str
    created_at: str
    source: str  # the file it was made from
    plan: Plan
    job_id: str | None = None


class Grades(BaseModel):
    """``grades.json``: per line (custom_id), each assertion's and rule's outcome (None:
    not graded: a failed request, or a model-graded assertion)."""

    graded_at: str
    job_id: str
    outcomes: dict[str, list[bool | None]] = Field(default_factory=dict)


def experiments_dir(home: Path | None = None) -> Path:
    return (home or data_paths().home) / "experiments"


def folder_of(experiment_id: str, home: Path | None = None) -> Path:
    if not ID_PATTERN.match(experiment_id):
        raise ExperimentError([f"{experiment_id!r} is not an experiment id (exp_ and 12 hex)"])
    folder = experiments_dir(home) / experiment_id
    if not (folder / "state.json").is_file():
        raise ExperimentError([f"no experiment {experiment_id} in {experiments_dir(home)}"])
    return folder


def read_state(experiment_id: str, home: Path | None = None) -> ExperimentState:
    path = folder_of(experiment_id, home) / "state.json"
    return ExperimentState.model_validate_json(path.read_bytes())


def list_experiments(home: Path | None = None) -> list[ExperimentState]:
    """Every experiment in the data folder, the newest first; a folder whose state cannot
    be read is left out (the CLI names it when asked for that id)."""
    found = []
    folder = experiments_dir(home)
    for path in folder.glob("exp_*/state.json") if folder.is_dir() else []:
        try:
            found.append(ExperimentState.model_validate_json(path.read_bytes()))
        except (OSError, ValueError):
            continue
    return sorted(found, key=_made, reverse=True)


def same_file(state: ExperimentState, found: list[ExperimentState]) -> list[ExperimentState]:
    """The runs of ``state``'s file among ``found`` (the same source path and name), in
    ``found``'s order: the runs a trend is drawn from."""
    return [s for s in found if s.source == state.source and s.plan.name == state.plan.name]


# A file's state as a page's cache key holds it: replaced (write_atomic: a new inode),
# appended to (its size) or touched (its time) is another state; None: absent.
FileState = tuple[int, int, int] | None


def file_state(path: Path) -> FileState:
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_size, info.st_mtime_ns, info.st_ino


def files_version(state: ExperimentState, home: Path | None = None) -> tuple[FileState, ...]:
    """The state of every file an experiment's matrix, summary and verdicts are read from
    (``state.json``, ``grades.json``, its job's output and error files): a key that moves
    on whenever what the page shows of it would change (answers written, graded again)."""
    home = home or data_paths().home
    folder = experiments_dir(home) / state.experiment_id
    job = JobFolder(home / "jobs" / str(state.job_id))
    paths = (folder / "state.json", folder / "grades.json", job.output, job.errors)
    return tuple(file_state(path) for path in paths)


def experiments_version(home: Path | None = None) -> tuple[tuple[str, FileState], ...]:
    """Which experiments there are and the state of each ``state.json``: what
    :func:`list_experiments` reads."""
    folder = experiments_dir(home)
    found = sorted(folder.glob("exp_*/state.json")) if folder.is_dir() else []
    return tuple((path.parent.name, file_state(path)) for path in found)


def _made(state: ExperimentState) -> datetime:
    """When an experiment was made (a date that cannot be read: the oldest)."""
    try:
        made = datetime.fromisoformat(state.created_at)
    except ValueError:
        return datetime.min.replace(tzinfo=UTC)
    return made if made.tzinfo else made.replace(tzinfo=UTC)


def item_id(test: int) -> str:
    """A test's part of its lines' custom_ids (Compare pairs two variants on it)."""
    return f"t{test}"


def variant_id(prompt: int, provider: int) -> str:
    """A variant's part of its lines' custom_ids (Compare's slice of one variant)."""
    return f"p{prompt}.m{provider}"


def custom_id(test: int, prompt: int, provider: int) -> str:
    """A line's id; core.store.compare.EXPERIMENT_LINE reads its item and variant back."""
    return f"{item_id(test)}.{variant_id(prompt, provider)}"


# -- the batch file ------------------------------------------------------------------------


def _conversation(prompt: PromptVariant, test: TestCase, i: int, renderer: Renderer | None):
    """The messages of one line: the prompt's templates rendered with the test's
    variables (or the batch line's own), the system prompt put first."""
    if prompt.messages is None:
        messages = [dict(m) for m in test.messages or []]
    else:
        messages = [
            {"role": role, "content": renderer.render(f"p{i}.{k}", test.vars)}
            for k, (role, _) in enumerate(prompt.messages)
        ]
    if prompt.system:
        system = renderer.render(f"p{i}.s", test.vars) if renderer else prompt.system
        messages = [m for m in messages if m.get("role") not in ("system", "developer")]
        messages.insert(0, {"role": "system", "content": system})
    return messages


def lines(plan: Plan) -> list[dict[str, Any]]:
    """Every line of the experiment's batch: each test under each (prompt, provider).

    Raises:
        ExperimentError: a template failed on a test (naming both); nothing was written.
    """
    templates = {}
    for i, prompt in enumerate(plan.prompts):
        templates.update({f"p{i}.{k}": t for k, (_, t) in enumerate(prompt.messages or [])})
        if prompt.system:
            templates[f"p{i}.s"] = prompt.system
    out, problems = [], []
    with Renderer(templates or {"none": ""}) as renderer:
        for t, test in enumerate(plan.tests):
            for p, m in plan.cells:
                provider = plan.providers[m]
                try:
                    messages = _conversation(plan.prompts[p], test, p, renderer)
                except RenderError as exc:
                    problems.append(f"prompt {plan.prompts[p].name!r} on test {t + 1}: "
                                    f"template line {exc.line}: {exc.message}")  # fmt: skip
                    continue
                body: dict[str, Any] = {"model": provider.model, "messages": messages}
                for key in ("temperature", "max_tokens", "seed", "top_p"):
                    if getattr(provider, key) is not None:
                        body[key] = getattr(provider, key)
                out.append({"custom_id": custom_id(t, p, m), "method": "POST",
                            "url": "/v1/chat/completions", "body": body})  # fmt: skip
    if problems:
        raise ExperimentError(problems[:10])
    return out


def start(
    plan: Plan,
    source: Path,
    default_model: Path,
    home: Path | None = None,
    owner: str | None = None,
) -> tuple[ExperimentState, Started]:
    """Writes the batch, submits it as one job and keeps the experiment's files.

    Raises:
        ExperimentError: a template fails on a test.
        core.jobs.submit.Refused: the job may not run; no experiment was kept.
    """
    batch = lines(plan)
    home = home or data_paths().home
    experiment_id = f"exp_{secrets.token_hex(6)}"
    model_map = {p.model: p.folder for p in plan.providers if p.folder != str(default_model)}
    with tempfile.TemporaryDirectory(prefix="experiment-") as tmp:
        file = Path(tmp) / f"{experiment_id}.jsonl"
        file.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in batch), "utf-8")
        submission = Submission(
            engine=EngineConfig(model=str(default_model)),
            model_map=model_map,
            name=read_name(f"experiment {plan.name}"),
            source=f"{experiment_id}.jsonl",
            owner=owner,
            metadata={"experiment": experiment_id},
        )
        started = submit(file, submission, home / "jobs")
    state = ExperimentState(
        experiment_id=experiment_id,
        created_at=datetime.now(UTC).isoformat(timespec="milliseconds"),
        source=str(Path(source).resolve()),
        plan=plan,
        job_id=started.job.job_id,
    )
    folder = experiments_dir(home) / experiment_id
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / "experiment.yaml", Path(source).read_bytes())
    write_atomic(folder / "state.json", state.model_dump_json(indent=1))
    return state, started


def requests_of(job: JobFolder, custom_ids: list[str]) -> dict[str, list[dict[str, Any]]]:
    """The messages each of ``custom_ids`` sent, from the job's input file (what ran);
    a line that cannot be read, or has no messages, is left out."""
    wanted = {f'"{cid}"' for cid in custom_ids}  # only a line that names one is parsed
    found: dict[str, list[dict[str, Any]]] = {}
    if not job.input.is_file():
        return found
    with job.input.open(encoding="utf-8", errors="replace") as lines_in:
        for raw in lines_in:
            if not any(quoted in raw for quoted in wanted):
                continue
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            body = line.get("body") if isinstance(line, dict) else None
            messages = body.get("messages") if isinstance(body, dict) else None
            if isinstance(messages, list) and line.get("custom_id") in custom_ids:
                found[line["custom_id"]] = messages
    return found


# -- grading -------------------------------------------------------------------------------


def outputs(job: JobFolder) -> dict[str, dict[str, Any]]:
    """Each line's answer from the job's result files: ``output`` (None where the
    request failed), ``error``, tokens, latency, the model that answered and whether the
    answer was reused (given again from an earlier job, not computed)."""
    found: dict[str, dict[str, Any]] = {}
    for path, failed in ((job.errors, True), (job.output, False)):  # a success wins
        if not path.is_file():
            continue
        for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            body = ((line.get("response") or {}).get("body")) or {}
            choice = (body.get("choices") or [{}])[0]
            usage = body.get("usage") or {}
            error = line.get("error") or {}
            found[str(line.get("custom_id"))] = {
                "output": None if failed else (choice.get("message") or {}).get("content") or "",
                "finish_reason": choice.get("finish_reason"),
                "error": error.get("message") if isinstance(error, dict) else str(error),
                "prompt_tokens": usage.get("prompt_tokens"),
                "completion_tokens": usage.get("completion_tokens"),
                "latency_ms": line.get("latency_ms"),
                "model": body.get("model"),
                "reused": bool(line.get("reused_from")),
            }
    return found


def check_names(plan: Plan, test: TestCase) -> list[str]:
    """The columns of one test's checks: its assertions, then the rules."""
    names: list[str] = []
    for a in test.asserts:
        name, n = a.column, 2
        while name in names:
            name, n = f"{a.column} ({n})", n + 1
        names.append(name)
    return names + (plan.rules.names if plan.rules else [])


def grade(state: ExperimentState, home: Path | None = None) -> Grades:
    """Grades every answer of the experiment's job and keeps the grades."""
    home = home or data_paths().home
    job = JobFolder(home / "jobs" / str(state.job_id))
    answers = outputs(job)
    plan = state.plan
    grades = Grades(graded_at=datetime.now(UTC).isoformat(timespec="seconds"), job_id=job.job_id)
    for cid, answer in answers.items():
        match = CUSTOM_ID.match(cid)
        if match is None:
            continue
        test = plan.tests[int(match.group(1))]
        text = answer["output"]
        if text is None:
            grades.outcomes[cid] = [None] * (
                len(test.asserts) + len(plan.rules.rules if plan.rules else [])
            )
            continue
        row = [asserts.grade(a.type, text, a.value, a.threshold) for a in test.asserts]
        item = Item(answer=text, finish_reason=answer["finish_reason"],
                    completion_tokens=answer["completion_tokens"], metadata=test.vars)  # fmt: skip
        row += [python_outcome(r, item) for r in (plan.rules.rules if plan.rules else [])]
        grades.outcomes[cid] = row
    folder = experiments_dir(home) / state.experiment_id
    write_atomic(folder / "grades.json", grades.model_dump_json())
    return grades


def read_grades(experiment_id: str, home: Path | None = None) -> Grades | None:
    """The kept grades; None when never graded or the file cannot be read (grades are
    made again from the answers, so nothing a person did is lost)."""
    path = folder_of(experiment_id, home) / "grades.json"
    try:
        return Grades.model_validate_json(path.read_bytes()) if path.is_file() else None
    except (OSError, ValueError):
        return None


def grades_stale(state: ExperimentState, finished_at: str | None, home: Path | None = None) -> bool:
    """Whether the answers need grading: never graded, or graded before the job's last
    run ended (a resume or a retry wrote answers since)."""
    grades = read_grades(state.experiment_id, home)
    if grades is None or grades.job_id != state.job_id:
        return True
    if not finished_at or not grades.graded_at:
        return False
    ended = datetime.fromisoformat(finished_at).replace(microsecond=0)  # graded_at's precision
    return datetime.fromisoformat(grades.graded_at) < ended


# -- the matrix ----------------------------------------------------------------------------


# The page's columns, each with a leading _ (a check may be named "error" or "model").
DETAILS = ("_item", "_variant", "_error", "_model", "_reused", "_prompt_tokens",
           "_completion_tokens", "_latency_ms")  # fmt: skip


def matrix(experiment_id: str, home: Path | None = None, details: bool = False) -> pd.DataFrame:
    """One row per test x prompt x provider: ``test``, ``prompt``, ``provider``, each
    variable, ``output``, ``pass`` (every graded check held; None before grading or for a
    failed request), and one column per check (True / False / None). ``details`` adds
    :data:`DETAILS` (``_item``: the test's index, ``_variant``: the cell's index in the
    plan's cells) for the page's summary and views."""
    home = home or data_paths().home
    state = read_state(experiment_id, home)
    grades = read_grades(experiment_id, home) or Grades(graded_at="", job_id="")
    plan = state.plan
    answers = outputs(JobFolder(home / "jobs" / str(state.job_id)))
    variables = plan.variables()
    rows = []
    for t, test in enumerate(plan.tests):
        names = check_names(plan, test)
        for v, (p, m) in enumerate(plan.cells):
            cid = custom_id(t, p, m)
            answer = answers.get(cid, {})
            outcomes = grades.outcomes.get(cid)
            graded = [o for o in outcomes or [] if o is not None]
            row: dict[str, Any] = {
                "test": test.description or str(t + 1),
                "prompt": plan.prompts[p].name,
                "provider": plan.providers[m].name,
                **{f"var {v}" if v in ("test", "prompt", "provider", "output", "pass") else v:
                   test.vars.get(v) for v in variables},
                "output": answer.get("output"),
                "pass": all(graded) if outcomes and answer.get("output") is not None else None,
            }  # fmt: skip
            for k, name in enumerate(names):
                row[name] = outcomes[k] if outcomes else None
            if details:
                row.update({"_item": t, "_variant": v})
                row.update({key: answer.get(key[1:]) for key in DETAILS[2:]})
            rows.append(row)
    return pd.DataFrame(rows)


def _csv_cell(value: Any) -> Any:
    """A matrix cell as the CSV holds it: true / false, "" for none (text is made inert
    by the export's rule)."""
    if isinstance(value, bool | np.bool_):
        return "true" if value else "false"
    if value is None or (isinstance(value, float) and value != value):  # None, NaN
        return ""
    return value


def _typed(column: pd.Series) -> pd.Series:
    """A column of one kind for Parquet: a variable that is a number in one test and a
    text in another is written as text."""
    kinds = {type(v) for v in column if v is not None and v == v}
    if len(kinds) > 1 or kinds & {dict, list}:
        return column.map(lambda v: None if v is None or v != v else str(v))
    return column


def export(experiment_id: str, path: Path, home: Path | None = None, fmt: str = "csv") -> int:
    """Writes the matrix as CSV, Parquet or XLSX by the rules of every export (text made
    inert for spreadsheets: :func:`core.store.export.write_frame`); returns the rows.

    Raises:
        core.store.export.ExportError: an unknown format, or too many rows for Excel.
    """
    frame = matrix(experiment_id, home)
    for column in frame.columns:
        frame[column] = frame[column].map(_csv_cell) if fmt == "csv" else _typed(frame[column])
    return write_frame(frame, path, fmt)
