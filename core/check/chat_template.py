"""A model folder's chat template and context length, read without vLLM or transformers.

:class:`ChatRenderer` renders a conversation as the engine will (generation prompt
included), by plain string joins when the template is ChatML and with Jinja otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CONTEXT_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "max_sequence_length",
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
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    for source in (config, config.get("text_config") or {}):
        for key in keys:
            if isinstance(source.get(key), int) and source[key] > 0:
                return source[key]
    return None


def template_source(folder: Path) -> tuple[str | None, dict[str, Any]]:
    """The chat template text (or None) and the tokenizer config."""
    config: dict[str, Any] = {}
    config_file = folder / "tokenizer_config.json"
    if config_file.is_file():
        try:
            config = json.loads(config_file.read_text(encoding="utf-8"))
        except ValueError:
            config = {}
    jinja_file = folder / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8"), config
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: take the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return (template if isinstance(template, str) else None), config


def _token_text(value: Any) -> str:
    if isinstance(value, dict):
        return str(value.get("content", ""))
    return "" if value is None else str(value)


class ChatRenderer:
    """Renders messages with a model's chat template (ChatML by joins when it matches)."""

    def __init__(self, template: str, tokenizer_config: dict[str, Any]) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        # The same environment settings transformers uses for chat templates.
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)

        def raise_exception(message: str) -> None:
            raise TokenizerError(f"the chat template refused the conversation: {message}")

        env.globals["raise_exception"] = raise_exception
        env.filters["tojson"] = lambda value, indent=None: json.dumps(
            value, ensure_ascii=False, indent=indent
        )
        try:
            self._template = env.from_string(template)
        except Exception as exc:  # jinja2 raises several kinds; all mean "unusable here"
            raise TokenizerError(f"the chat template does not compile: {exc}") from None
        self._special = {
            name: _token_text(tokenizer_config.get(name))
            for name in ("bos_token", "eos_token", "pad_token", "unk_token")
        }
        self.chatml_default_system = self._detect_chatml()

    def render_jinja(self, messages: list[dict[str, str]], **extra: Any) -> str:
        """The prompt as the template writes it; ``extra`` are more template variables
        (``tools``, as ``apply_chat_template`` passes them)."""
        try:
            return self._template.render(
                messages=messages, add_generation_prompt=True, **self._special, **extra
            )
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
