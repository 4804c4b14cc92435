"""Folding checked lines into a :class:`CheckReport`: distributions, totals, prompt tokens
counted with the model's tokenizer, and lines that do not fit its context."""

from __future__ import annotations

import bisect
from array import array
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from core.check.digests import RequestDigests, deterministic, fast_chat_digest, request_digest
from core.check.engine_requests import ChatRequest, GeneratedRequest, PooledRequest
from core.check.fast_path import fast_chat_settings
from core.check.line import readable_fields
from core.check.model_fit import AutoRule, NameRule, TokenCheck, fit_batch
from core.check.report import (
    CONTEXT_EXCEEDED,
    DUPLICATE_ID,
    EMPTY_FILE,
    HISTOGRAM_EDGES,
    LISTED_LINES,
    UNREADABLE,
    CheckedLine,
    CheckReport,
    Problem,
)
from core.check.sampling import copied_answers
from core.check.scanner import Batch
from core.check.sensitive import SENSITIVE_DATA, SensitiveFindings
from core.endpoints import CHAT_URL, POOLING_URLS
from core.schemas import JobDefaults


class Summary:
    """Folds checked lines into a :class:`CheckReport`, a batch at a time."""

    def __init__(
        self,
        report: CheckReport,
        defaults: JobDefaults,
        tokens: TokenCheck | None,
        valid_out: BinaryIO | None,
        auto: AutoRule | None = None,
        sensitive: SensitiveFindings | None = None,
        names: NameRule | None = None,
    ) -> None:
        self.report = report
        self.names = names  # lines whose body.model names a mapped model that cannot run
        self.defaults = defaults
        self.tokens = tokens
        self.auto = auto  # judges "auto" tool lines where no tokens are counted
        self.valid_out = valid_out
        self.default_lines: list[int] = []
        # (valid, url, model, roles, max_tokens, n, temperature, top_p, defaulted) -> lines:
        # one counter update per line; the distributions are unfolded from it at the end.
        self.shapes: Counter = Counter()
        self.digests = RequestDigests()  # of the valid deterministic lines (the forecast's)
        self.sensitive = sensitive  # None: not scanned (the policy is allow)
        report.sensitive = sensitive

    @staticmethod
    def _context_problem(
        line_no: int, cid: str | None, max_out: int, prompt: int, context: int | None
    ) -> Problem | None:
        if context is None:
            return None
        if prompt >= context:
            return Problem(
                line_no,
                "error",
                f"the prompt has {prompt:,} tokens; the model's context is {context:,}: shorten "
                f"it by at least {prompt - context + 1:,} tokens",
                cid,
                CONTEXT_EXCEEDED,
                "body.messages",
            )
        if prompt + max_out > context:
            over = prompt + max_out - context
            return Problem(
                line_no,
                "warning",
                f"prompt {prompt:,} + max output {max_out:,} tokens exceeds the context of "
                f"{context:,} by {over:,}; the answer stops after {context - prompt:,} tokens "
                f"(set max_tokens to {context - prompt} or shorten the prompt)",
                cid,
                CONTEXT_EXCEEDED,
                "body.max_tokens",
            )
        return None

    def _problem(self, problem: Problem) -> None:
        report = self.report
        if problem.severity == "warning":
            report.warnings += 1
        elif problem.code == DUPLICATE_ID:
            report.duplicates += 1
        report.add(problem)

    def add_batch(self, batch: Batch) -> None:
        report = self.report
        if self.tokens is not None:
            counts = fit_batch(self.tokens, batch)
        else:
            counts = self.auto.problems(batch) if self.auto is not None else None
        named = self.names.problems(batch) if self.names is not None else None
        shapes = self.shapes
        defaults = self.defaults
        if self.sensitive is not None:  # every line, valid or not: its prompt is in the file
            self.sensitive.add_lines(batch.line_nos, batch.raws)
        for index, item in enumerate(batch.items):
            if item is None:  # counted by the scanner: valid, nothing more to fold in
                if self.valid_out is not None:
                    self.valid_out.write(batch.raws[index].rstrip(b"\r\n") + b"\n")
                continue
            line_no, raw, roles = batch.line_nos[index], batch.raws[index], batch.roles[index]
            counted = counts.get(index) if counts else None
            refused = warned = None
            if type(counted) is Problem:
                refused, counted = counted, None
            if named and (found := named.get(index)) is not None:
                if found.severity == "error":  # its model cannot run: nothing else matters
                    refused, counted = found, None
                else:
                    warned = found
            if roles is not None:  # the common chat line: no problems so far
                body = item.body
                max_tokens, temperature, top_p, defaulted = fast_chat_settings(body, defaults)
                n = body.n or 1
                valid = True
                if warned is not None:
                    self._problem(warned)
                if refused is not None:
                    report.over_context += refused.code == CONTEXT_EXCEEDED
                    self._problem(refused)
                    valid = False
                elif counted is not None:
                    problem = self._context_problem(line_no, item.custom_id, max_tokens, *counted)
                    if problem is not None:
                        report.over_context += 1
                        self._problem(problem)
                        valid = problem.severity != "error"
                key = (valid, CHAT_URL, body.model, roles, max_tokens, n, temperature, top_p)
                shapes[(*key, defaulted)] += 1
                if not valid:
                    continue
                model, copied = body.model, copied_answers(n, temperature)
                if temperature == 0 or body.seed is not None:
                    line_digest = fast_chat_digest(
                        body.messages, max_tokens, temperature, top_p, body.seed, body.n
                    )
                    self.digests.add(model, False, line_digest)
            else:
                request = item.request
                if isinstance(request, GeneratedRequest):
                    sampling = request.sampling
                    max_tokens, n = request.max_tokens, sampling.get("n", 1)
                    temperature, top_p = sampling.get("temperature"), sampling.get("top_p")
                else:  # vectors or scores (or no request): no answer, no sampling
                    max_tokens, n, temperature, top_p = 0, 1, None, None
                if warned is not None:
                    item.problems.append(warned)
                if refused is not None:
                    report.over_context += refused.code == CONTEXT_EXCEEDED
                    item.problems.append(refused)
                elif counted is not None:
                    problem = self._context_problem(line_no, item.custom_id, max_tokens, *counted)
                    if problem is not None:
                        report.over_context += 1
                        item.problems.append(problem)
                for problem in item.problems:
                    self._problem(problem)
                if request is None:  # invalid: counted by what it still says, nothing runs
                    url, model, roles = readable_fields(raw)
                    shapes[(False, url, model, roles, 0, 1, None, None, ())] += 1
                    continue
                valid = item.valid
                defaulted = request.defaulted
                roles = (
                    tuple([m["role"] for m in request.messages])
                    if isinstance(request, ChatRequest)
                    else ()
                )
                key = (valid, request.url, request.model, roles, max_tokens, n, temperature, top_p)
                shapes[(*key, defaulted)] += 1
                if not valid:
                    continue
                model, copied = request.model, copied_answers(n, temperature)
                if deterministic(request):
                    pooled = isinstance(request, PooledRequest)
                    self.digests.add(model, pooled, request_digest(request))
            if defaulted and len(self.default_lines) < LISTED_LINES and "max_tokens" in defaulted:
                self.default_lines.append(line_no)
            if self.valid_out is not None:
                self.valid_out.write(raw.rstrip(b"\r\n") + b"\n")
            if self.tokens is not None:
                embedding = type(item) is CheckedLine and isinstance(item.request, PooledRequest)
                folder = self.tokens.folder_for(model, embedding)
                self._add_local(folder, embedding, max_tokens, n, copied, counted)
        report.lines += len(batch)

    def _add_local(
        self,
        folder: str,
        embedding: bool,
        max_tokens: int,
        n: int,
        copied: int,
        counted: tuple[int, int | None] | None,
    ) -> None:
        """Adds a valid line to its local model's totals and the token histogram; ``limits``
        counts answers per ``max_tokens``, which the estimate scales answer lengths by (an
        embeddings line has none: ``embedding`` says the model makes vectors), and
        ``copied`` those of them that are copies of another (no engine time)."""
        report = self.report
        local = report.by_local_model.get(folder)
        if local is None:
            local = report.by_local_model[folder] = {
                "folder": folder,
                "name": Path(folder).name,
                "embedding": embedding,
                "lines": 0,
                "prompt_tokens": 0,
                "max_output_tokens": 0,
                "limits": {},
                "copied": {},
            }
        local["lines"] += 1
        local["max_output_tokens"] += max_tokens * n
        if max_tokens:
            for name, answers in (("limits", n), ("copied", copied)):
                if answers:
                    counts = local[name]
                    counts[str(max_tokens)] = counts.get(str(max_tokens), 0) + answers
        if counted is not None:
            prompt = counted[0]
            local["prompt_tokens"] += prompt
            report.prompt_tokens += prompt
            report.prompt_tokens_max = max(report.prompt_tokens_max, prompt)
            report.token_histogram[bisect.bisect_right(HISTOGRAM_EDGES, prompt)] += 1

    def _unfold_shapes(self) -> None:
        report = self.report
        effective = {name: Counter() for name in ("max_tokens", "temperature", "top_p")}
        valid_lines = 0
        for shape, lines in self.shapes.items():
            valid, url, model, roles, max_tokens, n, temperature, top_p, defaulted = shape
            # Every line is counted: the url table's lines that run, and invalid ones apart
            # ("" where a line names no url or model it could be read from).
            (report.urls if valid else report.invalid_urls)[url] += lines
            report.models[model or ""] += lines
            for role in roles:
                report.roles[role] += lines
            if not valid:
                continue
            valid_lines += lines
            if url in POOLING_URLS:  # no sampling: vectors (and scores), not text
                continue
            report.max_output_tokens += max_tokens * n * lines
            values = {"max_tokens": max_tokens, "temperature": temperature, "top_p": top_p}
            for name, value in values.items():
                source = "job default" if name in defaulted else "body"
                effective[name][f"{value} ({source})"] += lines
            if "max_tokens" in defaulted:
                report.default_max_lines += lines
        report.effective = effective
        report.valid = valid_lines
        report.invalid = report.lines - valid_lines

    def merge(self, part: Part) -> None:
        """Folds in the summary of a later part of the file, checked by a helper process."""
        report, other = self.report, part.report
        for name in SUMMED_FIELDS:
            setattr(report, name, getattr(report, name) + getattr(other, name))
        report.prompt_tokens_max = max(report.prompt_tokens_max, other.prompt_tokens_max)
        report.token_histogram = [
            a + b for a, b in zip(report.token_histogram, other.token_histogram, strict=True)
        ]
        for problem in other.problems:
            report.add(problem)
        for folder, theirs in other.by_local_model.items():
            zero = dict.fromkeys(("lines", "prompt_tokens", "max_output_tokens"), 0)
            empty = {"limits": {}, "copied": {}}
            ours = report.by_local_model.setdefault(folder, {**theirs, **zero, **empty})
            for name in ("lines", "prompt_tokens", "max_output_tokens"):
                ours[name] += theirs[name]
            for name in empty:
                for limit, answers in theirs[name].items():
                    ours[name][limit] = ours[name].get(limit, 0) + answers
        self.shapes.update(part.shapes)
        self.default_lines += part.default_lines
        self.digests.merge(part.digests)
        if self.sensitive is not None and part.report.sensitive is not None:
            self.sensitive.merge(part.report.sensitive)
        if self.tokens is not None:
            self.tokens.failed.update(part.token_failed)

    def finish(self, bom: bool, crlf: bool) -> None:
        """Adds the file-level notes and unfolds the distributions (call once, at the end)."""
        report = self.report
        # Names only embeddings (score, rerank) lines use run on the embedding model.
        uses = {(shape[2] or "", shape[1] in POOLING_URLS) for shape in self.shapes}
        embedding_names = {name for name, embeds in uses if embeds and (name, False) not in uses}
        self._unfold_shapes()
        report.digests = self.digests
        notes = []
        if bom:
            notes.append("the file starts with a UTF-8 byte order mark (BOM); it is ignored")
        if crlf:
            notes.append("the file has Windows line endings (CRLF); they are accepted")
        if report.default_max_lines:
            first = sorted(self.default_lines)[:LISTED_LINES]
            listed = ", ".join(str(n) for n in first)
            more = " ..." if report.default_max_lines > len(first) else ""
            lines_set = (
                "1 line sets"
                if report.default_max_lines == 1
                else (f"{report.default_max_lines:,} lines set")
            )
            notes.append(
                f"{lines_set} no max output tokens; the job default "
                f"max_tokens={report.defaults.get('max_tokens')} applies (lines {listed}{more})"
            )
        if self.tokens is not None:
            for folder, reason in self.tokens.failed.items():
                report.token_notes.append(f"prompt tokens not counted for {folder}: {reason}")
            report.tokens_counted = bool(self.tokens.counters)
            report.model_map = {
                name: self.tokens.folder_for(name, name in embedding_names)
                for name in report.models
                if name != UNREADABLE  # no model to map
            }
            for folder, local in report.by_local_model.items():
                counter = self.tokens.counter(folder)  # loaded here if only a helper used it
                local["context_length"] = counter.context_length if counter else None
        for note in notes + report.token_notes:
            report.problems.insert(0, Problem(0, "note", note))
        found = self.sensitive
        if found is not None and found.flagged_lines and found.policy == "refuse":
            # First, and kept beyond the listed problems' cap: the file is refused by it.
            report.problems.insert(0, Problem(0, "error", found.refusal(), code=SENSITIVE_DATA))
        if report.lines == 0 and not report.cancelled:
            message = "the file has no request lines (it is empty or blank)"
            report.add(Problem(0, "error", message, code=EMPTY_FILE))


# Report counters a part of the file adds to the whole.
SUMMED_FIELDS = (
    "lines",
    "warnings",
    "duplicates",
    "over_context",
    "prompt_tokens",
    "problems_dropped",
)


@dataclass
class Part:
    """What a helper process found in its byte range of the file (see :func:`check_file`)."""

    report: CheckReport
    shapes: Counter
    default_lines: list[int]
    crlf: bool
    token_failed: dict[str, str]
    ids: bytes  # the range's ids, as a msgpack list
    id_lines: array  # each id's first line in the range
    digests: RequestDigests  # of the range's valid deterministic lines
