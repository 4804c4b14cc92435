"""Does each line fit the model it runs on: prompt tokens counted with that model's
tokenizer (and chat template), inputs within an embedding model's limit, token ids within
its vocabulary, a model of the kind the line needs (chat or embedding), and, for
``tool_choice`` ``"auto"``, a model that can decide itself to call a tool
(:func:`core.check.tool_support.auto_support`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.check.engine_requests import (
    ChatRequest,
    CompletionRequest,
    EmbeddingRequest,
    ScoreRequest,
)
from core.check.fast_path import FastChatLine
from core.check.report import CONTEXT_EXCEEDED, CheckedLine, Problem
from core.check.scanner import Batch
from core.check.tool_support import auto_support, render_with_tools
from core.check.tools import AUTO
from core.config import default_embedding_model_dir
from core.model_folders import is_cross_encoder, is_pooling_model


def resolve_model(name: str | None, model_map: dict[str, str], default_folder: str) -> str:
    """The local model folder a body's ``model`` runs on (unmapped names: the default)."""
    return model_map.get(name or "", default_folder) or default_folder


@dataclass
class TokenCheck:
    """Token counting for the lines of one check, one counter per local model folder.

    Chat, completions and responses lines run on ``default_folder`` unless their ``model``
    is mapped; embeddings lines on ``embedding_folder`` (the built-in embedding model
    unless set) unless theirs is.
    """

    default_folder: str
    model_map: dict[str, str]
    embedding_folder: str | None = None
    counters: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)

    def folder_for(self, name: str | None, embedding: bool) -> str:
        """The folder a line of this kind naming ``name`` runs on."""
        default = self.default_folder
        if embedding:
            default = self.embedding_folder or str(default_embedding_model_dir())
        return resolve_model(name, self.model_map, default)

    def counter(self, folder: str) -> Any:
        from core.check.tokens import TokenizerError, load_counter, load_input_counter

        if folder in self.counters or folder in self.failed:
            return self.counters.get(folder)
        try:
            embedding = is_pooling_model(folder)
            counter = (load_input_counter if embedding else load_counter)(folder)
        except TokenizerError as exc:
            self.failed[folder] = str(exc)
            return None
        counter.start_file()
        self.counters[folder] = counter
        return counter


def _prompt_of(item: FastChatLine | CheckedLine) -> tuple[str | None, Any, Any, bool] | None:
    """``(model, messages, prompt, embedding)`` of a line that has a request, for token
    counting; an embeddings line's "prompt" is its list of inputs."""
    if type(item) is not CheckedLine:
        body = item.body
        messages = [{"role": m.role, "content": m.content} for m in body.messages]
        return body.model, messages, None, False
    request = item.request
    match request:
        case None:
            return None
        case ChatRequest():
            return request.model, request.messages, None, False
        case CompletionRequest():
            return request.model, [], request.prompt, False
        case _:  # embeddings, score, rerank: texts, each read alone (or paired)
            return request.model, None, request.inputs, True


def fit_batch(tokens: TokenCheck, batch: Batch) -> dict[int, tuple[int, int | None] | Problem]:
    """Prompt tokens and context length per batch position, or the line's problem with
    the model it runs on (the template's refusal, a token id or input the model lacks)."""
    from core.check.tokens import TokenizerError

    by_folder: dict[tuple[str, bool], list[tuple[int, Any, Any]]] = {}
    counts: dict[int, tuple[int, int | None] | Problem] = {}
    for index, item in enumerate(batch.items):
        prompt = _prompt_of(item)
        if prompt is not None:
            folder = tokens.folder_for(prompt[0], prompt[3])
            if type(item) is CheckedLine and _is_auto(item.request):
                prompt = _auto_prompt(batch, index, folder, counts)
                if prompt is None:
                    continue
            by_folder.setdefault((folder, prompt[3]), []).append((index, *prompt[1:3]))
    for (folder, embedding), entries in by_folder.items():
        counter = tokens.counter(folder)
        if counter is None:
            continue
        if counter.embeds != embedding:
            _wrong_kind(batch, entries, folder, embedding, counts)
            continue
        if is_cross_encoder(folder):
            _count_pairs(batch, entries, counter, counts)
            continue
        if embedding:
            _count_inputs(batch, entries, counter, counts)
            continue
        entries = _known_tokens(batch, entries, counter.vocab_size, counts)
        context = counter.context_length
        if context is not None:  # a prompt far beyond the context is not worth encoding
            # A line holds at least as many bytes as its prompt has characters.
            longest = (context + 1) * counter.max_token_chars
            kept = []
            for entry in entries:
                if len(batch.raws[entry[0]]) < longest:
                    kept.append(entry)
                    continue
                bound = counter.lower_bound(entry[1], entry[2])
                if bound > context:
                    index = entry[0]
                    counts[index] = Problem(
                        batch.line_nos[index],
                        "error",
                        f"the prompt has at least {bound:,} tokens; the model's context is "
                        f"{context:,}: shorten it",
                        batch.items[index].custom_id,
                        CONTEXT_EXCEEDED,
                        "body.messages",
                    )
                else:
                    kept.append(entry)
            entries = kept
        pairs = [(messages, prompt) for _, messages, prompt in entries]
        try:
            numbers = counter.count_prompts(pairs)
        except TokenizerError:  # a conversation the template refuses: count one by one
            numbers = [_count_one(counter, pair) for pair in pairs]
        for (index, _, _), number in zip(entries, numbers, strict=True):
            if isinstance(number, str):
                cid = batch.items[index].custom_id
                counts[index] = Problem(batch.line_nos[index], "error", number, cid)
            else:
                counts[index] = (number, counter.context_length)
    return counts


