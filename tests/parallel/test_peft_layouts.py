"""The planner's model-state bytes under PEFT (issue 11): ZeRO-1/2/3, FSDP2, DDP and Megatron on a
tiny Llama with LoRA / QLoRA.

Expected bytes are hand-derived from an independent count: the same Llama built by transformers on
the meta device and wrapped by the real ``peft`` library (``get_peft_model``, PEFT's default Llama
targets q_proj/v_proj, rank 8), its ``requires_grad`` parameters (T) and frozen ones (F) counted
here. What each engine keeps (sources):

* DeepSpeed ZeRO-1/2 builds its 16-bit groups, fp32 master partitions and optimizer state from
  ``requires_grad`` parameters only (deepspeed/runtime/zero/stage_1_and_2.py, ``trainable_parameters``
  → ``bit16_groups`` → ``single_partition_of_fp32_groups``); frozen weights stay replicated module
  weights, cast to the 16-bit dtype with the module (engine ``module.bfloat16()``). ZeRO-3 partitions
  every module parameter; its fp32 partitions are of the trainable groups only (stage3.py).
* FSDP2 (``fully_shard``) shards every parameter, frozen ones included, at the dtype it is stored in;
  DDP replicates them; both hold gradients and optimizer state only for what trains (the traced ones).
* Megatron keeps 16-bit weights, fp32 main grads, and builds its fp32 master + Adam state from
  ``requires_grad`` parameters (megatron/core/optimizer ``_get_param_groups``).

AdamW over PEFT's fp32 adapters: 8 bytes of moments per trainable parameter. Tolerance: 2 bytes per
figure (the planner's per-parameter averages times a count, truncated to int).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.parallel.evaluate import Context, RankMemory, memory
from gpuplan.parallel.layout import DDP, FSDP2, Layout, MegatronDDP, Sharding, Zero

# 3 blocks: the trace builds all of them, so the traced split is the whole model's
LLAMA3: dict[str, Any] = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, vocab_size=300,
                              max_position_embeddings=256)
# 8 blocks and a vocabulary whose embeddings outweigh the 3 traced blocks: the trace runs 3 and 2
# blocks and scales, so the planner's bytes per parameter must come from full-depth counts (a
# 3-block ratio sized every frozen weight like the 16-bit embeddings: issue 19, 405B QLoRA)
LLAMA8: dict[str, Any] = {**LLAMA3, "num_hidden_layers": 8, "vocab_size": 3000}
DP = 8
TOL = 2


def _independent_split(cfg: dict[str, Any] = LLAMA3) -> dict[str, int]:
    """T, F, the frozen block Linear weights (what QLoRA quantizes), buffers — counted on a meta
    model with the real peft wrapper, nothing of gpuplan's."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    with torch.device("meta"):
        base = LlamaForCausalLM(LlamaConfig(**cfg))
    linear = sum(m.weight.numel() for n, m in base.named_modules()
                 if isinstance(m, torch.nn.Linear) and not n.endswith("lm_head"))
    buffers = sum(b.numel() * b.element_size() for b in base.buffers())
    model = get_peft_model(base, LoraConfig(r=8, lora_alpha=8, task_type="CAUSAL_LM"))
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    return {"T": trainable, "F": frozen, "Q": linear, "buffers": buffers}


@pytest.fixture(scope="module")
def split() -> dict[str, int]:
    return _independent_split()


def _ctx(peft: str, cfg: dict[str, Any] = LLAMA3) -> Context:
    from gpuplan.estimate import make_workload
    from gpuplan.hardware import get_gpu
    from gpuplan.models.sources import HFConfigSource
    from gpuplan.parallel.profile import profile_model
    from gpuplan.parallel.topology import make_topology

    gpu = get_gpu("H100-SXM")
    w = make_workload(mode="train", batch_size=1, seq_len=16, precision="amp-bf16", peft=peft)
    prof = profile_model(HFConfigSource("tiny-llama", cfg, default_seq_len=16), w, gpu)
    return Context(prof, make_topology(gpu, DP), gpu.usable_memory_bytes, 0)


