"""PEFT adapters (LoRA, DoRA, QLoRA) traced on fake tensors vs the same step run for real on the CPU.

Issue 11 acceptance: a real CPU run of a tiny Llama with the real ``peft`` library's LoRA and DoRA
adapters, tracked storage by storage (the exact-accounting harness of test_exact_accounting.py),
equals the fake trace within 1%; the fake side is traced at 3 and 2 blocks and scaled to 5, so
these cases also check that block scaling finds the repeated blocks inside PEFT's wrapper. The
adapters' parameter count is ``peft``'s own ``get_nb_trainable_parameters()`` exactly.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuplan.errors import ConfigError
from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.peft import linear_module_names
from gpuplan.trace.runner import StepRunner, Target
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_LLAMA

TOLERANCE = 0.01
SOURCE = HFConfigSource("tiny-llama", TINY_LLAMA)
ALL_LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

CASES = {
    # PEFT's defaults: r=8 on q_proj, v_proj (its table for llama), no dropout module (parameter counts
    # only: the exact-accounting cases below cover LoRA with more targets, dropout and modules_to_save)
    "lora-default": Workload(batch_size=2, seq_len=32, peft="lora"),
    # dropout > 0 saves PEFT's dropout output per adapter; modules_to_save copies lm_head
    "lora-dropout-all-linear-lm_head": Workload(batch_size=2, seq_len=32, peft="lora", lora_dropout=0.1,
                                                lora_targets=("all-linear",), train_modules=("lm_head",)),
    # DoRA's weight norm under autocast, PEFT-style checkpointing (non-reentrant, inputs require grad)
    "dora-amp-checkpointing": Workload(batch_size=2, seq_len=32, peft="dora", lora_targets=ALL_LLAMA_LINEAR,
                                       precision="amp-bf16", checkpointing="full"),
    # QLoRA: NF4 stand-in layers (trace/quantized.py) wrapped by PEFT, bf16 model
    "qlora-bf16-checkpointing": Workload(batch_size=2, seq_len=32, peft="qlora", precision="bf16",
                                         checkpointing="full", lora_rank=4),
}


def _real_model(workload: Workload) -> torch.nn.Module:
    return StepRunner(SOURCE, workload, Target(cuda=False), fake=False).build_model()


@pytest.mark.parametrize("case", [c for c in CASES if c != "lora-default"])
@pytest.mark.slow
def test_fake_trace_matches_real_cpu_run(case: str) -> None:
    workload = CASES[case]
    real = trace_step(SOURCE, workload, cuda=False, fake=False)
    fake = trace_step(SOURCE, workload, cuda=False, fake=True)
    assert fake.block_counts == {"num_hidden_layers": 5}, fake.notes  # scaled, not traced whole
    error = fake.tensor_peak_bytes / real.tensor_peak_bytes - 1
    assert abs(error) <= TOLERANCE, (f"{case}: fake {fake.tensor_peak_bytes} vs real {real.tensor_peak_bytes} "
                                     f"({error:+.2%}); peaks in {fake.peak_phase} / {real.peak_phase}")
    assert fake.params_count == real.params_count
    # the frozen base holds no gradients and no optimizer state: both are the trainable parameters'
    trainable = [p for p in _real_model(workload).parameters() if p.requires_grad]
    trainable_bytes = sum(p.numel() * p.element_size() for p in trainable)
    assert fake.gradient_bytes == real.gradient_bytes == trainable_bytes
    moments = 2 * sum(p.numel() * p.element_size() for p in trainable)  # AdamW's exp_avg, exp_avg_sq
    assert moments <= fake.optimizer_state_bytes <= moments + 8 * len(trainable)  # + CPU step counters


@pytest.mark.parametrize("case", ["lora-default", "lora-dropout-all-linear-lm_head", "dora-amp-checkpointing"])
def test_adapter_parameters_are_peft_own_count(case: str) -> None:
    """gpuplan's count (full depth, scaled from the traced blocks) equals peft's on a real model."""
    workload = CASES[case]
    expected = _real_model(workload).get_nb_trainable_parameters()  # type: ignore[operator]
    step = trace_step(SOURCE, workload)
    assert (step.trainable_params_count, step.params_count) == expected
    # LoRA on q_proj/v_proj of 5 blocks: r·(in + out) per layer (hidden 64, 2 of 4 heads of 16 for v)
    if case == "lora-default":
        assert expected[0] == 5 * 8 * ((64 + 64) + (64 + 32))


def test_adapters_are_fp32_on_a_bf16_base_and_the_base_is_frozen() -> None:
    """peft's autocast_adapter_dtype: adapters in float32 over a bf16 base, on fake tensors as for real."""
    workload = Workload(batch_size=1, seq_len=8, peft="dora", precision="bf16")
    with torch.device("cpu"), FakeTensorMode():
        model = StepRunner(SOURCE, workload, Target(), fake=True, layers={"num_hidden_layers": 2}).build_model()
        named = dict(model.named_parameters())
    trainable = {n: p.dtype for n, p in named.items() if p.requires_grad}
    assert trainable and set(trainable.values()) == {torch.float32}
    assert all(("lora_" in n) for n in trainable), sorted(trainable)  # lora_A/B and DoRA's lora_magnitude_vector
    assert {p.dtype for n, p in named.items() if not p.requires_grad} == {torch.bfloat16}
    assert all(n.startswith("base_model.model.") for n in named)