def _is_auto(request: object) -> bool:
    """A chat request whose model decides itself whether to call a tool."""
    return isinstance(request, ChatRequest) and request.tool_choice == AUTO


def _auto_prompt(batch: Batch, index: int, folder: str, counts: dict[int, Any]) -> tuple | None:
    """An ``auto`` line's prompt with its tools rendered, to count; None (and the line's
    problem in ``counts``) where the model cannot decide itself to call a tool."""
    request = batch.items[index].request
    support = auto_support(folder)
    if support.reason is None:
        try:
            text = render_with_tools(folder, request.messages, request.tools or [])
            return request.model, None, text, False
        except ValueError as exc:  # TokenizerError: the template refused this conversation
            support = type(support)(reason=str(exc))
    counts[index] = _auto_problem(batch, index, "error", f"body.tool_choice: {support.reason}")
    return None


def _auto_problem(batch: Batch, index: int, severity: str, message: str) -> Problem:
    cid = batch.items[index].custom_id
    return Problem(batch.line_nos[index], severity, message, cid, param="body.tool_choice")


AUTO_UNCHECKED = (
    "body.tool_choice 'auto' was not checked: whether the model can decide itself to call "
    "a tool depends on its chat template, and this check had no model; check the file with "
    "the model it runs on (core check --model DIR) before running it"
)


@dataclass
class AutoRule:
    """The ``auto`` rule alone, for a check that counts no tokens (``core check
    --no-tokens``, Upload & check without counting): an ``auto`` line whose model is known
    and cannot decide a call is refused with the reason the counting check gives; where no
    model is known, a warning says that ``auto`` was not checked. Only the chat template
    is read (once per folder), never a tokenizer."""

    default_folder: str | None
    model_map: dict[str, str]

    def problems(self, batch: Batch) -> dict[int, Problem]:
        """Each ``auto`` line's problem, by batch position."""
        found: dict[int, Problem] = {}
        for index, item in enumerate(batch.items):
            if type(item) is not CheckedLine or not _is_auto(item.request):
                continue
            folder = self.model_map.get(item.request.model or "") or self.default_folder
            if folder is None:
                found[index] = _auto_problem(batch, index, "warning", AUTO_UNCHECKED)
            elif (reason := auto_support(folder).reason) is not None:
                found[index] = _auto_problem(batch, index, "error", f"body.tool_choice: {reason}")
        return found


# The codes of a line whose body.model names a mapped model that cannot run, and of an
# adapter's line on a base other than the job's model.
MODEL_UNUSABLE = "model_unusable"
OTHER_BASE = "adapter_on_another_base"


@dataclass
class NameRule:
    """The mapped names (:func:`core.model_names.line_models`) as line problems: a line
    whose ``body.model`` runs on a folder that is gone, no model or adapter, or an adapter
    that cannot run on its base is refused with why and what to do; one of an adapter on
    a base other than the job's model gets a warning (it runs, on that base's engine)."""

    refused: dict[str, str]
    other_base: dict[str, str]

    def problems(self, batch: Batch) -> dict[int, Problem]:
        """Each such line's problem, by batch position."""
        found: dict[int, Problem] = {}
        if not self.refused and not self.other_base:
            return found
        for index, item in enumerate(batch.items):
            if item is None:
                continue
            if type(item) is CheckedLine:
                if item.request is None:
                    continue
                model = item.request.model
            else:
                model = item.body.model
            line, cid = batch.line_nos[index], item.custom_id
            if (message := self.refused.get(model or "")) is not None:
                found[index] = Problem(line, "error", message, cid, MODEL_UNUSABLE, "body.model")
            elif (message := self.other_base.get(model or "")) is not None:
                found[index] = Problem(line, "warning", message, cid, OTHER_BASE, "body.model")
        return found