@pytest.fixture(scope="module")
def lora() -> Context:
    return _ctx("lora")


@pytest.fixture(scope="module")
def qlora() -> Context:
    return _ctx("qlora")


@pytest.fixture(scope="module")
def full() -> Context:
    return _ctx("none")


def _rank(ctx: Context, sharding: Sharding, dp: int = DP) -> RankMemory:
    layout = Layout(dp=dp, tp=1, pp=1, micro_batch_size=1, grad_accum=1, sharding=sharding)
    (rank,) = memory(ctx, layout)
    return rank


def _states(r: RankMemory) -> tuple[int, int, int]:
    return r.params_bytes, r.grads_bytes, r.optimizer_bytes


def _close(got: tuple[int, int, int], want: tuple[float, float, float]) -> bool:
    return all(abs(g - w) <= TOL for g, w in zip(got, want, strict=True))


def test_trace_carries_the_trainable_split(lora: Context, split: dict[str, int]) -> None:
    p = lora.profile
    assert p.params_count == split["T"] + split["F"]
    assert abs(p.trainable_fraction * p.params_count - split["T"]) < 1e-6
    # every frozen parameter of a LoRA base is floating point (fp32 under AMP): none packed
    assert abs(p.frozen_float_params_per_param * p.params_count - split["F"]) < 1e-6
    assert abs(p.frozen_float_bytes_per_param * p.params_count - 4 * split["F"]) < 1e-6
    assert p.frozen_packed_bytes_per_param == 0.0
    assert any("traced parameters train" in a for a in p.assumptions)


def test_lora_model_states_per_engine(lora: Context, split: dict[str, int]) -> None:
    t, f, buf = split["T"], split["F"], split["buffers"]
    n = t + f
    expected: dict[str, tuple[Sharding, tuple[float, float, float]]] = {
        # fp32 weights (AMP) and buffers replicated; fp32 grads and AdamW moments of the adapters
        "ddp": (DDP(), (4 * n + buf, 4 * t, 8 * t)),
        "fsdp2": (FSDP2(), ((4 * n + buf) / DP, 4 * t / DP, 8 * t / DP)),
        # 16-bit weights (frozen ones too); 16-bit grads of T; fp32 master + grad partition + moments of T
        "zero1": (Zero(1), (2 * n, 2 * t, 16 * t / DP)),
        "zero2": (Zero(2), (2 * n, 2 * t / DP, 16 * t / DP)),
        "zero3": (Zero(3), (2 * n / DP, 0, 16 * t / DP)),
        # 16-bit weights, fp32 main grads of T, fp32 master + moments of T
        "megatron": (MegatronDDP(), (2 * n, 4 * t, 12 * t)),
    }
    for name, (sharding, want) in expected.items():
        got = _states(_rank(lora, sharding))
        assert _close(got, want), f"{name}: {got} != {want}"


@pytest.mark.parametrize("depth", ["traced whole", "scaled from 3 and 2 blocks"])
def test_qlora_shards_the_packed_base(qlora: Context, split: dict[str, int], depth: str) -> None:
    # NF4 packs two weights per byte (bitsandbytes); the other frozen weights (embeddings, head,
    # norms) are fp32 under AMP and recast to 16 bits by DeepSpeed
    if depth != "traced whole":
        qlora, split = _ctx("qlora", LLAMA8), _independent_split(LLAMA8)
    t, q = split["T"], split["Q"]
    frozen_float = split["F"] - q
    frozen = 2 * frozen_float + q / 2
    for stage, want in (
        (1, (2 * t + frozen, 2 * t, 16 * t / DP)),
        (3, ((2 * t + frozen) / DP, 0, 16 * t / DP)),
    ):
        got = _states(_rank(qlora, Zero(stage)))
        assert _close(got, want), f"zero{stage}: {got} != {want}"


