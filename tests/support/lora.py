"""LoRA adapters for the tests: one in peft's layout written by hand (zero weights, for the
checks of config and shapes), and a real one made with peft on the built-in model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from safetensors.numpy import save_file

LAYER = "base_model.model.model.layers.0.self_attn"


def make_adapter(
    folder: Path,
    base: Path | str,
    rank: int = 8,
    shapes: dict[str, tuple[int, int]] | None = None,
    weights: bool = True,
) -> Path:
    """A peft LoRA folder: q_proj and v_proj of SmolLM2's first layer unless ``shapes``
    (module -> (in, out)) says otherwise."""
    folder.mkdir(parents=True)
    shapes = shapes or {f"{LAYER}.q_proj": (576, 576), f"{LAYER}.v_proj": (576, 192)}
    config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": 16,
        "target_modules": sorted({key.rsplit(".", 1)[-1] for key in shapes}),
        "base_model_name_or_path": str(base),
        "task_type": "CAUSAL_LM",
    }
    (folder / "adapter_config.json").write_text(json.dumps(config))
    if weights:
        tensors = {}
        for module, (inputs, outputs) in shapes.items():
            tensors[f"{module}.lora_A.weight"] = np.zeros((max(rank, 1), inputs), np.float32)
            tensors[f"{module}.lora_B.weight"] = np.zeros((outputs, max(rank, 1)), np.float32)
        save_file(tensors, str(folder / "adapter_model.safetensors"))
    return folder


def make_lora(base: Path, out: Path, seed: int = 0, scale: float = 0.2) -> Path:
    """A rank-8 adapter on ``q_proj`` and ``v_proj`` of ``base``, saved by peft into ``out``.
    peft starts B at zero (an adapter that changes nothing): B gets random weights here, so
    the adapter's answers differ from the base's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"
    )
    tuned = get_peft_model(model, config)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, weight in tuned.named_parameters():
            if "lora_B" in name:
                weight.copy_(torch.randn(weight.shape, generator=generator) * scale)
    tuned.save_pretrained(out)
    return out
