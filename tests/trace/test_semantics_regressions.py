"""Trace semantics that were wrong or crashed on main (issue 9, items 5, 6, 12, 14, 15, 16, 17).

Each test compares with an analytic count, a real CPU run of the same step, or the trace's own
components — never with a number typed in. Each fails on commit 67ecafa, except the controls that
pin what did not change (a dense convolution, bf16 experts, a table traced whole).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuplan.models.sources import FactorySource, HFConfigSource
from gpuplan.trace.cuda_semantics import AttentionPolicy
from gpuplan.trace.step import trace_step
from gpuplan.trace.tracker import Recorder, RecordingMode
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_GPT2, TINY_LLAMA

MODELS = Path(__file__).parent / "semantics_models.py"

# A DeepSeek-V3 (MLA attention: query/key head dim 16 + 8, value head dim 16; MoE MLP) small enough
# to trace in seconds.
TINY_DEEPSEEK_V3: dict[str, Any] = dict(
    model_type="deepseek_v3", hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
    first_k_dense_replace=1, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1, n_group=1,
    topk_group=1, num_attention_heads=4, num_key_value_heads=4, q_lora_rank=32, kv_lora_rank=16,
    qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16, vocab_size=300, max_position_embeddings=256)
TINY_MIXTRAL: dict[str, Any] = dict(
    model_type="mixtral", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, vocab_size=300, max_position_embeddings=256)


# -- 6. grouped and depthwise convolutions -------------------------------------------------------
def _conv_flops(make: Callable[[], nn.Module], x_shape: tuple[int, ...]) -> dict[str, int]:
    """FLOPs the recorder counts for one forward and backward of a convolution (input needs a gradient)."""
    with FakeTensorMode():
        module = make()
        x = torch.randn(*x_shape, requires_grad=True)
        rec = Recorder()
        with RecordingMode(rec):
            module(x).sum().backward()
    return {op.name.split(".")[1]: op.flops for op in rec.trace.ops if op.op_class == "conv"}


@pytest.mark.parametrize(("cin", "cout", "groups", "transposed"), [
    (32, 32, 32, False),   # depthwise (EfficientNet, ConvNeXt)
    (32, 64, 4, False),    # grouped (ResNeXt)
    (16, 16, 1, False),    # dense: unchanged
    (32, 64, 4, True),     # grouped transposed
])
def test_conv_flops_match_the_analytic_count(cin: int, cout: int, groups: int, transposed: bool) -> None:
    n, k, h = 2, 3, 16
    def conv() -> nn.Module:
        return (nn.ConvTranspose2d(cin, cout, k, stride=2, groups=groups) if transposed
                else nn.Conv2d(cin, cout, k, padding=1, groups=groups))

    flops = _conv_flops(conv, (n, cin, h, h))
    # one pass = 2·N·Cout·(Cin/groups)·K·K·(output positions); a transposed convolution runs the
    # same multiply-adds over its input positions. Backward: input gradient + weight gradient.
    positions = h * h
    one_pass = 2 * n * cout * (cin // groups) * k * k * positions
    assert flops["convolution"] == one_pass
    assert flops["convolution_backward"] == 2 * one_pass


# -- 15. Adafactor ---------------------------------------------------------------------------------
def _adafactor_state_bytes_of_a_real_run() -> int:
    """State bytes torch.optim.Adafactor keeps after real steps on the fixture MLP (step counters
    excluded: torch keeps them on the host)."""
    from tests.fixtures.tiny_models import mlp, mlp_inputs

    model = mlp()
    opt = torch.optim.Adafactor(model.parameters(), lr=1e-2, foreach=True)
    for _ in range(2):
        model(*mlp_inputs(16)).sum().backward()
        opt.step()
        opt.zero_grad()
    return sum(v.untyped_storage().nbytes() for state in opt.state.values() for k, v in state.items()
               if isinstance(v, torch.Tensor) and k != "step")


def test_adafactor_traces_with_the_factored_state_a_real_run_keeps() -> None:
    source = FactorySource(f"{Path(__file__).parent.parent / 'fixtures' / 'tiny_models.py'}:mlp,mlp_inputs")
    step = trace_step(source, Workload(mode="train", batch_size=16, optimizer="adafactor"))
    real_bytes = _adafactor_state_bytes_of_a_real_run()
    # Factored second moments: rows + columns for each matrix, the full vector for each bias.
    from tests.fixtures.tiny_models import mlp

    factored = sum(4 * (p.shape[0] + p.shape[1]) if p.dim() == 2 else 4 * p.numel() for p in mlp().parameters())
    assert real_bytes == factored
    assert step.optimizer_state_bytes == real_bytes


def test_adafactor_fake_trace_matches_a_real_cpu_run() -> None:
    source = FactorySource(f"{Path(__file__).parent.parent / 'fixtures' / 'tiny_models.py'}:mlp,mlp_inputs")
    workload = Workload(mode="train", batch_size=16, optimizer="adafactor")
    real = trace_step(source, workload, cuda=False, fake=False)
    fake = trace_step(source, workload, cuda=False, fake=True)
    assert fake.tensor_peak_bytes == real.tensor_peak_bytes
    assert fake.optimizer_state_bytes == real.optimizer_state_bytes


# -- 5. attention: nn.MultiheadAttention and MLA ------------------------------------------------
def _attention_ops(step: Any) -> list[Any]:
    return [op for op in step.ops if op.op_class == "attention"]


def test_multihead_attention_gets_cudas_kernel_autocast_and_flops() -> None:
    source = FactorySource(f"{MODELS}:tiny_vit")
    step = trace_step(source, Workload(mode="train", batch_size=2, image_size=32, precision="amp-bf16"))
    layers, heads, head_dim = 2, 2, 32
    tokens = (32 // 8) ** 2 + 1  # patches + class token
    assert step.attention_backends == {"flash": layers}
    forward = [op for op in _attention_ops(step) if op.phase == "forward"]
    # QKᵀ and PV: 2 · (2·B·H·L·L·d) per layer (torch.utils.flop_counter's SDPA formula)
    assert sum(op.flops for op in forward) == layers * 4 * 2 * heads * tokens * tokens * head_dim
    # the projections inside nn.MultiheadAttention run in bf16 under CUDA autocast
    projections = [op for op in step.ops if op.phase == "forward" and op.op_class == "matmul"
                   and "self_attention" in op.module]
    assert projections and {op.dtype for op in projections} == {"bfloat16"}


def test_multihead_attention_in_fp32_takes_the_memory_efficient_kernel() -> None:
    step = trace_step(FactorySource(f"{MODELS}:tiny_vit"), Workload(mode="train", batch_size=2, image_size=32))
    assert step.attention_backends == {"efficient": 2}


def test_flash_is_refused_when_value_heads_differ_from_query_heads() -> None:
    """aten sdp_utils: flash needs one head dim for q, k and v; memory-efficient needs q = k."""
    q = torch.empty(1, 4, 8, 192, dtype=torch.bfloat16, device="meta")
    v = torch.empty(1, 4, 8, 128, dtype=torch.bfloat16, device="meta")
    policy = AttentionPolicy("auto", (9, 0))
    assert policy.choose(q, q, v, None, False) == "efficient"
    assert AttentionPolicy("flash", (9, 0)).choose(q, q, v, None, False) == "efficient"
    assert policy.choose(q, q, q, None, False) == "flash"


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["auto", "flash"])
def test_mla_deepseek_v3_traces_with_attention(attention: str) -> None:
    source = HFConfigSource("tiny-deepseek-v3", TINY_DEEPSEEK_V3)
    step = trace_step(source, Workload(mode="train", batch_size=2, seq_len=32, precision="bf16",
                                       attention=attention))  # type: ignore[arg-type]
    assert step.attention_backends == {"efficient": TINY_DEEPSEEK_V3["num_hidden_layers"]}


# -- 16. MoE experts in every precision -------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(("precision", "expert_dtype"), [
    ("fp32", "float32"), ("tf32", "float32"), ("amp-bf16", "float32"), ("amp-fp16", "float32"),
    ("bf16", "bfloat16"), ("fp16", "float16"),
])
def test_moe_experts_trace_in_every_precision(precision: str, expert_dtype: str) -> None:
    """transformers' default ``grouped_mm`` experts cast the tokens to the weights' dtype and call
    ``_grouped_mm``, which autocast does not touch: fp32 experts under AMP."""
    source = HFConfigSource("tiny-mixtral", TINY_MIXTRAL)
    step = trace_step(source, Workload(mode="train", batch_size=2, seq_len=16,
                                       precision=precision))  # type: ignore[arg-type]
    experts = [op for op in step.ops if "_grouped_mm" in op.name and op.phase == "forward"]
    assert experts and {op.dtype for op in experts} == {expert_dtype}
    assert all(op.flops > 0 for op in experts)


@pytest.mark.slow
def test_moe_fp32_fake_trace_matches_a_real_cpu_run() -> None:
    source = HFConfigSource("tiny-mixtral", TINY_MIXTRAL)
    workload = Workload(mode="train", batch_size=2, seq_len=16, optimizer="sgd")
    real = trace_step(source, workload, cuda=False, fake=False)
    fake = trace_step(source, workload, cuda=False, fake=True)
    assert fake.tensor_peak_bytes == real.tensor_peak_bytes


# -- 17. data-dependent shapes -------------------------------------------------------------------
def test_data_dependent_shapes_trace_at_the_worst_case_and_say_so() -> None:
    source = FactorySource(f"{MODELS}:masked_selection,masked_inputs")
    workload = Workload(mode="train", batch_size=4, optimizer="sgd")
    fake = trace_step(source, workload, cuda=False)
    real = trace_step(source, workload, cuda=False, fake=False)  # its masks select every element
    assert fake.tensor_peak_bytes == real.tensor_peak_bytes
    assert any("worst case" in note and "aten.nonzero" in note for note in fake.notes)


@pytest.mark.slow
def test_deberta_v2_sequence_classification_traces() -> None:
    config = dict(model_type="deberta-v2", hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                  num_attention_heads=4, vocab_size=300, max_position_embeddings=128, relative_attention=True,
                  pos_att_type=["p2c", "c2p"], position_buckets=32,
                  architectures=["DebertaV2ForSequenceClassification"])
    step = trace_step(HFConfigSource("tiny-deberta-v2", config), Workload(mode="train", batch_size=2, seq_len=32))
    assert step.tensor_peak_bytes > step.param_bytes
    assert any("worst case" in note for note in step.notes)


# -- 12. activation table vs the activation component ----------------------------------------------
@pytest.mark.parametrize("workload", [
    pytest.param(Workload(mode="generate", batch_size=8, seq_len=64, new_tokens=64), marks=pytest.mark.slow),
    pytest.param(Workload(mode="train", batch_size=2, seq_len=32), marks=pytest.mark.slow),
    Workload(mode="infer", batch_size=2, seq_len=32),
], ids=["generate", "train", "infer"])
def test_activation_table_is_taken_at_the_component_and_sums_to_it(workload: Workload) -> None:
    step = trace_step(HFConfigSource("tiny-llama", TINY_LLAMA), workload)
    table_bytes = sum(b for _, b in step.top_activation_modules)
    component = step.tensor_components["activations"]
    assert table_bytes <= component
    # every row is kept when there are at most 10 modules' worth: the table is the component,
    # to the rounding of each row to whole bytes
    if len(step.top_activation_modules) < 10:
        assert component - table_bytes < len(step.top_activation_modules)


def test_activation_table_of_a_whole_trace_is_exact() -> None:
    """Traced whole (no scaling), the table is the activation storages live at the peak."""
    step = trace_step(HFConfigSource("tiny-llama", TINY_LLAMA), Workload(mode="infer", batch_size=2, seq_len=32),
                      scale=False)
    rows = dict(step.top_activation_modules)
    assert sum(rows.values()) <= step.tensor_components["activations"]
    assert not any("*" in module for module in rows)


# -- 14. the training loop modelled ---------------------------------------------------------------------
@pytest.mark.slow
def test_modelled_loop_is_stated_with_the_output_bytes() -> None:
    batch, seq = 2, 32
    step = trace_step(HFConfigSource("tiny-gpt2", TINY_GPT2), Workload(mode="train", batch_size=batch, seq_len=seq))
    logits_bytes = batch * seq * TINY_GPT2["vocab_size"] * 4  # fp32 logits: the only output tensor
    notes = [n for n in step.notes if "output is released before backward" in n]
    assert len(notes) == 1
    assert f"{logits_bytes:,} bytes" in notes[0] and "gpuplan.simulate" in notes[0]


def test_holding_the_output_through_backward_costs_what_the_note_says() -> None:
    """A real CPU run of the loop that keeps ``out`` alive: its peak exceeds the modelled loop's by
    the note's bytes when the peak falls after the release (it does here: in backward)."""
    from tests.fixtures.tiny_models import mlp, mlp_inputs

    source = FactorySource(f"{Path(__file__).parent.parent / 'fixtures' / 'tiny_models.py'}:mlp,mlp_inputs")
    workload = Workload(mode="train", batch_size=512, optimizer="sgd")
    modelled = trace_step(source, workload, cuda=False, fake=False)
    held = _peak_holding_output(mlp(), mlp_inputs(512))
    released = _peak_holding_output(mlp(), mlp_inputs(512), hold=False)
    output_bytes = 512 * 10 * 4
    assert any(f"{output_bytes:,} bytes" in n for n in modelled.notes)
    assert held - released == output_bytes
    assert math.isfinite(held)


