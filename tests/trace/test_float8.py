"""FP8 training (``--precision fp8``, trace/float8.py): torchao's Float8Linear on fake tensors vs a real
torchao float8 run on the CPU (torch._scaled_mm runs on the CPU), its three fp8 GEMMs per layer, and the
refusal on GPUs without FP8 tensor cores."""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from pathlib import Path

import pytest

from gpuplan.cli.main import main
from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_LLAMA

pytest.importorskip("torchao.float8")

TOLERANCE = 0.01  # the exact-accounting harness' bound (tests/trace/test_exact_accounting.py)
FP8 = Workload(mode="train", batch_size=2, seq_len=32, precision="fp8")
LINEARS_PER_BLOCK = 7  # q, k, v, o, gate, up, down: every side of TINY_LLAMA's is a multiple of 16


def _source() -> HFConfigSource:
    return HFConfigSource("tiny-llama", TINY_LLAMA)


@pytest.mark.slow
def test_fake_trace_matches_a_real_torchao_float8_cpu_run() -> None:
    real = trace_step(_source(), FP8, cuda=False, fake=False)
    fake = trace_step(_source(), FP8, cuda=False, fake=True)
    error = fake.tensor_peak_bytes / real.tensor_peak_bytes - 1
    assert abs(error) <= TOLERANCE, f"fake {fake.tensor_peak_bytes} vs real {real.tensor_peak_bytes} ({error:+.2%})"
    assert fake.params_count == real.params_count


@pytest.mark.slow
def test_three_fp8_gemms_per_linear_at_the_fp8_rate_and_bf16_state() -> None:
    """torchao float8_linear.py: forward input(e4m3) @ weight(e4m3); backward grad(e5m2) @ weight(e4m3) and
    grad(e5m2)ᵀ @ input(e4m3). The output head stays bf16. Parameters, gradients and AdamW state are bf16."""
    step = trace_step(_source(), FP8, scale=False)
    layers = TINY_LLAMA["num_hidden_layers"] * LINEARS_PER_BLOCK
    gemms = Counter((op.phase, op.dtype) for op in step.ops if op.op_class == "matmul" and "mm" in op.name)
    assert gemms[("forward", "float8_e4m3fn")] == layers
    assert gemms[("backward", "float8_e5m2")] == 2 * layers
    assert gemms[("forward", "bfloat16")] == 1  # lm_head
    # the fp8 GEMMs take the catalog's dense fp8 rate: the recorder reports Float8TrainingTensor's fp8 payload
    from gpuplan.hardware import resolve_gpu
    from gpuplan.perf.roofline import rate_key

    h100 = resolve_gpu("H100-SXM")
    assert h100 is not None
    fp8_gemms = [op for op in step.ops if op.op_class == "matmul" and op.dtype.startswith("float8")]
    assert {rate_key(op, "fp8", h100) for op in fp8_gemms} == {("fp8", True)}
    from transformers import LlamaConfig, LlamaForCausalLM

    buffers = sum(b.numel() * b.element_size() for b in LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)).buffers())
    params = step.params_count
    assert step.tensor_components["parameters"] == 2 * params + buffers  # buffers: the fp32 rotary tables
    assert step.tensor_components["optimizer_state"] == 2 * 2 * params


