"""Quantized base weights as stand-in linear layers: the real formats' tensors on the fake device.

The real kernels (bitsandbytes, GPTQ/AWQ, fbgemm fp8, MXFP4) need a GPU, so each quantized linear layer
is a :class:`QuantizedLinear`: an ``nn.Linear`` subclass (PEFT wraps it like any linear layer, which is
what QLoRA is) that holds exactly the tensors the format stores (``memory.weight_quant.layer_layout``:
the packed weight as a frozen parameter, scales, zeros and codes as buffers) and, in forward and backward,
allocates the temporaries the library's kernels allocate:

* bitsandbytes 4-bit (``MatMul4Bit``, ``gemm_4bit`` for CUDA, 0.50): with more than 4 rows the kernel
  falls back to dequantize + ``F.linear`` (always past 1536 rows; between 5 and 1536 it depends on the GPU:
  counted as the fallback, the larger): a ``[n, k]`` weight in the compute dtype per layer, plus the fp32
  absmax it rebuilds under double quantization. Backward dequantizes again for the input gradient;
  nothing but the packed weight is saved. ``Linear4bit`` casts the input to the compute dtype and the
  output back;
* LLM.int8 (``MatMul8bitLt``): the input cast to fp16, quantized row-wise (int8 ``[m, k]`` + fp32 ``[m]``),
  an int32 product; outlier columns (threshold 6) depend on the data and are not modelled. Backward
  builds the fp16 weight ``CB·SCB/127`` for the input gradient;
* GPTQ, MXFP4, fp8 and compressed-tensors integer: fused kernels read the packed weight (no 16-bit
  copy); fp8 quantizes the input per row first (fbgemm ``f8f8bf16_rowwise``); AWQ's GEMM dequantizes
  the whole weight from 1024 tokens on; in backward each dequantizes the weight for the input gradient.

The matmuls read a zero-stride stand-in for the weight where the real kernel reads the packed one, so the
trace counts their FLOPs, and the stored bytes as what they read, without allocating a 16-bit weight that
does not exist.
"""

from __future__ import annotations

import fnmatch
import functools
import math
from collections.abc import Hashable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import torch
from torch import nn

from gpuplan.memory.weight_quant import WeightFormat, layer_layout, weight_format
from gpuplan.trace.quant_format import check_trainable, format_of

if TYPE_CHECKING:
    from gpuplan.models.sources import ModelSource
    from gpuplan.workload import Workload

TORCH_DTYPES: dict[str, torch.dtype] = {
    "uint8": torch.uint8, "int8": torch.int8, "int32": torch.int32, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "float32": torch.float32, "float8_e4m3fn": torch.float8_e4m3fn, "int64": torch.int64,
}
BNB_FUSED_MAX_ROWS = 4
"""bitsandbytes ``_GEMM_4BIT_CUSTOM_FLOOR_M``: up to this many rows the fused 4-bit kernel runs on every GPU."""
AWQ_DEQUANT_MIN_TOKENS = 1024
"""AutoAWQ ``WQLinear_GEMM``: from this many tokens it dequantizes the weight and runs a 16-bit matmul."""