def _peak_holding_output(model: nn.Module, inputs: tuple[torch.Tensor, ...], *, hold: bool = True) -> int:
    """Peak live bytes of forward + mean loss + backward, recorded storage by storage."""
    rec = Recorder(record_ops=False)
    for p in model.parameters():
        rec.register(p, category="parameters")
    for t in inputs:
        rec.register(t, category="activations")
    with RecordingMode(rec):
        rec.phase = "forward"
        out = model(*inputs)
        loss = out.float().mean()
        if not hold:
            del out
        rec.phase = "backward"
        loss.backward()
    rec.close()
    return rec.trace.peak_bytes


@pytest.mark.slow
def test_adafactor_scales_like_the_model_traced_whole() -> None:
    """Adafactor's per-parameter temporaries belong to their parameter's block, so 3 and 2 traced
    blocks scale to the full depth instead of falling back to tracing every block."""
    source = HFConfigSource("tiny-llama", TINY_LLAMA)
    workload = Workload(mode="train", batch_size=2, seq_len=32, optimizer="adafactor")
    scaled = trace_step(source, workload)
    whole = trace_step(source, workload, scale=False)
    assert scaled.block_counts == {"num_hidden_layers": TINY_LLAMA["num_hidden_layers"]}
    assert (scaled.tensor_peak_bytes, scaled.optimizer_state_bytes, scaled.flops) == (
        whole.tensor_peak_bytes, whole.optimizer_state_bytes, whole.flops)


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_pure_16_bit_training_of_a_cnn_feeds_16_bit_images(precision: str) -> None:
    """``estimate resnet18 --precision fp16`` failed: the images were made in float32 and met fp16 weights. A
    training loop in pure 16 bits feeds ``x.half()``; the fake trace equals a real CPU run of that step."""
    source = FactorySource(f"{Path(__file__).parent.parent / 'fixtures' / 'tiny_models.py'}:small_cnn")
    workload = Workload(mode="train", batch_size=2, image_size=16, precision=precision, optimizer="sgd")
    fake = trace_step(source, workload, cuda=False, fake=True)
    real = trace_step(source, workload, cuda=False, fake=False)
    assert fake.tensor_peak_bytes == real.tensor_peak_bytes and fake.params_count == real.params_count
    # every saved tensor, the images included, in 2 bytes: half the fp32 step's activations (the 0-dim loss aside)
    fp32 = trace_step(source, workload.with_(precision="fp32"), cuda=False, fake=True)
    half, full = fake.tensor_components["activations"], fp32.tensor_components["activations"]
    assert abs(2 * half - full) <= 16, (half, full)
