"""PEFT estimates against published fine-tuning measurements (shared/reference/calibration.csv).

Rows (pytorch/torchtune README @0031bfb, 'Memory and training speed'; Llama 3.1 8B, RTX 4090 24GB,
batch 2, no accumulation, dataset packed to 2048 tokens, torch.compile on; peak memory is
torchtune's log_memory_stats, defined in the earlier README as torch.cuda.max_memory_reserved()):

* tune-8b-lora-4090-mem: LoRA, 16.2 GiB.
* tune-8b-qlora-4090-mem: QLoRA (NF4 base), 7.4 GiB.

The recipes' settings, reproduced as gpuplan flags: torchtune configs
recipes/configs/llama3_1/8B_lora_single_device.yaml and 8B_qlora_single_device.yaml read at the README's
own commit, pytorch/torchtune 0031bfb080bd35ec533c412df883cf2bf7bf7fe4 (issue 19: an earlier version of
this test took the LoRA targets from third-party copies of the config, q/v/output + MLP; the config at
that commit says otherwise). Both: bf16 weights (dtype: bf16), activation checkpointing on,
torch.optim.AdamW(fused=True) on the adapters only, LoRA rank 8, alpha 16, dropout 0, not on the output
head (apply_lora_to_output: False). LoRA: lora_attn_modules [q_proj, v_proj], apply_lora_to_mlp False.
QLoRA: lora_attn_modules [q_proj, v_proj, k_proj, output_proj], apply_lora_to_mlp True, every linear
layer but the output head in NF4. The loss is
``loss: torchtune.modules.loss.CEWithChunkedOutputLoss`` (8 chunks) = ``--loss chunked-ce``.
As CLI flags: ``TORCHTUNE_CLI`` below.

Tolerance 15% on ``peak_reserved_bytes`` (max_memory_reserved).

Known gap (xfail, strict so that it is noticed when it closes). With ``--loss chunked-ce`` (was
transformers' full-vocabulary fp32 loss: 26.95 GiB, +66% / 15.76 GiB, +113%) gpuplan gives
LoRA 21.41 GiB reserved (+32%; 19.26 GiB allocated: parameters 14.97, adapters' AdamW 0.03,
activations 4.24 at the loss; with the q/v/output + MLP targets this test used before it read the config,
22.20 GiB, +37%) and QLoRA 11.70 GiB (+58%; 9.79 allocated: parameters 5.39). Causes:

* torch.compile is not modelled (eager). torchtune compiles ``compute_cross_entropy`` (the chunk's
  ``.float()`` + cross entropy) when ``compile=True``: the compiled graph saves the bf16 chunk (alive
  anyway) and two fp32 values per token (max, logsumexp) for backward — checked with torch 2.14's
  inductor on the CPU, saved_tensors_hooks on torch.compile(F.cross_entropy(x.float(), y)) with a
  bf16 x — where eager autograd keeps every chunk's fp32
  log-probabilities (2 × 2048 × 128,256 × 4 B = 1.96 GiB, the "(inputs and top level)" activations)
  until backward. Compiled blocks also fuse elementwise ops (RMSNorm, SiLU·mul, RoPE) whose eager
  intermediates are the recomputed block's activations at the backward peak.
* allocator slack: the reserved model adds 2.16 GiB (LoRA) / 1.91 GiB (QLoRA) over the allocated peak.
* Even the least any eager or compiled run of this recipe holds at the loss — bf16 weights
  (14.96 GiB) + one bf16 checkpointed input per layer (32 × 2 × 2048 × 4096 × 2 B = 1.0 GiB) + the
  chunks' bf16 logits (0.98 GiB) = 16.9 GiB — is above the published LoRA 16.2 GiB, so the README's
  4090 LoRA run must have used something the config does not say (e.g. activation offloading) or
  a different peak statistic; QLoRA's 7.4 GiB equals that least (5.39 + 1.0 + 0.98 + 0.16 = 7.5).

Throughput (``tune-8b-lora-4090-tps`` 3083, ``tune-8b-qlora-4090-tps`` 2413 tokens/s), reported,
not fitted: gpuplan's eager step gives 2,279 (-26%; 1,595 with the earlier targets) and 1,535 (-36%;
1,567 before bitsandbytes' dequantization was timed) tokens/s. 3083 tokens/s of
~200 TFLOP per 4096-token step (forward, recompute, input-gradient backward) would be ~150 TFLOP/s,
91% of the 4090's dense bf16 peak: compiled kernels and fusion, which the eager model does not see.
"""

