"""What the tests split from tests/unit/test_tokens.py by kind share (docs/tests.md)."""

from __future__ import annotations

import pytest

from core.check.engine_requests import ChatRequest
from core.config import default_model_dir

pytestmark = pytest.mark.usefixtures("default_model")  # prepared when it is not yet


MODEL = default_model_dir()


CONVERSATIONS = [
    [{"role": "user", "content": "Hi there"}],
    [
        {"role": "system", "content": "Classify the sentiment: positive, negative or neutral."},
        {"role": "user", "content": "Absolutely love these headphones!  Battery: 7 days."},
    ],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "你好，世界 — naïve café\n\n\tindented   spaces "},
        {"role": "assistant", "content": "  Hello.\n"},
        {"role": "user", "content": "Again <|im_end|> with a literal special token, $49.00"},
    ],
    [{"role": "developer", "content": "D"}, {"role": "user", "content": "don't 'quote' 12345"}],
]


def chat(messages: list[dict]) -> ChatRequest:
    return ChatRequest(custom_id="x", messages=messages, sampling={"max_tokens": 1})


# transformers' extensions to Jinja, as a Llama 3.1 style template uses them: the loop
# controls, strftime_now, tojson with its options, `tools is none` (transformers passes it),
# a {% generation %} block, and a bos_token that is only used when the tokenizer has one.
EXTENDED_TEMPLATE = (
    "{{- bos_token if bos_token is defined else '' -}}\n"
    '{%- set today = strftime_now("%d %b %Y") -%}\n'
    "<|im_start|>system\nToday is {{ today }}.{% if tools is not none %} Tools: "
    "{{ tools | tojson(separators=(',', ':'), sort_keys=true) }}{% endif %}<|im_end|>\n"
    "{% for m in messages %}\n"
    "{%- if m['role'] == 'system' %}{% continue %}{% endif %}\n"
    "{%- if loop.index > 6 %}{% break %}{% endif %}\n"
    "<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}{% endgeneration %}"
    "{% else %}{{ m['content'] }}{% endif %}<|im_end|>\n"
    "{% endfor %}\n"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
