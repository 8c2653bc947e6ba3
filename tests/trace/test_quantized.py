"""Quantized base weights in the traced step (trace/quantized.py): exact bytes, the kernels' temporaries,
fake trace == real CPU run, PEFT wraps the stand-ins (QLoRA), and one-line refusals."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from gpuplan.cli.main import main
from gpuplan.memory.weight_quant import layer_bytes, weight_format
from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.quantized import QuantizedLinear, quantize_linears
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_LLAMA

TOLERANCE = 0.01  # the exact-accounting harness' bound (tests/trace/test_exact_accounting.py)
GPTQ_CONFIG = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False}


def _llama(quantization: dict[str, Any] | None = None) -> HFConfigSource:
    config = dict(TINY_LLAMA, **({"quantization_config": quantization} if quantization else {}))
    return HFConfigSource("tiny-llama", config)


def _linear_shapes() -> tuple[list[tuple[int, int]], int, int]:
    """(out, in) of every linear layer but lm_head, their element count, and every other parameter's count,
    from the real transformers model (``_buffer_bytes``: its buffers, rotary tables in fp32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA))
    shapes = [(m.out_features, m.in_features) for n, m in model.named_modules()
              if isinstance(m, torch.nn.Linear) and n != "lm_head"]
    quantized = sum(o * i for o, i in shapes)
    total = sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())
    return shapes, quantized, total - quantized


def _buffer_bytes() -> int:
    from transformers import LlamaConfig, LlamaForCausalLM

    return sum(b.numel() * b.element_size() for b in LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)).buffers())


CASES = [
    (None, Workload(mode="train", batch_size=2, seq_len=32, precision="bf16", load_in="8bit", peft="lora")),
    (None, Workload(mode="infer", batch_size=2, seq_len=32, precision="bf16", load_in="4bit")),
    (None, Workload(mode="infer", batch_size=2, seq_len=32, precision="fp16", load_in="8bit")),
    (GPTQ_CONFIG, Workload(mode="infer", batch_size=2, seq_len=32, precision="fp16")),
]


@pytest.mark.slow
@pytest.mark.parametrize(("quantization", "workload"), CASES,
                         ids=["int8-lora-train", "nf4-infer", "int8-infer", "gptq-infer"])
def test_fake_trace_matches_real_cpu_run(quantization: dict[str, Any] | None, workload: Workload) -> None:
    """The stand-ins allocate the same on fake and real CPU tensors (issue 11's harness, within 1%), and the
    parameter count is the model's, not the packed elements'."""
    source = _llama(quantization)
    real = trace_step(source, workload, cuda=False, fake=False)
    fake = trace_step(source, workload, cuda=False, fake=True)
    error = fake.tensor_peak_bytes / real.tensor_peak_bytes - 1
    assert abs(error) <= TOLERANCE, f"fake {fake.tensor_peak_bytes} vs real {real.tensor_peak_bytes} ({error:+.2%})"
    _, quantized, rest = _linear_shapes()
    assert fake.params_count == real.params_count
    if not workload.uses_peft:  # (adapters add their own parameters)
        assert fake.params_count == quantized + rest


@pytest.mark.slow
@pytest.mark.parametrize(("load_in", "method", "dtype_bytes"), [("4bit", "bnb-nf4", 2), ("8bit", "bnb-int8", 2)])
def test_parameters_are_the_formats_bytes_exactly(load_in: str, method: str, dtype_bytes: int) -> None:
    """parameters = the format's tensors for every linear layer but lm_head + the rest in the model dtype."""
    step = trace_step(_llama(), Workload(mode="infer", batch_size=1, seq_len=8, precision="bf16", load_in=load_in))
    shapes, _, rest = _linear_shapes()
    expected = (sum(layer_bytes(weight_format(method), o, i) for o, i in shapes) + dtype_bytes * rest
                + _buffer_bytes())
    assert step.tensor_components["parameters"] == expected
    unquantized = trace_step(_llama(), Workload(mode="infer", batch_size=1, seq_len=8, precision="bf16"))
    assert step.tensor_components["parameters"] < unquantized.tensor_components["parameters"]


