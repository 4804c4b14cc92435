"""Prompt token counts: the same numbers the model's own tokenizer and template give."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from core.check.engine_requests import CompletionRequest
from core.check.tokens import TokenCounter, TokenizerError, load_counter
from tests.support.tokens import CONVERSATIONS, EXTENDED_TEMPLATE, MODEL, chat

pytestmark = pytest.mark.usefixtures("default_model")  # prepared when it is not yet


def reference_counts(folder: Path, conversations: list) -> list[int]:
    """What vLLM sees: transformers' chat template, then its tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    texts = [
        tokenizer.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
        for c in conversations
    ]
    return [len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in texts]


def test_counts_match_the_models_chat_template_and_tokenizer() -> None:
    counter = TokenCounter(MODEL)
    assert counter.mode == "pieces" and counter.renderer.is_chatml
    assert counter.context_length == 8192
    expected = reference_counts(MODEL, CONVERSATIONS)
    counter.start_file()  # first texts: cross-checked against encode_batch
    assert counter.count_requests([chat(c) for c in CONVERSATIONS]) == expected
    # after the cross-check, the turn-by-turn path gives the same numbers
    assert counter.count_requests([chat(c) for c in CONVERSATIONS * 20])[:4] == expected


def test_a_completions_prompt_is_counted_without_a_template() -> None:
    counter = TokenCounter(MODEL)
    prompt = CompletionRequest(custom_id="p", sampling={"max_tokens": 1}, prompt="Once upon a time")
    expected = len(counter.tokenizer.encode("Once upon a time", add_special_tokens=True).ids)
    assert counter.count_requests([prompt]) == [expected]


def test_another_template_is_rendered_with_jinja(tmp_path: Path) -> None:
    folder = tmp_path / "llama-ish"
    shutil.copytree(MODEL, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    template = (
        "{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}[ASSISTANT] {% endif %}"
    )
    (folder / "chat_template.jinja").write_text(template)
    counter = TokenCounter(folder)
    assert not counter.renderer.is_chatml
    counter.start_file()
    assert counter.count_requests([chat(c) for c in CONVERSATIONS]) == reference_counts(
        folder, CONVERSATIONS
    )


def test_a_difference_from_the_tokenizer_switches_to_encode_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    counter = TokenCounter(MODEL)
    counter.start_file()
    monkeypatch.setattr(counter, "_count_pieces_many", lambda texts: [0] * len(texts))
    counts = counter.count_requests([chat(c) for c in CONVERSATIONS])
    assert counter.mode == "encode_batch"
    assert counts == reference_counts(MODEL, CONVERSATIONS)


def test_a_folder_without_tokenizer_or_template_is_named(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"has no tokenizer\.json"):
        load_counter(tmp_path)
    shutil.copy(MODEL / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    with pytest.raises(TokenizerError, match="has no chat template"):
        TokenCounter(tmp_path)


def test_counting_by_chunk_and_pre_token_agrees_with_the_tokenizer_on_awkward_text() -> None:
    """Numbers, amounts, contractions, runs of white space and control characters: the
    cached chunk path must give exactly what encoding the whole text gives."""
    import random
    import string

    counter = TokenCounter(MODEL)
    assert counter.mode == "pieces"
    rng = random.Random(7)
    alphabet = string.printable + "'''  \t\n\x0b\x0c\x1c\x1f" + string.digits * 3
    words = ["don't", "I'll", "#48213,", "$4.50", "x--y", "a\n b", "  ", "'s", "9th", "A1b2"]
    texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 80))) for _ in range(2000)]
    texts += [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(2000)]
    texts += ["Ünïcödé ½ 你好 " + t for t in texts[:200]]
    assert counter.count_texts(texts) == counter._encode_batch(texts, False)


LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


QWEN2_PATTERN = LLAMA3_PATTERN.replace(r"\p{N}{1,3}", r"\p{N}")


def split_layout_counter(folder: Path, pattern: str, normalizer: dict | None) -> TokenCounter:
    """The built-in model's tokenizer with a regex Split then a plain ByteLevel (the layout of
    Llama 3 and Qwen) and the given normalizer, in a copy of the folder."""
    shutil.copytree(MODEL, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    spec_file = folder / "tokenizer.json"
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    spec["normalizer"] = normalizer
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated"}
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}
    spec["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [{**split, "invert": False}, {**byte_level, "trim_offsets": True}],
    }
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    return TokenCounter(folder)


