"""How the engine holds an answer to a JSON schema (structured output)."""

from __future__ import annotations

# Structured output (forced tool calls, response_format json_schema and json_object) writes
# compact JSON, as OpenAI's does: by default vLLM lets the model write any whitespace
# between tokens of the JSON, and a small model then spent its max_tokens on newlines
# ("urgent"\n:\n\n\n...) and never closed the call. vLLM allows compact JSON only where
# one backend is chosen. llguidance takes the schema features vLLM's auto choice already
# sent it for (multipleOf, uniqueItems, string formats: xgrammar turns them away); only a
# model folder without a fast tokenizer cannot use it (its structured lines are refused).
# Where a schema leaves additionalProperties out, llguidance lets the model add any key
# (SmolLM2 then wrote keys until max_tokens); xgrammar did not, and neither does this.
STRUCTURED_OUTPUTS = {
    "backend": "guidance",
    "disable_any_whitespace": True,
    "disable_additional_properties": True,
}