def _estimate(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", *argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def tiny_llama(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    return tmp_path / "config.json"


def test_fp8_on_ampere_is_refused_in_one_line(tiny_llama: Path) -> None:
    code, out, err = _estimate(str(tiny_llama), "--precision", "fp8", "--gpu", "A100-80GB-SXM")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "no FP8 tensor cores (compute capability 8.0" in err


@pytest.mark.slow
def test_fp8_on_hopper_is_estimated_with_a_step_time(tiny_llama: Path) -> None:
    """The estimate runs end to end with a step time (the GEMMs take the fp8 rate: see the test above)."""
    code, out, err = _estimate(str(tiny_llama), "--precision", "fp8", "--gpu", "H100-SXM", "--batch-size", "2",
                               "--seq-len", "32", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["workload"]["precision"] == "fp8"
    assert result["step_time_s"] > 0
    assert any("torchao Float8Linear" in a for a in result["assumptions"])


def test_fp8_outside_training_is_refused_in_one_line_pointing_to_weight_quant(tiny_llama: Path) -> None:
    """torchao's Float8Linear is its training API (fp8 inference is ``quantize_`` with fp8 weights stored
    ahead of time): --precision fp8 in generate/infer points to --weight-quant fp8 instead of costing a
    training-time weight cast on every decode step (issue 17: that decoded 13× slower than bf16)."""
    for mode in ("generate", "infer"):
        code, out, err = _estimate(str(tiny_llama), "--precision", "fp8", "--mode", mode, "--gpu", "H100-SXM")
        assert code == 2 and out == ""
        assert len(err.strip().splitlines()) == 1 and "--weight-quant fp8" in err and mode in err


def test_cast_chains_cost_as_compiled_two_kernels_per_cast() -> None:
    """Each torchao cast (abs → amax → upcast → scale → clamp → fp8, as traced eagerly) costs what
    torch.compile runs (perf/float8_cast.py): the bf16 tensor read twice and 1 byte per element written,
    2 kernels; nothing else in the chain has a kernel. Costed eagerly the casts made fp8 slower than bf16."""
    from gpuplan.hardware import resolve_gpu
    from gpuplan.perf.efficiency import efficiency_for
    from gpuplan.perf.float8_cast import cast_op_time, float8_modules
    from gpuplan.perf.roofline import op_time
    from gpuplan.perf.step_time import step_time

    step = trace_step(_source(), FP8, scale=False)
    h100 = resolve_gpu("H100-SXM")
    assert h100 is not None
    eff = efficiency_for(h100)
    mods = float8_modules(step.ops)
    assert len({m for m, _ in mods}) == TINY_LLAMA["num_hidden_layers"] * LINEARS_PER_BLOCK
    casts = [op for op in step.ops if (op.module, op.block) in mods and op.name.split(".")[1] == "abs"]
    # forward: input and weight; backward: grad_output for each of its two GEMMs, weight and input
    # recast (torchao float8_linear.py, tensorwise; no recompute here)
    assert sum(op.count for op in casts) == 6 * len({m for m, _ in mods})
    bw = h100.memory_bandwidth_bytes_per_s * eff.bandwidth
    compiled = eager = 0.0
    for op in step.ops:
        t = cast_op_time(op, mods, h100, eff)
        if t is not None:
            compiled += t.kernel_s * op.count
            eager += op_time(op, h100, "fp8", eff).kernel_s * op.count
    expected = sum(2.5 * op.bytes_read * op.count for op in casts) / bw
    assert compiled == pytest.approx(expected, rel=1e-9)
    assert eager > 4 * compiled  # the eager chain moves ~33 bytes per bf16 element, the compiled one 5
    st = step_time(step, h100, FP8)
    assert any("torch.compile" in a for a in fp8_notes_of(FP8))
    assert st.total_s > 0


def fp8_notes_of(workload: Workload) -> list[str]:
    from gpuplan.trace.float8 import fp8_notes

    return fp8_notes(workload)


GEMM_BOUND_LLAMA = {**TINY_LLAMA, "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                    "num_key_value_heads": 8, "num_hidden_layers": 2, "vocab_size": 32000}
"""Llama-3-8B's block shapes (2 layers): GEMMs dominate the step at 4k tokens."""


@pytest.mark.slow
def test_fp8_training_is_faster_than_bf16_where_gemms_dominate() -> None:
    """torchtitan docs/performance.md Table 1 (Llama 3.1 8B, 8×H100, compiled): float8 6,667 → 8,532
    tokens/s/GPU (+28%); torchao's training docs: up to 1.25× at 8 GPU / 8B. gpuplan's bf16 step is eager
    (its memory-bound ops unfused), so the speedup is smaller, but it must be one: the fp8 GEMMs run at
    twice the rate and the casts cost what the compiled kernels move."""
    from gpuplan.hardware import resolve_gpu
    from gpuplan.perf.step_time import step_time

    h100 = resolve_gpu("H100-SXM")
    assert h100 is not None
    src = HFConfigSource("llama-8b-2l", GEMM_BOUND_LLAMA)
    times = {}
    for precision in ("bf16", "fp8"):
        work = Workload(mode="train", batch_size=1, seq_len=4096, precision=precision)
        times[precision] = step_time(trace_step(src, work), h100, work).total_s
    speedup = times["bf16"] / times["fp8"]
    assert 1.05 < speedup < 1.6, times