def awkward_texts(seed: int) -> list[str]:
    """Random printable and control text, and word salads with contractions, amounts,
    digit runs and (NFC-relevant) decomposed accents, jamo and combining marks."""
    import random
    import string

    rng = random.Random(seed)
    alphabet = string.printable + "'  \t\n\x0b\x0c\x1c" + string.digits * 3
    words = ["DON'T", "I'll", "#48213,", "$4.50", "(x)", "a\n b", "  ", "12345678", "naïve"]
    words += ["cafe\u0301", "A\u030angstro\u0308m", "\u1100\u1161", ">\u0338", "x\u0338"]
    texts = ["".join(rng.choices(alphabet, k=rng.randint(0, 80))) for _ in range(2000)]
    texts += [" ".join(rng.choices(words, k=rng.randint(1, 12))) for _ in range(2000)]
    return texts + [t + "<|im_end|>\u0338 e\u0301" for t in texts[-100:]]


def test_a_llama3_style_split_pre_tokenizer_is_counted_by_chunk_exactly(tmp_path: Path) -> None:
    """A regex Split then a plain ByteLevel (Llama 3's layout; here over the built-in
    model's vocabulary) takes the chunk path, and agrees with the tokenizer."""
    counter = split_layout_counter(tmp_path / "m", LLAMA3_PATTERN, None)
    assert counter.mode == "pieces"
    texts = awkward_texts(11)
    assert counter.count_texts(texts) == counter._encode_batch(texts, False)
    # The layout took effect: the split keeps "." with the word, as Llama 3 does.
    pieces = counter.tokenizer.pre_tokenizer.pre_tokenize_str("x.world")
    assert [piece for piece, _ in pieces] == ["x", ".world"]


def test_a_qwen_style_nfc_normalizer_is_counted_by_chunk_exactly(tmp_path: Path) -> None:
    """Qwen's layout adds an NFC normalizer: decomposed accents, Hangul jamo and a combining
    mark after a special token count as the tokenizer counts them."""
    counter = split_layout_counter(tmp_path / "m", QWEN2_PATTERN, {"type": "NFC"})
    assert counter.mode == "pieces"
    texts = awkward_texts(12)
    assert counter.count_texts(texts) == counter._encode_batch(texts, False)
    assert counter.count_texts(["cafe\u0301"]) == counter.count_texts(["caf\u00e9"])
    # Added tokens matched after normalizing cannot be split off first: the slow path.
    spec_file = tmp_path / "m" / "tokenizer.json"
    spec = json.loads(spec_file.read_text(encoding="utf-8"))
    spec["added_tokens"] = [{**t, "normalized": True} for t in spec["added_tokens"]]
    spec_file.write_text(json.dumps(spec), encoding="utf-8")
    assert TokenCounter(tmp_path / "m").mode == "encode_batch"


def test_logit_bias_on_a_token_the_model_lacks_is_refused_with_its_line(tmp_path: Path) -> None:
    from core.check import check_file

    vocab = json.loads((MODEL / "config.json").read_text())["vocab_size"]
    path = tmp_path / "bias.jsonl"
    lines = [
        {"logit_bias": {str(vocab - 1): 5}},  # the last id: the engine takes it
        {"logit_bias": {"17": 1, str(vocab): 5}},  # one past it: the engine refuses the line
    ]
    path.write_text(
        "".join(
            json.dumps(
                {
                    "custom_id": f"b{i}",
                    "method": "POST",
                    "url": "/v1/chat/completions",
                    "body": {"model": "m", "messages": [{"role": "user", "content": "Hi"}], **b},
                }
            )
            + "\n"
            for i, b in enumerate(lines)
        )
    )
    report = check_file(path, model_folder=MODEL)
    assert (report.valid, report.invalid) == (1, 1)
    (error,) = report.errors
    assert (error.line, error.param) == (2, "body.logit_bias")
    assert f"token id {vocab}; the model's ids run from 0 to {vocab - 1}" in error.message


def test_a_template_using_transformers_extensions_is_counted_as_the_tokenizer_renders_it(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "extended"
    shutil.copytree(MODEL, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    (folder / "chat_template.jinja").write_text(EXTENDED_TEMPLATE)
    counter = TokenCounter(folder)  # it compiles: no "the chat template does not compile"
    conversations = [*CONVERSATIONS, [{"role": "user", "content": f"turn {i}"} for i in range(9)]]
    expected = reference_counts(folder, conversations)
    counter.start_file()
    assert counter.count_requests([chat(c) for c in conversations]) == expected
    assert "Today is " in counter.renderer.render(CONVERSATIONS[0])
