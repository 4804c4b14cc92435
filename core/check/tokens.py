"""Prompt token counts with a model folder's own tokenizer and chat template (no vLLM).

A count is what the engine will see: the conversation rendered with the folder's chat
template (generation prompt included), tokenized without extra special tokens; a
``/v1/completions`` prompt is tokenized as is, with the tokenizer's special tokens.

Two speed-ups keep a million lines within seconds on two cores, each checked against the
plain ``tokenizers`` result before it is trusted:

- **ChatML rendered directly.** When the template renders probe conversations exactly as
  ChatML (``<|im_start|>role\\ncontent<|im_end|>``), lines are rendered by string joins
  instead of Jinja.
- **Counting by chunk.** For a byte-level BPE tokenizer (no normalizer or NFC; GPT-2's
  ``ByteLevel`` regex pre-tokenizer, or a regex ``Split`` then a plain ``ByteLevel`` as
  Llama 3 and Qwen have) merges never cross pre-token boundaries, and with these patterns a
  space right after a non-space always starts a pre-token, so a text's count is the sum
  of its space-led chunks' counts (`` world,``), and those repeat a lot: each distinct
  chunk is counted once and cached. Under GPT-2's pattern a new ASCII chunk is split
  into its pre-tokens, and those are encoded once each. The first texts of every file are
  also counted with ``Tokenizer.encode_batch``; on any difference the counter falls back
  to it for good.

Any other tokenizer uses ``Tokenizer.encode_batch`` on batches of rendered text.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import islice
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from core.check.chat_template import (
    ChatRenderer,
    TokenizerError,
    context_length,
    template_source,
    vocab_size,
)
from core.check.engine_requests import ChatRequest, CompletionRequest
from core.check.messages import LEADING_ROLES
from core.files import load_json

# Where GPT-2's pre-tokenizer always starts a new pre-token, whatever follows: at a space
# that comes right after a non-space (its patterns take at most one leading space, and a
# whitespace run cannot start after a non-space). Python's \S excludes a few characters
# Unicode does not call white space (U+001C..U+001F): splitting less there is still exact.
CHUNK_BOUNDARY = re.compile(r"(?<=\S)(?= )")
# In ASCII text, a space after one of these (Unicode White_Space) is not a safe boundary.
UNSAFE_SPACE = re.compile(r"[\t\n\v\f\r ] ").search
# GPT-2's pre-tokenizer pattern restricted to ASCII text, where \p{L} is [A-Za-z], \p{N}
# is [0-9] and Unicode White_Space is [\t\n\v\f\r ] (Python's \s would add \x1c-\x1f).
_WS = r"[\t\n\v\f\r ]"
ASCII_PRETOKENS = re.compile(
    rf"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\t\n\v\f\r A-Za-z0-9]+"
    rf"|{_WS}+(?![^\t\n\v\f\r ])|{_WS}+"
).findall
VERIFY_TEXTS = 64  # texts of each file counted both ways before the fast path is trusted
PIECE_CACHE_LIMIT = 400_000  # distinct chunks (and pre-tokens) kept
MESSAGE_CACHE_LIMIT = 20_000  # repeated system/developer messages kept
PROBE_TEXTS = [
    "Hello, world! It's 2024-05-02T08:14:00Z; charge $49.00 twice?",
    "  leading spaces\n\n\ttabs and\r\nCRLF   trailing   ",
    "你好，世界。Ünïcödé ½ ² Ⅻ naïve café — “quotes” 🙂🙂",
    "<|im_start|>user\nliteral special tokens<|im_end|>\n",
    "don't won't they'll I'm we've 'quoted' 123456789 3.14159",
    "a\x0bb\x0cc\x1cd  \x1f e\x85 f\xa0g x \x1c\x1d y",
    "tab\there  \n  x\n",
]


class _Counts(dict):
    """text -> token count, counted by ``count`` the first time a text is looked up.

    Only the first ``PIECE_CACHE_LIMIT`` texts are kept: the common ones come early, and
    keeping every rare one (ids, amounts) would let memory grow with the file.
    """

    __slots__ = ("count",)

    def __init__(self, count: Callable[[str], int]) -> None:
        super().__init__()
        self.count = count

    def __missing__(self, text: str) -> int:
        value = self.count(text)
        if len(self) < PIECE_CACHE_LIMIT:
            self[text] = value
        return value


class TokenCounter:
    """Counts prompt tokens for one model folder. Thread-safe for one check at a time.

    Attributes:
        folder: the model folder.
        name: the folder's name (the name results and measurements use).
        context_length: the model's context length, or None when its config does not say.
        vocab_size: how many token ids the model has, or None when its config does not say.
        mode: ``"pieces"`` (cached chunks) or ``"encode_batch"``.
    """

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder).expanduser()
        tokenizer_file = self.folder / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise TokenizerError(
                f"{self.folder} has no tokenizer.json; prompt tokens cannot be counted"
            )
        try:
            self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
            spec = load_json(tokenizer_file)
        except Exception as exc:  # a corrupt file: say so instead of a traceback
            raise TokenizerError(f"{tokenizer_file} cannot be read: {exc}") from None
        template, config = template_source(self.folder)
        if template is None:
            raise TokenizerError(
                f"{self.folder} has no chat template (chat_template.jinja or "
                "tokenizer_config.json); chat prompts cannot be counted"
            )
        self.renderer = ChatRenderer(template, config)
        self.name = self.folder.name
        self.embeds = False  # a chat/generation model (see InputCounter)
        self.context_length = context_length(self.folder)
        self.vocab_size = vocab_size(self.folder)
        self._lock = threading.Lock()
        self._pieces = _Counts(self._count_chunk)
        self._after_space = _Counts(lambda word: self._count_chunk(" " + word))
        self._pretokens = _Counts(self._encode)
        self._pretoken_split: Callable[[str], list[str]] | None = None  # see _pieces_apply
        # Tokens of a role name and the newline after it (a ChatML turn's header).
        self._role_counts = _Counts(lambda role: self._count_pieces_many([f"{role}\n"])[0])
        self._messages: dict[str, int] = {}
        self._verify_left = 0
        self._specials_added = len(self.tokenizer.encode("a", add_special_tokens=True).ids) - len(
            self.tokenizer.encode("a", add_special_tokens=False).ids
        )
        vocab = (spec.get("model") or {}).get("vocab")
        lengths = [len(t) for t in vocab] if isinstance(vocab, dict) else []
        # A byte-level token spells at most this many bytes (one vocabulary character per
        # byte); for other tokenizers, 64 characters per token is a safe bound.
        self.max_token_chars = max(lengths, default=64) if self._byte_level(spec) else 64
        self._added, self._split = self._added_tokens(spec)
        marks = {token[0] for token in self._added}
        # When every added token starts with the same character, a text without it holds
        # none (None: split every text on the added tokens).
        self._added_mark = marks.pop() if len(marks) == 1 else None
        self.mode = "pieces" if self._pieces_apply(spec) else "encode_batch"

    # -- the chunk path --------------------------------------------------------------------

    @staticmethod
    def _added_tokens(spec: dict[str, Any]) -> tuple[set[str], Any]:
        added = {t["content"] for t in spec.get("added_tokens") or [] if t.get("content")}
        if not added:
            return added, None
        alternatives = "|".join(re.escape(t) for t in sorted(added, key=len, reverse=True))
        return added, re.compile(f"({alternatives})")

    @staticmethod
    def _byte_level(spec: dict[str, Any]) -> bool:
        return (spec.get("pre_tokenizer") or {}).get("type") == "ByteLevel"

    def lower_bound(self, messages: list[dict[str, str]] | None, prompt: str | None) -> int:
        """A cheap lower bound of a prompt's tokens (no tokenizing): characters divided by
        the longest token's length. Used to refuse huge prompts without encoding them."""
        chars = (
            len(prompt) if prompt is not None else sum(len(m["content"]) for m in messages or [])
        )
        return chars // self.max_token_chars

    @staticmethod
    def _pre_tokenizer_kind(pre: dict[str, Any]) -> str | None:
        """``"gpt2"`` for GPT-2's byte-level pre-tokenizer, ``"split"`` for a regex split
        followed by a plain byte-level mapping (Llama 3 style), None for anything else."""
        if pre.get("type") == "ByteLevel":
            plain = pre.get("use_regex", True) and not pre.get("add_prefix_space")
            return "gpt2" if plain else None
        steps = pre.get("pretokenizers") or []
        if pre.get("type") != "Sequence" or len(steps) != 2:
            return None
        split, byte_level = steps
        regex_split = (
            split.get("type") == "Split"
            and "Regex" in (split.get("pattern") or {})
            and split.get("behavior") == "Isolated"
            and not split.get("invert")
        )
        mapping_only = (
            byte_level.get("type") == "ByteLevel"
            and not byte_level.get("use_regex", True)
            and not byte_level.get("add_prefix_space")
        )
        return "split" if regex_split and mapping_only else None

    def _pieces_apply(self, spec: dict[str, Any]) -> bool:
        model = spec.get("model") or {}
        # An NFC normalizer (Qwen's) changes nothing across a chunk boundary: a space
        # composes with nothing and ends any run of combining marks, so normalizing chunk
        # by chunk (the tokenizer does it when a chunk is encoded) equals the whole text.
        # Added tokens must then be matched before normalizing, as the texts are split here.
        nfc = spec.get("normalizer") == {"type": "NFC"}
        plain_added = all(
            not (t.get("lstrip") or t.get("rstrip") or t.get("single_word"))
            and not (nfc and t.get("normalized"))
            for t in spec.get("added_tokens") or []
        )
        kind = self._pre_tokenizer_kind(spec.get("pre_tokenizer") or {})
        eligible = (
            (spec.get("normalizer") is None or nfc)
            and kind is not None
            and model.get("type") == "BPE"
            and not model.get("dropout")
            and plain_added
        )
        if not eligible:
            return False
        # New ASCII chunks are summed from GPT-2 pre-tokens only where GPT-2's pattern is
        # the one in use; under another pattern a new chunk is encoded whole.
        self._pretoken_split = ASCII_PRETOKENS if kind == "gpt2" else None
        self._chunks = CHUNK_BOUNDARY.split
        return self._count_pieces_many(PROBE_TEXTS) == self._encode_batch(PROBE_TEXTS, False)

    def _count_pieces_many(self, texts: Sequence[str]) -> list[int]:
        """Counts of texts as sums of chunk counts (each chunk counted once, then cached).

        Two kinds of key: ``_pieces`` maps a chunk to its count; ``_after_space`` maps a
        word ``w`` to the count of `` w``, so that an ASCII text whose spaces all follow a
        non-space splits with ``str.split(" ")`` and is summed without building a string.
        """
        get, get_after = self._pieces.__getitem__, self._after_space.__getitem__
        added, split, mark = self._added, self._split, self._added_mark
        unsafe_space, chunks = UNSAFE_SPACE, self._chunks
        results = [0] * len(texts)
        for index, text in enumerate(texts):
            if split is None or (mark is not None and mark not in text):
                # In printable ASCII the only white space is " " itself: no regex needed.
                if text.isascii() and (
                    "  " not in text if text.isprintable() else unsafe_space(text) is None
                ):
                    words = text.split(" ")
                    results[index] = get(words[0]) + sum(map(get_after, islice(words, 1, None)))
                    continue
                words, specials = chunks(text), 0
            else:
                words, specials = [], 0
                for segment in split.split(text):
                    if segment in added:
                        specials += 1
                    elif segment:
                        words += chunks(segment)
            results[index] = specials + sum(map(get, words))
        return results

    def _count_chunk(self, chunk: str) -> int:
        """A chunk's count. An ASCII chunk is the sum of its pre-tokens, which repeat far
        more often than whole chunks (`` #48213,`` is `` #``, ``48213`` and ``,``)."""
        if self._pretoken_split is not None and chunk.isascii():
            return sum(map(self._pretokens.__getitem__, self._pretoken_split(chunk)))
        return self._encode(chunk)

    def _encode(self, text: str) -> int:
        return len(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def _encode_batch(self, texts: Sequence[str], specials: bool) -> list[int]:
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return [len(e.ids) for e in encode(list(texts), add_special_tokens=specials)]

    # -- public --------------------------------------------------------------------------------

    def start_file(self) -> None:
        """Re-arms the cross-check of the fast path on the next texts (call per file)."""
        self._verify_left = VERIFY_TEXTS if self.mode == "pieces" else 0

    def count_texts(self, texts: Sequence[str], *, special_tokens: bool = False) -> list[int]:
        """Token counts of already-rendered texts."""
        with self._lock:
            if self.mode != "pieces":
                return self._encode_batch(texts, special_tokens)
            counts = self._count_pieces_many(texts)
            if self._verify_left > 0:
                sample = list(texts[: self._verify_left])
                self._verify_left -= len(sample)
                if counts[: len(sample)] != self._encode_batch(sample, False):
                    self.mode = "encode_batch"  # trust the tokenizer, not the shortcut
                    return self._encode_batch(texts, special_tokens)
            if special_tokens and self._specials_added:
                counts = [c + self._specials_added for c in counts]
            return counts

    def _chatml_counts(self, conversations: Sequence[list[dict[str, str]]]) -> list[int]:
        """ChatML conversations counted turn by turn, without rendering them.

        The special tokens around each turn split the text, so a conversation's count is the
        sum of its turns'; within a turn, ``role\\n`` and a text that starts with a
        non-space are separate pre-tokens too. Instructions repeated across lines are
        counted once.
        """
        cache = self._messages
        default = self.renderer.chatml_default_system
        base, gen = self._turn_overhead, self._generation_prompt
        role_count = self._role_counts.__getitem__
        totals: list[int] = []
        todo: list[str] = []
        owners: list[tuple[int, tuple[str, str] | None]] = []
        for index, messages in enumerate(conversations):
            total = gen
            if default is not None and messages[0]["role"] != "system":
                total += self._default_system
            for message in messages:
                role, content = message["role"], message["content"]
                key = (role, content) if role in LEADING_ROLES else None
                if key is not None:
                    count = cache.get(key)
                    if count is not None:
                        total += count
                        continue
                if content and not content[0].isspace():
                    total += base + role_count(role)
                    todo.append(content)
                else:  # a leading space or newline may join the role's newline: keep them
                    total += base
                    todo.append(f"{role}\n{content}")
                owners.append((index, key))
            totals.append(total)
        for (index, key), count in zip(owners, self._count_pieces_many(todo), strict=True):
            totals[index] += count
            if key is not None:
                if len(cache) > MESSAGE_CACHE_LIMIT:
                    cache.clear()
                extra = role_count(key[0]) if key[1] and not key[1][0].isspace() else 0
                cache[key] = base + extra + count
        return totals

    @property
    def _default_system(self) -> int:
        """Tokens of the template's default system turn."""
        value = self.__dict__.get("_default_count")
        if value is None:
            text = f"system\n{self.renderer.chatml_default_system}"
            value = self._turn_overhead + self._count_pieces_many([text])[0]
            self.__dict__["_default_count"] = value
        return value

    @property
    def _turn_overhead(self) -> int:
        """Tokens around a turn's text: ``<|im_start|>``, ``<|im_end|>`` and the newline."""
        value = self.__dict__.get("_overhead")
        if value is None:
            value = self._count_pieces_many(["<|im_start|><|im_end|>\n"])[0]
            self.__dict__["_overhead"] = value
        return value

    @property
    def _generation_prompt(self) -> int:
        value = self.__dict__.get("_gen_count")
        if value is None:
            value = self._count_pieces_many(["<|im_start|>assistant\n"])[0]
            self.__dict__["_gen_count"] = value
        return value

    def _fast_counts(
        self, items: Sequence[tuple[list[dict[str, str]] | None, str | None]]
    ) -> list[int]:
        chats = [i for i, (_, prompt) in enumerate(items) if prompt is None]
        counts = [0] * len(items)
        for i, n in zip(chats, self._chatml_counts([items[i][0] for i in chats]), strict=True):
            counts[i] = n
        prompts = [i for i, (_, prompt) in enumerate(items) if prompt is not None]
        numbers = self._count_pieces_many([items[i][1] for i in prompts])
        for i, n in zip(prompts, numbers, strict=True):
            counts[i] = n + self._specials_added
        return counts

    def count_requests(self, requests: Sequence[ChatRequest | CompletionRequest]) -> list[int]:
        """Prompt token counts of requests (chat, completions and responses alike).

        Raises:
            TokenizerError: the chat template refused a conversation.
        """
        return self.count_prompts(
            [(r.messages, None) if isinstance(r, ChatRequest) else ([], r.prompt) for r in requests]
        )

    def count_prompts(
        self, items: Sequence[tuple[list[dict[str, str]] | None, str | None]]
    ) -> list[int]:
        """Token counts of ``(messages, prompt)`` pairs: a raw prompt wins when it is set.

        Raises:
            TokenizerError: the chat template refused a conversation.
        """
        if self.mode == "pieces" and self.renderer.is_chatml and self._verify_left <= 0:
            with self._lock:
                if self.mode == "pieces":
                    return self._fast_counts(items)
        chats = [
            (i, self.renderer.render(messages))
            for i, (messages, prompt) in enumerate(items)
            if prompt is None
        ]
        prompts = [(i, prompt) for i, (_, prompt) in enumerate(items) if prompt is not None]
        counts = [0] * len(items)
        chat_counts = self.count_texts([text for _, text in chats])
        for (i, _), n in zip(chats, chat_counts, strict=True):
            counts[i] = n
        prompt_counts = self.count_texts([text for _, text in prompts], special_tokens=True)
        for (i, _), n in zip(prompts, prompt_counts, strict=True):
            counts[i] = n
        return counts


@lru_cache(maxsize=4)
def _cached_counter(folder: str, mtime: float) -> TokenCounter:
    return TokenCounter(folder)


def load_counter(folder: str | Path) -> TokenCounter:
    """The token counter of a model folder, kept in memory while its tokenizer is unchanged.

    Raises:
        TokenizerError: no usable tokenizer or chat template in the folder.
    """
    path = Path(folder).expanduser().resolve()
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise TokenizerError(f"{path} has no tokenizer.json; prompt tokens cannot be counted")
    return _cached_counter(str(path), tokenizer_file.stat().st_mtime)


class InputCounter:
    """Token counts of an embedding model's inputs (or a cross-encoder's pairs): each text
    with the special tokens the tokenizer adds (``[CLS]`` and ``[SEP]``), as vLLM counts
    it; a list of token ids is its length. ``context_length`` is the longest input the
    model takes."""

    embeds = True

    def __init__(self, folder: Path) -> None:
        from core.model_folders import embedding_limits

        self.folder = folder
        self.name = folder.name
        try:
            self.tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as exc:  # a corrupt file: say so instead of a traceback
            raise TokenizerError(f"{folder / 'tokenizer.json'} cannot be read: {exc}") from None
        # Count whole inputs: the tokenizer's own truncation would hide an input too long.
        self.tokenizer.no_truncation()
        self.tokenizer.no_padding()
        limits = embedding_limits(folder)
        self.context_length, self.dimensions = limits.max_input_tokens, limits.dimensions
        self.vocab_size = vocab_size(folder)

    def start_file(self) -> None:
        """Nothing to reset between files (the chat counter's hook)."""

    def count_inputs(self, inputs: Sequence[str | list[int]]) -> list[int]:
        texts = [text for text in inputs if isinstance(text, str)]
        counted = iter(len(e.ids) for e in self.tokenizer.encode_batch(texts)) if texts else None
        return [next(counted) if isinstance(item, str) else len(item) for item in inputs]

    def count_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[int]:
        """Each (query, document) pair's tokens as a cross-encoder reads it: the two texts
        encoded together with the tokenizer's pair template (``[CLS] a [SEP] b [SEP]``),
        as vLLM tokenizes a pair."""
        return [len(e.ids) for e in self.tokenizer.encode_batch(list(pairs))] if pairs else []


@lru_cache(maxsize=4)
def _cached_input_counter(folder: str, mtime: float) -> InputCounter:
    return InputCounter(Path(folder))


def load_input_counter(folder: str | Path) -> InputCounter:
    """The input counter of an embedding model folder (kept like :func:`load_counter`'s).

    Raises:
        TokenizerError: no usable tokenizer in the folder.
    """
    path = Path(folder).expanduser().resolve()
    tokenizer_file = path / "tokenizer.json"
    if not tokenizer_file.is_file():
        raise TokenizerError(f"{path} has no tokenizer.json; input tokens cannot be counted")
    return _cached_input_counter(str(path), tokenizer_file.stat().st_mtime)