NO_VECTORS = (
    "body.model runs on {name}, a cross-encoder: it scores pairs of texts and makes no "
    "vectors; map body.model to an embedding model"
)


def _count_pairs(batch: Batch, entries: list, counter: Any, counts: dict[int, Any]) -> None:
    """A score or rerank line on a cross-encoder: the tokens of its pairs (each query read
    with its document, as vLLM tokenizes a pair), or the first pair too long for the model
    (the engine refuses it rather than cut it). An embeddings line there is refused."""
    limit, name = counter.context_length, Path(counter.folder).name
    for index, _, inputs in entries:
        request = batch.items[index].request
        line, cid = batch.line_nos[index], batch.items[index].custom_id
        if not isinstance(request, ScoreRequest):  # an embeddings line
            message = NO_VECTORS.format(name=name)
            counts[index] = Problem(line, "error", message, cid, param="body.model")
            continue
        queries, documents = inputs[: request.queries], inputs[request.queries :]
        if len(queries) == 1:  # one query with each document
            queries = queries * len(documents)
        numbers = counter.count_pairs(list(zip(queries, documents, strict=True)))
        over = next((i for i, n in enumerate(numbers) if limit and n > limit), None)
        if over is None:
            counts[index] = (sum(numbers), None)
            continue
        where = request.input_field(request.queries + over)
        counts[index] = Problem(
            line,
            "error",
            f"{where} and its query make a pair of {numbers[over]:,} tokens; {name} reads "
            f"at most {limit:,} per pair (query and document together): shorten them",
            cid,
            CONTEXT_EXCEEDED,
            where.split("[")[0],
        )


def _wrong_kind(
    batch: Batch, entries: list, folder: str, embedding: bool, counts: dict[int, Any]
) -> None:
    """Each line whose ``model`` maps to a model of the other kind: the engine could not
    run it (a chat model makes no vectors; an embedding model writes no text)."""
    kind, needs = ("a chat", "an embedding") if embedding else ("an embedding", "a chat")
    for index, *_ in entries:
        counts[index] = Problem(
            batch.line_nos[index],
            "error",
            f"body.model runs on {Path(folder).name}, {kind} model; this line needs "
            f"{needs} model: map its model name to one",
            batch.items[index].custom_id,
            param="body.model",
        )


def _count_inputs(batch: Batch, entries: list, counter: Any, counts: dict[int, Any]) -> None:
    """An embeddings line's tokens (all its inputs), or the first input too long for the
    model: the engine refuses an input over its limit rather than cut it."""
    limit, size = counter.context_length, counter.dimensions
    for index, _, inputs in entries:
        request = batch.items[index].request
        asked = request.dimensions if isinstance(request, EmbeddingRequest) else None
        if asked is not None and size is not None and asked != size:
            counts[index] = Problem(
                batch.line_nos[index],
                "error",
                f"body.dimensions is {asked}; {counter.name} makes vectors of {size} "
                "and cannot shorten them: leave dimensions out",
                batch.items[index].custom_id,
                param="body.dimensions",
            )
            continue
        numbers = counter.count_inputs(inputs)
        over = next((i for i, n in enumerate(numbers) if limit and n > limit), None)
        if over is None:
            counts[index] = (sum(numbers), None)
            continue
        where = request.input_field(over)
        counts[index] = Problem(
            batch.line_nos[index],
            "error",
            f"{where} has {numbers[over]:,} tokens; {Path(counter.folder).name} "
            f"takes at most {limit:,} per input: shorten it or split it",
            batch.items[index].custom_id,
            CONTEXT_EXCEEDED,
            where.split("[")[0],
        )


def _known_tokens(batch: Batch, entries: list, vocab: int | None, counts: dict[int, Any]) -> list:
    """The entries whose ``logit_bias`` names only ids the model has; each other one
    gets its problem in ``counts`` (the engine would refuse it)."""
    kept = []
    for entry in entries:
        item = batch.items[entry[0]]
        bias = item.request.sampling.get("logit_bias") if type(item) is CheckedLine else None
        unknown = sorted(t for t in bias or () if vocab is not None and t >= vocab)
        if unknown:
            counts[entry[0]] = Problem(
                batch.line_nos[entry[0]],
                "error",
                f"body.logit_bias names token id {unknown[0]}; the model's ids run from 0 "
                f"to {vocab - 1}",
                item.custom_id,
                param="body.logit_bias",
            )
        else:
            kept.append(entry)
    return kept


def _count_one(counter: Any, pair: tuple) -> int | str:
    """One prompt's count, or the reason the chat template refused it."""
    from core.check.tokens import TokenizerError

    try:
        return counter.count_prompts([pair])[0]
    except TokenizerError as exc:
        return str(exc)
