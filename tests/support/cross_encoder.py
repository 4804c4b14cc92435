"""A real cross-encoder folder made here, without a model hub: a small
``BertForSequenceClassification`` of one label with seeded random weights and the built-in
embedding model's (BERT) tokenizer, saved as Hugging Face saves a reranker. Its scores mean
nothing; what vLLM computes on it must still equal what transformers computes."""

from __future__ import annotations

from pathlib import Path

# Small, but what the CPU build runs: its attention takes heads of 32 (not 16) dimensions.
SHAPE = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 128,
    "max_position_embeddings": 64,  # the longest pair it reads: a limit easy to pass
    "initializer_range": 0.5,  # wide weights, so that scores differ from pair to pair
}


def make_cross_encoder(folder: Path, tokenizer_folder: Path, seed: int = 0) -> Path:
    """Saves the cross-encoder into ``folder`` (weights, config, tokenizer) and returns it."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=tokenizer.vocab_size, num_labels=1, **SHAPE)
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def transformers_scores(folder: Path, pairs: list[tuple[str, str]]) -> list[float]:
    """The reference: each pair's score as sentence-transformers' ``CrossEncoder`` gives it
    for one label (the sigmoid of the classifier's logit), computed by transformers."""
    import torch
    from transformers import AutoTokenizer, BertForSequenceClassification

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = BertForSequenceClassification.from_pretrained(folder).eval()
    queries, documents = zip(*pairs, strict=True)
    encoded = tokenizer(list(queries), list(documents), padding=True, return_tensors="pt")
    with torch.no_grad():
        return torch.sigmoid(model(**encoded).logits[:, 0]).tolist()


def pair_tokens(folder: Path, query: str, document: str) -> int:
    """The tokens of one pair as transformers' tokenizer encodes it (special ones included)."""
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(folder)(query, document)["input_ids"])
