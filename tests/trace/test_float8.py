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