from __future__ import annotations

import pytest

from gpuplan.estimate import estimate
from gpuplan.units import GIB
from gpuplan.workload import Workload

MEASURED_TOLERANCE = 0.15
TORCHTUNE_FLAGS = dict(mode="train", batch_size=2, seq_len=2048, precision="bf16", checkpointing="full",
                       optimizer="adamw", optimizer_impl="fused", lora_rank=8, lora_alpha=16.0, lora_dropout=0.0,
                       loss="chunked-ce")
LORA_TARGETS = ("q_proj", "v_proj")
QLORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TORCHTUNE_CLI = {
    "lora": "gpuplan estimate llama-3.1-8b --gpu RTX-4090 --mode train --batch-size 2 --seq-len 2048 "
            "--precision bf16 --checkpointing full --optimizer adamw --optimizer-impl fused --peft lora "
            "--lora-rank 8 --lora-alpha 16 --lora-dropout 0 --loss chunked-ce "
            "--lora-targets q_proj,v_proj",
    "qlora": "gpuplan estimate llama-3.1-8b --gpu RTX-4090 --mode train --batch-size 2 --seq-len 2048 "
             "--precision bf16 --checkpointing full --optimizer adamw --optimizer-impl fused --peft qlora "
             "--lora-rank 8 --lora-alpha 16 --lora-dropout 0 --loss chunked-ce "
             "--lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
}
"""The same settings as the flags a user types (the workloads below are built from TORCHTUNE_FLAGS)."""
THROUGHPUT_REPORTED_TOLERANCE = 0.55
"""Not acceptance: the eager step's measured errors are -26% / -35% (module docstring); this
bound only notices when they move."""


@pytest.mark.parametrize(("row", "peft", "targets", "published_gib"), [
    ("tune-8b-lora-4090-mem", "lora", LORA_TARGETS, 16.2),
    ("tune-8b-qlora-4090-mem", "qlora", QLORA_TARGETS, 7.4),
])
@pytest.mark.xfail(strict=True, reason="eager chunked loss (fp32 log-probabilities saved per chunk; torchtune "
                                       "compiles it), allocator slack, and a published LoRA figure below the "
                                       "recipe's tensor floor (module docstring): +32% / +58% measured")
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


@pytest.mark.parametrize(("row", "peft", "targets", "published_tokens_per_s"), [
    ("tune-8b-lora-4090-tps", "lora", LORA_TARGETS, 3083.0),
    ("tune-8b-qlora-4090-tps", "qlora", QLORA_TARGETS, 2413.0),
])
@pytest.mark.slow
def test_torchtune_throughput_reported(row: str, peft: str, targets: tuple[str, ...],
                                       published_tokens_per_s: float) -> None:
    """A reported check (module docstring): eager step time vs torchtune's compiled run."""
    workload = Workload(**TORCHTUNE_FLAGS, peft=peft, lora_targets=targets)  # type: ignore[arg-type]
    est = estimate("llama-3.1-8b", gpu="RTX-4090", workload=workload)
    assert est.throughput is not None and est.throughput["unit"] == "tokens/s"
    error = est.throughput["value"] / published_tokens_per_s - 1
    assert abs(error) <= THROUGHPUT_REPORTED_TOLERANCE, f"{row}: {est.throughput['value']:.0f} tokens/s ({error:+.1%})"


def test_cli_flags_are_the_workloads() -> None:
    """TORCHTUNE_CLI parses to exactly the workloads the published-row tests estimate."""
    import shlex

    from gpuplan.cli._workload import workload_from_args
    from gpuplan.cli.main import build_parser

    for peft, targets in (("lora", LORA_TARGETS), ("qlora", QLORA_TARGETS)):
        args = build_parser("estimate").parse_args(shlex.split(TORCHTUNE_CLI[peft])[1:])
        expected = Workload(**TORCHTUNE_FLAGS, peft=peft, lora_targets=targets)  # type: ignore[arg-type]
        assert workload_from_args(args) == expected