class QuantizedLinear(nn.Linear):
    """A linear layer whose weight is stored in a quantized format (see the module docstring)."""

    def __init__(self, base: nn.Module, fmt: WeightFormat, compute_dtype: torch.dtype) -> None:
        nn.Module.__init__(self)  # not nn.Linear.__init__: it would allocate a full-precision weight
        self.in_features, self.out_features = _features(base)
        self.fmt = fmt
        self.compute_dtype = compute_dtype
        packed, *stats = layer_layout(fmt, self.out_features, self.in_features)
        self.weight = nn.Parameter(torch.zeros(packed.shape, dtype=TORCH_DTYPES[packed.dtype]), requires_grad=False)
        self.quant_buffers: tuple[str, ...] = tuple(t.name.replace(".", "_") for t in stats)
        for t, name in zip(stats, self.quant_buffers, strict=True):
            self.register_buffer(name, torch.zeros(t.shape, dtype=TORCH_DTYPES[t.dtype]))
        bias = base.bias
        self.register_parameter("bias", bias if isinstance(bias, nn.Parameter) else None)
        self.logical_params_count = self.in_features * self.out_features
        self.stored_bytes = packed.nbytes + sum(t.nbytes for t in stats)
        """Bytes of the stored weight (packed values, scales, zeros, codes): what a fused kernel reads."""
        """Weights the layer represents (the packed parameter holds fewer elements)."""

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, format={self.fmt.describe()}"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fmt.method in ("bnb-nf4", "bnb-fp4"):  # Linear4bit: compute in the compute dtype, return as given
            bias = None if self.bias is None else self.bias.to(self.compute_dtype)
            out: torch.Tensor = _QuantizedMatmul.apply(x.to(self.compute_dtype), bias, self)
            return out.to(x.dtype)
        bias = self.bias
        if self.fmt.method == "bnb-int8" and bias is not None and bias.dtype != x.dtype:
            bias = bias.to(x.dtype)
        result: torch.Tensor = _QuantizedMatmul.apply(x, bias, self)
        return result

    # -- what the kernels allocate ------------------------------------------------------------------
    def fused_linear(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """``x @ Wᵀ + bias`` as a fused kernel runs it: it reads the stored (packed) weight, never a 16-bit
        copy. The weight operand is a zero-stride ``[k, n]`` stand-in with no byte behind it that tells the
        recorder how many bytes the kernel really reads (``stored_bytes``: trace/tracker.py)."""
        weight_t = torch.zeros((), dtype=x.dtype).expand(self.in_features, self.out_features)
        weight_t.stored_bytes = self.stored_bytes  # type: ignore[attr-defined]
        rows = x.reshape(-1, self.in_features)
        out = torch.mm(rows, weight_t) if bias is None else torch.addmm(bias.to(x.dtype), rows, weight_t)
        return out.reshape(*x.shape[:-1], self.out_features)

    def _stat(self, name: str) -> torch.Tensor:
        """One of the format's buffers (scales, absmax, codes) by its attribute name."""
        value = self._buffers[name]
        assert value is not None
        return value

    def from_stored(self, dtype: torch.dtype) -> torch.Tensor:
        """A real ``[n, k]`` tensor in ``dtype`` computed by one kernel from the stored weight: it reads the stored
        bytes (the zero-stride source tells the recorder how many: ``stored_bytes``) and writes ``n·k`` values, so
        the trace times the dequantizing pass and holds its output."""
        source = torch.zeros((), dtype=dtype).expand(self.out_features, self.in_features)
        source.stored_bytes = self.stored_bytes  # type: ignore[attr-defined]
        return source.clone(memory_format=torch.contiguous_format)

    def dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """A real ``[n, k]`` copy of the weight in ``dtype`` (bnb's dequantize, CB·SCB/127, AWQ's dequant, torchao's
        ``dequantize()``, diffusers' ``dequantize_gguf_tensor``)."""
        method = self.fmt.method
        if method in ("bnb-nf4", "bnb-fp4") and self.fmt.double_quant:
            absmax = torch.empty(self._stat("weight_absmax").shape, dtype=torch.float32)  # dequantized absmax
            absmax = absmax + self._stat("weight_nested_offset")
            weight = self.from_stored(dtype)
            del absmax
            return weight
        if method == "bnb-int8":
            scale = self._stat("SCB").unsqueeze(1).mul(1.0 / 127.0)
            return self.weight.to(dtype, copy=True).mul_(scale)
        if method == "fp8" and self.fmt.dequantizes:  # torchao Float8 dequantize: fp32 values × scale, then cast
            wide = self.weight.to(torch.float32) * self._stat("weight_scale")
            return wide.to(dtype)
        if method == "gguf":
            return self._gguf_dequantized(dtype)
        return self.from_stored(dtype)

    def _gguf_dequantized(self, dtype: torch.dtype) -> torch.Tensor:
        """diffusers ``dequantize_gguf_tensor`` (quantizers/gguf/utils.py, torch ops, no fused CUDA kernel) then
        ``.to(compute_dtype)``: Q8_0 is one pass (fp16 ``d · int8``); the sub-byte types shift the packed values out
        to one uint8 each, mask them, scale them in fp16 and add the block minimum (or offset): four passes over
        ``n·k`` values, the intermediates live while the next is made."""
        if self.fmt.ggml_type == "Q8_0":
            wide = self.from_stored(torch.float16)
        else:
            shifted = self.from_stored(torch.uint8)
            values = shifted & 0x0F
            del shifted
            scaled = values * torch.ones((), dtype=torch.float16)
            del values
            wide = scaled + torch.zeros((), dtype=torch.float16)
            del scaled
        return wide if dtype == torch.float16 else wide.to(dtype)

    def kernel_forward(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        rows = x.numel() // max(self.in_features, 1)
        method = self.fmt.method
        if self.fmt.dequantizes:
            return self._dequantizing_linear(x, bias)
        if method in ("bnb-nf4", "bnb-fp4"):
            if rows <= BNB_FUSED_MAX_ROWS:
                return self.fused_linear(x, bias)
            return nn.functional.linear(x, self.dequantized(x.dtype), bias)
        if method == "bnb-int8":
            a16 = x.to(torch.float16)
            a_int8 = torch.empty(a16.shape, dtype=torch.int8)
            a_scale = torch.empty(a16.shape[:-1], dtype=torch.float32)
            del a16
            product = torch.empty((*x.shape[:-1], self.out_features), dtype=torch.int32)
            del a_int8, a_scale
            out = self.fused_linear(x, bias)
            del product
            return out
        if method == "awq" and rows >= AWQ_DEQUANT_MIN_TOKENS:
            return nn.functional.linear(x, self.dequantized(x.dtype), bias)
        if method == "fp8":
            x_fp8 = torch.empty(x.shape, dtype=torch.float8_e4m3fn)
            x_scale = torch.empty((*x.shape[:-1], 1), dtype=torch.float32)
            out = self.fused_linear(x, bias)
            del x_fp8, x_scale
            return out
        return self.fused_linear(x, bias)


    def _dequantizing_linear(self, x: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        """The libraries whose linear dequantizes the whole weight at each call (``WeightFormat.dequantizes``).
        torchao int8 weight-only (``_linear_fp_act_int8_weight_impl``): ``mm(x, int8ᵀ.to(x.dtype)) * scale``;
        torchao float8 weight-only: ``F.linear(x, weight.dequantize())``; diffusers GGUFLinear
        (``forward_native``): ``F.linear(x, dequantize_gguf_tensor(w).to(compute_dtype), bias)``."""
        if self.fmt.method == "int8":
            widened = self.weight.to(x.dtype)
            product = torch.mm(x.reshape(-1, self.in_features), widened.t())
            del widened
            out = product * self._stat("weight_scale").reshape(-1).to(product.dtype)
            del product
            if bias is not None:
                out = out + bias
            return out.reshape(*x.shape[:-1], self.out_features)
        dtype = self.compute_dtype if self.fmt.method == "gguf" else x.dtype
        weight = self.dequantized(dtype)
        if bias is not None and bias.dtype != dtype:
            bias = bias.to(dtype)
        return nn.functional.linear(x, weight, bias)


class _QuantizedMatmul(torch.autograd.Function):
    """Forward through the format's kernel; backward computes only the input (and bias) gradient, from a
    freshly dequantized weight, as the libraries do: the frozen quantized weight gets no gradient and
    nothing is saved for backward but the layer itself."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, bias: torch.Tensor | None, layer: QuantizedLinear) -> torch.Tensor:
        ctx.layer = layer
        ctx.x_dtype = x.dtype
        return layer.kernel_forward(x, bias)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        layer: QuantizedLinear = ctx.layer
        grad_x = grad_bias = None
        if ctx.needs_input_grad[1]:
            grad_bias = grad_output.reshape(-1, grad_output.shape[-1]).sum(0)
        if ctx.needs_input_grad[0]:
            grad_x = torch.matmul(grad_output.to(ctx.x_dtype), layer.dequantized(ctx.x_dtype))
        return grad_x, grad_bias, None


def _is_conv1d(module: nn.Module) -> bool:
    """transformers' ``Conv1D`` (GPT-2 and kin): a linear layer with its weight stored [in, out]."""
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf") and hasattr(module, "weight")


def _features(module: nn.Module) -> tuple[int, int]:
    """(in_features, out_features) of a linear layer or a Conv1D."""
    if isinstance(module, nn.Linear):
        return module.in_features, module.out_features
    weight = module.weight
    assert isinstance(weight, torch.Tensor)
    rows, cols = weight.shape  # Conv1D: [nx, nf]
    return int(rows), int(cols)


def _skipped(name: str, skip: Iterable[str]) -> bool:
    """transformers' rule for ``modules_to_not_convert``: a key names a module or a run of its path segments,
    ``*`` standing for any segments (gpt-oss lists ``model.layers.*.self_attn``)."""
    return any(fnmatch.fnmatchcase(f".{name}.", f"*.{key}.*") for key in skip)


def quantize_linears(model: nn.Module, fmt: WeightFormat | str, *, compute_dtype: torch.dtype,
                     skip: Iterable[str] | None = None) -> nn.Module:
    """Replace every ``nn.Linear`` (and transformers ``Conv1D``, which bitsandbytes' transformers integration
    quantizes too) of ``model`` in place by a :class:`QuantizedLinear` in ``fmt``, except
    the modules ``skip`` names (default: the format's, ``lm_head``). ``fmt`` is a :class:`WeightFormat` or a
    method name (``bnb-nf4`` with double quantization as ``--load-in-4bit``, ``bnb-int8``, ``gptq``, ...).
    Layers already quantized are left alone, so calling it twice changes nothing. Returns ``model``."""
    fmt = weight_format(fmt) if isinstance(fmt, str) else fmt
    keys = tuple(fmt.skip if skip is None else skip)
    targets = [(name, module) for name, module in model.named_modules()
               if (isinstance(module, nn.Linear) or _is_conv1d(module)) and not isinstance(module, QuantizedLinear)
               and not _skipped(name, keys)]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, QuantizedLinear(module, fmt, compute_dtype))
    if fmt.method == "mxfp4":
        quantize_experts(model, fmt, keys)
    return model


EXPERT_WEIGHTS: tuple[str, ...] = ("gate_up_proj", "down_proj")
"""The 3-D ``[experts, in, out]`` parameters of a transformers MoE experts module (gpt-oss, Mixtral, Qwen-MoE)."""


def _storage_free(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor of ``shape`` with contiguous strides (grouped_mm checks them) and no bytes behind it: on fake
    tensors a strided view of an empty storage; on real ones (tests only) a real allocation is unavoidable."""
    from torch._subclasses.fake_tensor import FakeTensor

    anchor = torch.empty(0, dtype=dtype)
    if not isinstance(anchor, FakeTensor):
        return torch.zeros(shape, dtype=dtype)
    strides = [1] * len(shape)
    for i in range(len(shape) - 2, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return anchor.as_strided(shape, strides)


@functools.cache
def _quantized_experts_class(base: Any) -> type[nn.Module]:
    """``base`` whose expert weights read as zero-stride stand-ins of their full shape (the fused MXFP4
    kernels read the packed blocks; no 16-bit copy exists), while the blocks and scales are buffers."""

    def virtual(name: str) -> property:
        def read(self: nn.Module) -> torch.Tensor:
            virtual: dict[str, tuple[tuple[int, ...], torch.dtype]] = self.__dict__["quantized_expert_weights"]
            shape, dtype = virtual[name]
            return _storage_free(shape, dtype)

        return property(read)

    return type(f"Quantized{base.__name__}", (base,), {name: virtual(name) for name in EXPERT_WEIGHTS})


def quantize_experts(model: nn.Module, fmt: WeightFormat, skip: Iterable[str]) -> int:
    """Store each experts module's 3-D weights in ``fmt`` (transformers' Mxfp4 quantizer does this for
    gpt-oss: ``gate_up_proj_blocks`` [E, 2I, H/32, 16] + ``_scales`` [E, 2I, H/32], likewise ``down_proj``);
    biases stay 16-bit. Returns the weights now stored quantized."""
    stored = 0
    for name, module in list(model.named_modules()):
        weights = {w: module._parameters.get(w) for w in EXPERT_WEIGHTS}
        if (not type(module).__name__.endswith("Experts") or _skipped(name, skip)
                or not all(isinstance(p, nn.Parameter) and p.dim() == 3 for p in weights.values())):
            continue
        virtual: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
        for w, p in weights.items():
            assert p is not None
            experts, rows, cols = p.shape  # [E, in, out]
            del module._parameters[w]
            for t in layer_layout(fmt, int(cols), int(rows)):
                module.register_buffer(f"{w}_{t.name.removeprefix('weight_')}",
                                       torch.zeros((int(experts), *t.shape), dtype=TORCH_DTYPES[t.dtype]))
            virtual[w] = (tuple(p.shape), p.dtype)
            stored += p.numel()
        module.__dict__["quantized_expert_weights"] = virtual  # plain attributes, not submodules or tensors
        module.__dict__["logical_params_count"] = sum(math.prod(shape) for shape, _ in virtual.values())
        module.__class__ = _quantized_experts_class(cast("Hashable", type(module)))
    return stored


def compute_dtype_of(workload: Workload) -> torch.dtype:
    """The dtype the quantized layers compute in: QLoRA's bf16, else the model's 16-bit dtype, else fp16
    for the 16-bit kernels of an fp32 model (bnb 4-bit then computes in the input's dtype)."""
    if getattr(workload, "peft", "none") == "qlora" or workload.precision in ("bf16", "amp-bf16"):
        return torch.bfloat16
    return torch.float16 if workload.precision in ("fp16", "amp-fp16") else torch.float32


def quantize_for_workload(model: nn.Module, source: ModelSource, workload: Workload) -> nn.Module:
    """The base model as the workload loads it (unchanged without a quantized format)."""
    fmt = format_of(source, workload)
    if fmt is None:
        return model
    check_trainable(fmt, source, workload)
    return quantize_linears(model, fmt, compute_dtype=compute_dtype_of(workload))


def logical_params_count(model: nn.Module) -> int:
    """Weights the model represents: a quantized layer's packed weight counts as the weights it stores."""
    seen: dict[int, int] = {}
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen[id(p)] = (module.logical_params_count if isinstance(module, QuantizedLinear) and name == "weight"
                           else p.numel())
    experts = sum(int(getattr(m, "logical_params_count", 0)) for m in model.modules()
                  if hasattr(m, "quantized_expert_weights"))  # their weights are buffers now
    return sum(seen.values()) + experts


def quantized_layers(model: nn.Module) -> Mapping[str, QuantizedLinear]:
    return {n: m for n, m in model.named_modules() if isinstance(m, QuantizedLinear)}
