"""The order requests reach the engine: shared prompt prefixes together, the longest
answers of a group first (core/run/engine_order.py)."""

import random

from core.check.engine_requests import ChatRequest, CompletionRequest, EmbeddingRequest
from core.run.engine_order import engine_order


def ask(custom_id: str, document: str, question: str, max_tokens: int = 16) -> ChatRequest:
    return ChatRequest(
        custom_id=custom_id,
        messages=[{"role": "user", "content": f"{document}\n\nQuestion: {question}"}],
        sampling={"max_tokens": max_tokens, "temperature": 0.0},
    )


def test_questions_on_one_document_reach_the_engine_together_longest_first():
    documents = {d: f"Document {d}. " + "Some long shared text. " * 20 for d in "ABCD"}
    requests = [
        ask(f"{d}{q}", text, f"question {q}", max_tokens=8 * (q + 1))
        for d, text in documents.items()
        for q in range(5)
    ]
    random.Random(7).shuffle(requests)
    ordered = engine_order(requests)
    assert sorted(r.custom_id for r in ordered) == sorted(r.custom_id for r in requests)
    documents_seen = [r.custom_id[0] for r in ordered]
    runs = [d for i, d in enumerate(documents_seen) if i == 0 or documents_seen[i - 1] != d]
    assert sorted(runs) == list("ABCD")  # each document's questions in one run
    for d in "ABCD":
        limits = [r.max_tokens for r in ordered if r.custom_id[0] == d]
        assert limits == sorted(limits, reverse=True)


def test_prompts_that_share_less_than_a_block_are_not_grouped_by_length():
    short = [
        CompletionRequest(custom_id=str(i), prompt=f"p{i}", sampling={"max_tokens": i + 1})
        for i in range(5)
    ]
    # Grouped, the longest (p4) would lead; apart, they stand by their text.
    assert [r.custom_id for r in engine_order(short)] == ["0", "1", "2", "3", "4"]


def test_vectors_keep_their_order():
    requests = [EmbeddingRequest(custom_id=c, inputs=[c]) for c in "zyx"]
    assert [r.custom_id for r in engine_order(requests)] == ["z", "y", "x"]