class _Allocations(TorchDispatchMode):
    """Shapes and dtypes of every new storage an op returns (views and zero-stride stand-ins excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.made: list[tuple[tuple[int, ...], torch.dtype]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        if isinstance(out, torch.Tensor) and out.untyped_storage().nbytes() == out.numel() * out.element_size():
            self.made.append((tuple(out.shape), out.dtype))
        return out


@pytest.mark.parametrize(("rows", "dequantized"), [(4, False), (5, True)])
def test_bnb_4bit_dequantizes_above_four_rows(rows: int, dequantized: bool) -> None:
    """bitsandbytes 0.50 gemm_4bit: fused up to _GEMM_4BIT_CUSTOM_FLOOR_M = 4 rows; beyond, dequantize to a
    [n, k] weight in the compute dtype + F.linear. Backward always dequantizes for the input gradient."""
    layer = quantize_linears(torch.nn.Sequential(torch.nn.Linear(64, 96)), "bnb-nf4",
                             compute_dtype=torch.bfloat16)[0]
    assert isinstance(layer, QuantizedLinear)
    x = torch.randn(rows, 64, dtype=torch.bfloat16, requires_grad=True)
    with _Allocations() as forward:
        y = layer(x)
    assert (((96, 64), torch.bfloat16) in forward.made) == dequantized
    with _Allocations() as backward:
        y.float().sum().backward()
    assert ((96, 64), torch.bfloat16) in backward.made
    assert layer.weight.grad is None and x.grad is not None


@pytest.mark.slow
def test_peft_wraps_the_quantized_layers() -> None:
    """QLoRA: PEFT's LoRA wraps a QuantizedLinear like any nn.Linear; adapters stay fp32 (PEFT casts them only
    to a floating base dtype) and train, the packed base does not."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    model = quantize_linears(LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)), "bnb-nf4", compute_dtype=torch.bfloat16)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    wrapped = [m for n, m in peft_model.named_modules() if n.endswith("q_proj") and hasattr(m, "base_layer")]
    assert wrapped and all(isinstance(m.base_layer, QuantizedLinear) for m in wrapped)
    trainable = [p for p in peft_model.parameters() if p.requires_grad]
    assert trainable and all(p.dtype == torch.float32 for p in trainable)
    out = peft_model(input_ids=torch.randint(0, 300, (1, 8)), labels=torch.randint(0, 300, (1, 8)))
    out.loss.backward()
    assert all(p.grad is not None for p in trainable)


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def configs(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, quant in (("plain", None), ("gptq", GPTQ_CONFIG), ("unknown", {"quant_method": "int3"})):
        folder = tmp_path / name
        folder.mkdir()
        config = dict(TINY_LLAMA, **({"quantization_config": quant} if quant else {}))
        (folder / "config.json").write_text(json.dumps(config))
        paths[name] = folder / "config.json"
    return paths


@pytest.mark.parametrize(("model", "flags", "message"), [
    ("plain", ("--mode", "infer", "--load-in-4bit", "--weight-quant", "int8"),
     "--weight-quant int8 cannot apply on top of --load-in-4bit"),
    ("gptq", ("--mode", "infer", "--load-in-8bit"), "is already quantized (GPTQ 4-bit"),
    ("unknown", ("--mode", "infer"), "quant_method 'int3' is not"),
    ("plain", ("--load-in-4bit", "--load-in-8bit"), "not allowed with argument"),
    ("plain", ("--load-in-4bit",), "cannot be trained whole"),
])
def test_bad_quantization_input_is_one_line_exit_2(configs: dict[str, Path], model: str, flags: tuple[str, ...],
                                                   message: str) -> None:
    code, out, err = _cli("estimate", str(configs[model]), "--batch-size", "1", "--seq-len", "8", *flags)
    assert code == 2 and out == ""
    last = err.strip().splitlines()[-1]
    assert message in last and "Traceback" not in err


@pytest.mark.slow
def test_quantized_checkpoint_counts_in_the_headline_peak(configs: dict[str, Path]) -> None:
    """A GPTQ config.json: the estimate's parameters and peak hold the packed weights (issue 11: before, the
    peak stayed at 16-bit weights); the assumptions say how the format was modelled."""
    argv = ("--mode", "infer", "--batch-size", "1", "--seq-len", "8", "--precision", "fp16", "--json")
    plain = json.loads(_cli("estimate", str(configs["plain"]), *argv)[1])
    gptq = json.loads(_cli("estimate", str(configs["gptq"]), *argv)[1])
    shapes, _, rest = _linear_shapes()
    fmt = weight_format("gptq", group_size=32)
    assert gptq["components"]["parameters"] == (sum(layer_bytes(fmt, o, i) for o, i in shapes) + 2 * rest
                                                + _buffer_bytes())
    assert gptq["peak_allocated_bytes"] < plain["peak_allocated_bytes"]
    assert gptq["params_count"] == plain["params_count"]
    assert any("GPTQ 4-bit" in a and "quantization_config" in a for a in gptq["assumptions"])


TINY_GPT_OSS = {"model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"], "hidden_size": 64,
                "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                "head_dim": 16, "num_local_experts": 4, "num_experts_per_tok": 2, "vocab_size": 300,
                "max_position_embeddings": 256, "sliding_window": 32,
                "layer_types": ["sliding_attention", "full_attention"]}