def test_lora_dropout_is_peft_dropout_module() -> None:
    with torch.device("cpu"), FakeTensorMode():
        model = StepRunner(SOURCE, Workload(peft="lora", lora_dropout=0.25), Target(), fake=True,
                           layers={"num_hidden_layers": 2}).build_model()
        dropouts = [m for n, m in model.named_modules() if n.endswith("lora_dropout.default")]
    assert dropouts and all(isinstance(m, torch.nn.Dropout) and m.p == 0.25 for m in dropouts)


def test_targets_matching_no_module_list_the_linear_names() -> None:
    with pytest.raises(ConfigError) as info:
        trace_step(SOURCE, Workload(batch_size=1, seq_len=8, peft="lora", lora_targets=("qkv",)))
    message = str(info.value)
    assert "\n" not in message and "--lora-targets qkv matches no linear module" in message
    for name in ALL_LLAMA_LINEAR:
        assert name in message
    with torch.device("cpu"), FakeTensorMode():
        base = HFConfigSource("tiny-llama", TINY_LLAMA).build(Workload(), {"num_hidden_layers": 1})
    assert linear_module_names(base) == [*ALL_LLAMA_LINEAR, "lm_head"]


def test_dora_on_a_quantized_base_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError, match=r"--peft dora on a quantized base \(QDoRA\) .* is not modelled"):
        trace_step(SOURCE, Workload(batch_size=1, seq_len=8, peft="dora", load_in="4bit"))


def test_unknown_train_module_is_one_line() -> None:
    with pytest.raises(ConfigError, match="--train-modules head matches no module"):
        trace_step(SOURCE, Workload(batch_size=1, seq_len=8, peft="lora", train_modules=("head",)))


@pytest.mark.parametrize(("fields", "needle"), [
    ({"lora_rank": 0}, "LoRA rank 0 is out of range"),
    ({"lora_rank": -4}, "LoRA rank -4 is out of range"),
    ({"lora_dropout": 1.0}, "LoRA dropout 1.0 is out of range"),
    ({"lora_alpha": 0.0}, "LoRA alpha 0.0 must be above 0"),
    ({"peft": "ia3"}, "unknown PEFT method 'ia3'"),
    ({"lora_targets": ("all-linear", "q_proj")}, "'all-linear' stands alone"),
])
def test_bad_peft_settings_are_one_line(fields: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        Workload(**{"peft": "lora", **fields})  # type: ignore[arg-type]
    assert needle in str(info.value) and "\n" not in str(info.value)


@settings(max_examples=60, deadline=None)
@given(rank=st.integers(min_value=-5, max_value=1 << 17), dropout=st.floats(allow_nan=True, allow_infinity=True),
       alpha=st.floats(allow_nan=True, allow_infinity=True))
def test_peft_settings_are_valid_or_one_line(rank: int, dropout: float, alpha: float) -> None:
    """Whatever numbers arrive, a Workload either holds them inside PEFT's ranges or refuses them
    in one line naming the value (never another exception)."""
    try:
        w = Workload(peft="lora", lora_rank=rank, lora_dropout=dropout, lora_alpha=alpha)
    except ConfigError as exc:
        assert "\n" not in str(exc) and "LoRA" in str(exc)
    else:
        assert 1 <= w.lora_rank <= 1 << 16 and 0 <= w.lora_dropout < 1 and w.lora_alpha > 0
