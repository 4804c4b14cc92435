"""A real LoRA adapter for the engine tests, made with peft on the built-in model."""

from __future__ import annotations

from pathlib import Path


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