def test_without_peft_the_full_model_formulas_hold(full: Context) -> None:
    # regression: nothing frozen, so ZeRO keeps 2 + 2 + 16 bytes per parameter (ZeRO paper, Table 1
    # with K = 12 + DeepSpeed's fp32 gradient partition) exactly as before the split existed
    p = full.profile
    assert (p.trainable_fraction, p.frozen_float_params_per_param, p.frozen_packed_bytes_per_param) == (1.0, 0.0, 0.0)
    n = p.params_count
    assert _close(_states(_rank(full, Zero(1))), (2 * n, 2 * n, 16 * n / DP))
    assert _close(_states(_rank(full, Zero(3))), (2 * n / DP, 0, 16 * n / DP))
    assert _close(_states(_rank(full, MegatronDDP())), (2 * n, 4 * n, (p.param_bytes_per_param + 8) * n))


SHARDINGS: list[Sharding] = [DDP(), Zero(1), Zero(2), Zero(3)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(a=st.integers(0, 3), b=st.integers(0, 3), dp=st.sampled_from([1, 2, 4, 8, 16, 64]),
       more=st.sampled_from([1, 2, 4, 8]), peft=st.sampled_from(["lora", "qlora"]))
def test_more_sharding_never_more_per_gpu(
    lora: Context, qlora: Context, a: int, b: int, dp: int, more: int, peft: str
) -> None:
    ctx = lora if peft == "lora" else qlora
    lo, hi = sorted((a, b))

    def total(s: Sharding, d: int) -> int:
        return sum(_states(_rank(ctx, s, d)))

    # a higher ZeRO stage, or more data-parallel ranks at the same stage, never holds more
    # model-state bytes per GPU; FSDP2 never more than DDP
    zero_of = {0: DDP(), 1: Zero(1), 2: Zero(2), 3: Zero(3)}
    if lo >= 1:
        assert total(zero_of[hi], dp) <= total(zero_of[lo], dp) + TOL
    assert total(SHARDINGS[b], dp * more) <= total(SHARDINGS[b], dp) + TOL
    assert total(FSDP2(), dp) <= total(DDP(), dp) + TOL


def test_plan_cli_qlora_json(tmp_path: Path, split: dict[str, int]) -> None:
    from gpuplan.cli.main import main

    (tmp_path / "config.json").write_text(json.dumps(LLAMA3))
    out, err = io.StringIO(), io.StringIO()
    argv = ["plan", str(tmp_path / "config.json"), "--gpus", str(DP), "--gpu", "H100-SXM", "--dp", str(DP),
            "--tp", "1", "--pp", "1", "--zero", "3", "--peft", "qlora", "--seq-len", "16",
            "--precision", "amp-bf16", "--emit", "deepspeed", "--json", "--no-cache"]
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    assert code == 0, err.getvalue()[-1000:]
    result = json.loads(out.getvalue())
    assert result["workload"]["peft"] == "qlora" and result["parallelism"]["zero"] == 3
    (rank,) = result["ranks"]
    t, q = split["T"], split["Q"]
    params = (2 * t + 2 * (split["F"] - q) + q / 2) / DP
    assert abs(rank["parameters"] - params) <= TOL
    assert abs(rank["optimizer_state"] - 16 * t / DP) <= TOL and rank["gradients"] == 0
    assert any("traced parameters train" in a for a in result["assumptions"])
    # ZeRO-3 shards floating-point storages only: the emitted config says how the 4-bit base must load
    assert result["emit"]["engine"] == "deepspeed"
    assert "bnb_4bit_quant_storage" in result["emit"]["note"]


def test_emit_note_only_where_the_packed_base_is_sharded() -> None:
    from gpuplan.estimate import make_workload
    from gpuplan.parallel.emit import layout_engine_note

    def note(sharding: Sharding, peft: str) -> str | None:
        lay = Layout(dp=DP, tp=1, pp=1, micro_batch_size=1, grad_accum=1, sharding=sharding)
        return layout_engine_note(lay, "accelerate", make_workload(mode="train", precision="amp-bf16", peft=peft))

    assert "FSDP2" in (note(FSDP2(), "qlora") or "")
    assert note(Zero(2), "qlora") is None  # ZeRO-1/2 replicate the frozen base: nothing to shard
    assert note(FSDP2(), "lora") is None