# gpt-oss-20b's config.json quantization_config (Hugging Face openai/gpt-oss-20b)
GPT_OSS_MXFP4 = {"quant_method": "mxfp4", "modules_to_not_convert": [
    "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}


@pytest.mark.slow
def test_mxfp4_stores_the_experts_as_blocks_and_scales() -> None:
    """transformers' Mxfp4 quantizer (gpt-oss): each experts module's gate_up_proj / down_proj become uint8
    blocks + e8m0 scales per 32 ([E, out, in/32, 16] and [E, out, in/32]); attention, router, embeddings and
    lm_head stay bf16 (modules_to_not_convert, with *)."""
    from transformers import GptOssConfig, GptOssForCausalLM

    source = HFConfigSource("tiny-gpt-oss", dict(TINY_GPT_OSS, quantization_config=GPT_OSS_MXFP4))
    step = trace_step(source, Workload(mode="infer", batch_size=1, seq_len=16, precision="bf16"))
    model = GptOssForCausalLM(GptOssConfig(**TINY_GPT_OSS))
    experts = [(m.gate_up_proj.shape, m.down_proj.shape) for m in model.modules()
               if type(m).__name__ == "GptOssExperts"]
    fmt = weight_format("mxfp4")
    packed = sum(e * layer_bytes(fmt, o, i) for pair in experts for e, i, o in pair)
    quantized = sum(e * i * o for pair in experts for e, i, o in pair)
    total = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert step.tensor_components["parameters"] == packed + 2 * (total - quantized) + buffers
    assert step.params_count == total


@settings(max_examples=40, deadline=None)
@given(out_features=st.integers(1, 300), in_features=st.integers(1, 300),
       method=st.sampled_from(["bnb-nf4", "bnb-fp4", "bnb-int8", "gptq", "awq", "fp8", "int4", "int8", "mxfp4"]))
def test_a_quantized_layer_holds_exactly_its_layout(out_features: int, in_features: int, method: str) -> None:
    """Invariant: the stand-in's parameters and buffers are the layout, byte for byte, for any shape."""
    layer = QuantizedLinear(torch.nn.Linear(in_features, out_features, bias=False), weight_format(method),
                            torch.bfloat16)
    held = sum(t.numel() * t.element_size() for t in [*layer.parameters(), *layer.buffers()])
    assert held == layer_bytes(weight_format(method), out_features, in_features)
    assert layer.logical_params_count == out_features * in_features


def test_a_fused_kernel_reads_the_stored_bytes() -> None:
    """GPTQ's fused GEMM reads the packed weight, scales and zeros (not a 16-bit weight): what the decode time
    is bound by. One q_proj GEMM of 8 fp16 tokens reads the input and the layer's stored bytes."""
    source = _llama(GPTQ_CONFIG)
    step = trace_step(source, Workload(mode="infer", batch_size=1, seq_len=8, precision="fp16"), scale=False)
    gemm = next(op for op in step.ops if op.op_class == "matmul" and op.module.endswith("layers.0.self_attn.q_proj"))
    hidden = TINY_LLAMA["hidden_size"]
    assert gemm.bytes_read == 8 * hidden * 2 + layer_bytes(weight_format("gptq", group_size=32), hidden, hidden)
    assert gemm.flops == 2 * 8 * hidden * hidden
