"""GPT configurations of Megatron-LM Table 1 (Narayanan et al. 2021, arXiv:2104.04473) and of
Korthikanti et al. 2022 (arXiv:2205.05198) Table 3, as Hugging Face gpt2-style config dicts.
Rows: shared/reference/calibration.csv (meg-t1-*, kor-t5-22b-*)."""

from __future__ import annotations

from typing import Any

SEQ = 2048
VOCAB = 51200
A100_PEAK_TFLOPS = 312.0


def gpt_config(hidden: int, layers: int, heads: int) -> dict[str, Any]:
    """GPT-2 architecture at Megatron's sizes. ``gelu`` (one F.gelu kernel) stands for Megatron's
    fused bias-GeLU kernel; HF's ``gelu_new`` would run the tanh formula as ~7 eager kernels, a
    program Megatron did not run (the 1.7B step is ~35% longer with it; docs/accuracy.md)."""
    return {
        "model_type": "gpt2",
        "architectures": ["GPT2LMHeadModel"],
        "n_embd": hidden,
        "n_layer": layers,
        "n_head": heads,
        "n_positions": SEQ,
        "vocab_size": VOCAB,
        "n_inner": 4 * hidden,
        "activation_function": "gelu",
        "tie_word_embeddings": True,
    }


def megatron_flops(batch: int, layers: int, hidden: int, seq: int = SEQ, vocab: int = VOCAB) -> float:
    """FLOPs per iteration as Narayanan et al. count them (Sec. 5.1; assumes full recompute)."""
    return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def model_flops_korthikanti(batch: int, layers: int, hidden: int, seq: int = SEQ, vocab: int = VOCAB) -> float:
    """Model FLOPs per iteration, Korthikanti et al. Eq. 7 (no recompute counted)."""
    return 72 * batch * layers * seq * hidden**2 * (1 + seq / (6 * hidden) + vocab / (12 * hidden * layers))


# row id -> (hidden, layers, heads, tp, pp, dp, global batch, measured TFLOP/s per GPU)
MEGATRON_T1: dict[str, tuple[int, int, int, int, int, int, int, float]] = {
    "meg-t1-1.7b": (2304, 24, 24, 1, 1, 32, 512, 137.0),
    "meg-t1-18.4b": (6144, 40, 48, 8, 1, 32, 1024, 135.0),
    "meg-t1-145.6b": (12288, 80, 96, 8, 8, 24, 2304, 148.0),
    "meg-t1-1008.0b": (25600, 128, 160, 8, 64, 6, 3072, 163.0),
}
