"""PEFT estimates against published fine-tuning measurements (shared/reference/calibration.csv).

Rows (pytorch/torchtune README @0031bfb, 'Memory and training speed'; Llama 3.1 8B, RTX 4090 24GB,
batch 2, no accumulation, dataset packed to 2048 tokens, torch.compile on; peak memory is
torchtune's log_memory_stats, defined in the earlier README as torch.cuda.max_memory_reserved()):

* tune-8b-lora-4090-mem: LoRA, 16.2 GiB.
* tune-8b-qlora-4090-mem: QLoRA (NF4 base), 7.4 GiB.

The recipes' settings, reproduced as gpuplan flags (torchtune configs llama3_1/8B_lora_single_device
and 8B_qlora_single_device of that time): bf16 weights (dtype: bf16), activation checkpointing on,
torch.optim.AdamW(fused=True) on the adapters only, LoRA rank 8, alpha 16, dropout 0, adapters on
the attention projections (q, v, output; k too for QLoRA) and the MLP (apply_lora_to_mlp: True), not
on the output head; QLoRA quantizes every linear layer but the output head to NF4.

Tolerance 15% on ``peak_reserved_bytes`` (max_memory_reserved).

Known gap (xfail, strict so that it is noticed when it closes): torchtune computes the loss with
CEWithChunkedOutputLoss (8 chunks) under torch.compile, which never holds the full-vocabulary logits
in fp32; gpuplan traces transformers' own loss (``logits.float()`` then cross-entropy over
2 × 2048 × 128,256 logits: ~7 GiB of fp32 logits, log-probabilities and their gradient at the
backward peak). Measured: LoRA 26.95 GiB reserved (+66%), QLoRA 15.76 GiB (+113%); without the
loss's ~7 GiB both land near the published figures. Closing it needs a torchtune-style chunked loss
as a ``--loss`` choice (models/sources.py computes the loss), not a PEFT change.
"""

from __future__ import annotations

import pytest

from gpuplan.estimate import estimate
from gpuplan.units import GIB
from gpuplan.workload import Workload

MEASURED_TOLERANCE = 0.15
TORCHTUNE_FLAGS = dict(mode="train", batch_size=2, seq_len=2048, precision="bf16", checkpointing="full",
                       optimizer="adamw", optimizer_impl="fused", lora_rank=8, lora_alpha=16.0, lora_dropout=0.0)
LORA_TARGETS = ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
QLORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.parametrize(("row", "peft", "targets", "published_gib"), [
    ("tune-8b-lora-4090-mem", "lora", LORA_TARGETS, 16.2),
    ("tune-8b-qlora-4090-mem", "qlora", QLORA_TARGETS, 7.4),
])
@pytest.mark.xfail(strict=True, reason="torchtune's chunked, compiled loss vs transformers' fp32 full-vocabulary "
                                       "loss (module docstring): +66% / +113% measured")
@pytest.mark.slow
def test_torchtune_llama31_8b_on_rtx4090(row: str, peft: str, targets: tuple[str, ...], published_gib: float) -> None:
    workload = Workload(**TORCHTUNE_FLAGS, peft=peft, lora_targets=targets)  # type: ignore[arg-type]
    est = estimate("llama-3.1-8b", gpu="RTX-4090", workload=workload)
    error = est.peak_reserved_bytes / (published_gib * GIB) - 1
    assert abs(error) <= MEASURED_TOLERANCE, f"{row}: {est.peak_reserved_bytes / GIB:.2f} GiB ({error:+.1%})"


@pytest.mark.slow
def test_qlora_base_weights_are_nf4_bytes() -> None:
    """The recipe's frozen base in NF4 is what makes QLoRA smaller: the parameters' bytes drop from
    bf16's 2 per weight to NF4's 0.5 + absmax for the quantized layers (embeddings and the output
    head stay bf16: 2 × 128,256 × 4,096 weights)."""
    lora = estimate("llama-3.1-8b", workload=Workload(**TORCHTUNE_FLAGS, peft="lora",  # type: ignore[arg-type]
                                                      lora_targets=QLORA_TARGETS))
    qlora = estimate("llama-3.1-8b", workload=Workload(**TORCHTUNE_FLAGS, peft="qlora",  # type: ignore[arg-type]
                                                       lora_targets=QLORA_TARGETS))
    unquantized = 2 * 128_256 * 4_096 * 2  # embed_tokens + lm_head in bf16
    linear_weights = lora.params_count - 2 * 128_256 * 4_096 - (32 * 2 + 1) * 4_096  # minus norms
    base_bf16 = lora.step.param_bytes
    nf4_base = qlora.step.param_bytes
    assert base_bf16 - nf4_base > 0.7 * 2 * linear_weights  # at least 70% of the bf16 linear bytes saved
    assert nf4_base > unquantized + 0.5 * linear_weights  # 4 bits per weight plus the quantization constants
