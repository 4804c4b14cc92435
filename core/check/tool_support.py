"""Can a model folder run ``tool_choice`` ``"auto"``: the model itself decides whether to
call a tool, so its chat template must show it the tools, and its answer must be read by a
tool-call parser that knows the model's call syntax (vLLM's parsers, by the markers a
template teaches). One rule, called by :func:`core.check.model_fit.fit_batch`, which every
entry point's check runs (the app, ``core check``, the inbox and the Batch API submit
through it); the engine reads the parser from here too.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.check.chat_template import ChatRenderer, TokenizerError, template_source

# A template's call syntax -> the vLLM tool parser that reads it.
PARSERS = (
    ("<tool_call>", "hermes"),  # Hermes, Qwen2.5, Qwen3 and other ChatML tool templates
    ("[TOOL_CALLS]", "mistral"),
    ("<|python_tag|>", "llama3_json"),  # Llama 3.1 and 3.2
)
PROBE_NAME = "batch_studio_probe_tool"
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": PROBE_NAME,
        "description": "Looks a word up.",
        "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
    },
}
PROBE_MESSAGES = [{"role": "user", "content": "Look up the word 'batch'."}]
INSTEAD = "set tool_choice to 'required', to a named function, or to 'none'"


@dataclass(frozen=True)
class AutoSupport:
    """Whether a folder runs ``auto``: the parser that reads its calls, or why not."""

    parser: str | None = None
    reason: str | None = None


@functools.lru_cache(maxsize=32)
def auto_support(folder: str) -> AutoSupport:
    """Whether the model in ``folder`` can decide itself to call a tool (``"auto"``)."""
    name = Path(folder).name
    template, config = template_source(Path(folder))
    if template is None:
        return AutoSupport(reason=f"{name} has no chat template to show it the tools; {INSTEAD}")
    try:
        rendered = ChatRenderer(template, config).render_jinja(PROBE_MESSAGES, tools=[PROBE_TOOL])
    except TokenizerError as exc:
        return AutoSupport(reason=f"{name}'s chat template cannot render tools ({exc}); {INSTEAD}")
    if PROBE_NAME not in rendered:
        return AutoSupport(
            reason=f"tool_choice 'auto' lets the model decide whether to call a tool, but "
            f"{name}'s chat template does not render tools, so the model would never see "
            f"them; {INSTEAD} (the engine then holds the answer to the tool's schema), or "
            "run on a model whose template renders tools (a Qwen2.5, Hermes or Llama 3.1 "
            "instruct model)"
        )
    parser = next((p for marker, p in PARSERS if marker in template), None)
    if parser is None:
        known = ", ".join(f"{p} ({m})" for m, p in PARSERS)
        return AutoSupport(
            reason=f"{name}'s chat template renders tools, but in a call syntax no parser "
            f"here reads (known: {known}); {INSTEAD}"
        )
    return AutoSupport(parser=parser)


def render_with_tools(folder: str, messages: list[dict[str, str]], tools: list[Any]) -> str:
    """The prompt of an ``auto`` request, tools included, as the engine renders it."""
    template, config = template_source(Path(folder))
    return ChatRenderer(template or "", config).render_jinja(messages, tools=tools)
