"""Reference vectors of the built-in embedding model, computed with transformers."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def reference_vectors(folder: Path, texts: list[str]) -> np.ndarray:
    """sentence-transformers' recipe with plain transformers: mean of the token states over
    the attention mask, then L2 normalisation."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
    with torch.no_grad():
        states = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(states.dtype)
    mean = (states * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(mean, p=2, dim=1).numpy()
