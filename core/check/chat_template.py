"""A model folder's chat template and context length, read without vLLM or transformers.

:class:`ChatRenderer` renders a conversation as the engine will (generation prompt
included), by plain string joins when the template is ChatML and with Jinja otherwise, in
the environment transformers compiles chat templates in (:func:`template_environment`).
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from core.files import read_json

CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
)
# The named special tokens transformers passes to a template (``special_tokens_map``).
SPECIAL_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
PROBES: list[list[dict[str, str]]] = [
    [{"role": "user", "content": "Hi there"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}],
    [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": " x "},
        {"role": "user", "content": "ok"},
    ],
    [{"role": "developer", "content": "D"}, {"role": "user", "content": "u"}],
]


class TokenizerError(ValueError):
    """The folder has no tokenizer or chat template that can be used; the message says why."""


def context_length(folder: Path) -> int | None:
    """The model's context length from its ``config.json`` (None when not stated)."""
    return _config_int(folder, CONTEXT_KEYS)


def vocab_size(folder: Path) -> int | None:
    """How many token ids the model has (``config.json``'s ``vocab_size``, as vLLM reads it;
    it may exceed the tokenizer's own vocabulary where the embedding table is padded)."""
    return _config_int(folder, ("vocab_size",))


def _config_int(folder: Path, keys: tuple[str, ...]) -> int | None:
    """The first positive integer under ``keys`` in ``config.json`` or its ``text_config``."""
    config = read_json(folder / "config.json")
    if not isinstance(config, dict):
        return None
    for source in (config, config.get("text_config") or {}):
        for key in keys:
            if isinstance(source.get(key), int) and source[key] > 0:
                return source[key]
    return None


def template_source(folder: Path) -> tuple[str | None, dict[str, Any]]:
    """The chat template text (or None) and the tokenizer config."""
    config = read_json(folder / "tokenizer_config.json", {})
    if not isinstance(config, dict):
        config = {}
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8"), config
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: take the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return (template if isinstance(template, str) else None), config


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson``: Jinja's own escapes HTML, and takes fewer options."""
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(format: str) -> str:
    return datetime.now().strftime(format)


def _raise_exception(message: str) -> None:
    raise TokenizerError(f"the chat template refused the conversation: {message}")


@lru_cache(maxsize=1)
def template_environment() -> Any:
    """The Jinja environment transformers' ``apply_chat_template`` compiles a chat template
    in (``transformers.utils.chat_template_utils``), which vLLM renders with: sandboxed,
    ``trim_blocks`` and ``lstrip_blocks``, the loop controls (``{% break %}``,
    ``{% continue %}``), ``{% generation %}`` blocks, ``raise_exception``,
    ``strftime_now`` and its ``tojson``. Built here, not imported: importing transformers
    costs seconds of CPU, this a few milliseconds."""
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_generation_block(), jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _generation_block() -> type:
    """``{% generation %}...{% endgeneration %}`` as transformers reads it when it does not
    track assistant tokens: the block's text, as is."""
    import jinja2.nodes
    from jinja2.ext import Extension

    class GenerationBlock(Extension):
        tags = {"generation"}  # noqa: RUF012 (jinja2 Extension declares a set)

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            call = self.call_method("_body")
            return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return caller()

    return GenerationBlock


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return "" if value is None else str(value)


class ChatRenderer:
    """Renders messages with a model's chat template (ChatML by joins when it matches)."""

    def __init__(self, template: str, tokenizer_config: dict[str, Any]) -> None:
        try:
            self._template = template_environment().from_string(template)
        except Exception as exc:  # jinja2 raises several kinds; all mean "unusable here"
            raise TokenizerError(f"the chat template does not compile: {exc}") from None
        # What transformers passes besides the messages: its named special tokens, only
        # those the tokenizer has (an absent one is undefined to the template, not "").
        self._special = {
            name: _token_text(tokenizer_config[name])
            for name in SPECIAL_TOKENS
            if tokenizer_config.get(name) is not None
        }
        self.chatml_default_system = self._detect_chatml()

    def render_jinja(self, messages: list[dict[str, str]], **extra: Any) -> str:
        """The prompt as the template writes it; ``extra`` are more template variables
        (``tools``, as ``apply_chat_template`` passes them)."""
        try:
            variables = {"tools": None, "documents": None, **self._special, **extra}
            return self._template.render(messages=messages, add_generation_prompt=True, **variables)
        except TokenizerError:
            raise
        except Exception as exc:
            raise TokenizerError(f"the chat template failed: {exc}") from None

    @staticmethod
    def _chatml(messages: list[dict[str, str]], default_system: str | None) -> str:
        parts = []
        if default_system is not None and messages[0]["role"] != "system":
            parts.append(f"<|im_start|>system\n{default_system}<|im_end|>\n")
        parts.extend(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
        parts.append("<|im_start|>assistant\n")
        return "".join(parts)

    def _detect_chatml(self) -> str | bool | None:
        """The default system text when the template is ChatML ("" for none), else False."""
        try:
            first = self.render_jinja(PROBES[0])
        except TokenizerError:
            return False
        head = "<|im_start|>system\n"
        default: str | None = None
        if first.startswith(head):
            default = first[len(head) : first.find("<|im_end|>")]
        try:
            same = all(self.render_jinja(p) == self._chatml(p, default) for p in PROBES)
        except TokenizerError:
            return False
        return default if same else False

    @property
    def is_chatml(self) -> bool:
        return self.chatml_default_system is not False

    def render(self, messages: list[dict[str, str]]) -> str:
        if self.chatml_default_system is False:
            return self.render_jinja(messages)
        return self._chatml(messages, self.chatml_default_system)  # type: ignore[arg-type]
