"""A diffusion pipeline's components as the user loads them: quantized components, layerwise fp8 storage,
fp8 training and LoRA on the denoiser (the model-level rules of trace/adapt.py, applied per component).

* ``--load-in-4bit`` / ``--load-in-8bit`` / ``--weight-quant int8`` quantize the linear layers of the components
  ``--quantize-components`` names (default: the denoiser) with trace/quantized.py's stand-ins: bitsandbytes NF4
  (without double quantization: diffusers' ``BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")``
  default, as its docs and blog load FLUX; ``--peft qlora`` keeps QLoRA's double quantization), LLM.int8 — with
  transformers' ``_keep_in_fp32_modules`` (T5's ``wo``) left unquantized in float32 as transformers loads them —
  and
  torchao's int8
  weight-only layout (int8 weight + one 16-bit scale per output row: ``memory.weight_quant.layer_layout`` int8
  per channel);
* ``--weight-quant fp8-storage`` is diffusers' ``enable_layerwise_casting``: the weights of every linear and
  convolution (not norms, embeddings of positions/patches, ``proj_in``/``proj_out``: diffusers'
  ``DEFAULT_SKIP_MODULES_PATTERN``) stored in float8_e4m3fn and upcast to the compute dtype for the layer's
  forward only — a 16-bit copy of one layer at a time, made before the fp8 one is dropped, as ``module.to`` does;
* ``--precision fp8`` converts the denoiser alone (torchao, trace/float8.py);
* ``--peft lora`` injects adapters into the denoiser as diffusers' scripts do (``transformer.add_adapter``:
  PEFT's ``inject_adapter_in_model``, no wrapper), in the denoiser's dtype, frozen base.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from gpuplan.errors import ConfigError

if TYPE_CHECKING:
    from gpuplan.models.sources import ModelSource
    from gpuplan.workload import Workload

LAYERWISE_SKIP: tuple[str, ...] = ("pos_embed", "patch_embed", "norm", "^proj_in$", "^proj_out$")
"""diffusers ``hooks/layerwise_casting.py`` DEFAULT_SKIP_MODULES_PATTERN (0.42)."""
LAYERWISE_TYPES: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d,
                                                nn.ConvTranspose2d, nn.ConvTranspose3d)
"""diffusers ``SUPPORTED_PYTORCH_LAYERS``: the layers layerwise casting stores in fp8."""


def quantized_component_names(source: ModelSource, workload: Workload) -> tuple[str, ...]:
    return workload.quantize_components or (str(getattr(source, "denoiser", "transformer")),)


def _format(workload: Workload) -> Any:
    from gpuplan.memory.weight_quant import weight_format

    if workload.peft == "qlora":  # QLoRA's base: NF4 with double quantization, as everywhere in gpuplan
        return weight_format("bnb-nf4", double_quant=True)
    if workload.load_in == "4bit":  # diffusers' BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4")
        return weight_format("bnb-nf4", double_quant=False)
    if workload.load_in == "8bit":
        return weight_format("bnb-int8")
    if workload.component_quant == "int8":  # torchao int8_weight_only: int8ᵀ widened to 16 bits at each call
        return weight_format("int8", group_size=-1, dequantizes=True)
    if workload.component_quant == "fp8":  # torchao float8_weight_only: e4m3 + fp32 scale per row, dequantized
        return weight_format("fp8", dequantizes=True)
    return None


def adapt_pipeline(model: nn.Module, source: ModelSource, workload: Workload) -> nn.Module:
    """The pipeline module with its components loaded as the workload says (in place; returns it)."""
    from gpuplan.trace.quantized import compute_dtype_of, quantize_linears

    names = [n for n in quantized_component_names(source, workload) if hasattr(model, n)]
    fmt = _format(workload)
    if fmt is not None and workload.component_quant != "none" and workload.load_in != "none":
        raise ConfigError(f"--weight-quant {workload.component_quant} and --load-in-{workload.load_in} are two "
                          "formats for the same weights; keep one")
    denoiser_name = str(getattr(source, "denoiser", "transformer"))
    if fmt is not None:
        if workload.trains and not workload.uses_peft and denoiser_name in names:
            raise ConfigError(f"a quantized {denoiser_name} cannot be trained whole (its packed weights take no "
                              "gradient): add --peft lora (QLoRA), or quantize other components only")
        for name in names:
            component = getattr(model, name)
            keep = _kept_in_fp32(component) if fmt.method.startswith("bnb") else _keep_in_fp32_names(component)
            quantize_linears(component, fmt, compute_dtype=compute_dtype_of(workload), skip=keep)
    if workload.gguf_type is not None:  # the source refused other formats and transformers components beforehand
        for name in names:
            gguf_linears(getattr(model, name), source, workload)
    if workload.component_quant == "fp8-storage":
        for name in names:
            layerwise_fp8(getattr(model, name), compute_dtype=_compute_dtype(workload))
    denoiser = getattr(model, denoiser_name)
    if workload.trains and workload.scaled_training:
        from gpuplan.trace.float8 import convert_to_fp8_training

        setattr(model, denoiser_name, convert_to_fp8_training(denoiser, workload.precision))
        denoiser = getattr(model, denoiser_name)
    if workload.uses_peft:
        inject_lora(denoiser, source, workload)
    return model


def gguf_linears(component: nn.Module, source: ModelSource, workload: Workload) -> int:
    """The component loaded from a GGUF file of ``--gguf-type`` (diffusers ``GGUFQuantizationConfig``): each linear
    weight in the ggml type city96's quantizer gives it (models/gguf_mix.py ``denoiser_tensor_type``), stored as
    ggml blocks and dequantized to the compute dtype at each call; kept layers stay in the torch dtype. Returns
    the linears stored in GGUF. Only diffusers components get here: transformers dequantizes a GGUF checkpoint
    when it loads it (PipelineSource.check_workload refuses a CLIP or T5)."""
    from gpuplan.memory.weight_quant import weight_format
    from gpuplan.models.gguf_mix import denoiser_tensor_type
    from gpuplan.trace.quantized import QuantizedLinear, compute_dtype_of

    gguf_type = workload.gguf_type
    assert gguf_type is not None
    spec = getattr(source, "spec", None)
    flux = spec is not None and spec.pipeline_class == "FluxPipeline"
    unet = spec is not None and spec.family.denoiser == "unet"
    count = 0
    for path, module in list(component.named_modules()):
        if not isinstance(module, nn.Linear) or isinstance(module, QuantizedLinear):
            continue
        leaf = path.rsplit(".", 1)[-1]
        fused = flux and path.startswith("transformer_blocks.") and leaf in _FLUX_FUSED_QKV
        ggml_type = denoiser_tensor_type(path, module.in_features, gguf_type, fused_qkv=fused, unet=unet,
                                         separate_v=not flux)
        if ggml_type is None:
            continue
        parent_name, _, child = path.rpartition(".")
        parent = component.get_submodule(parent_name) if parent_name else component
        setattr(parent, child, QuantizedLinear(module, weight_format("gguf", ggml_type=ggml_type),
                                               compute_dtype_of(workload)))
        count += 1
    return count


_FLUX_FUSED_QKV = ("to_q", "to_k", "to_v", "add_q_proj", "add_k_proj", "add_v_proj")
"""FLUX double-block projections stored fused in the original checkpoint (``img_attn.qkv`` / ``txt_attn.qkv``): the
quantizer saw them as one ``attn.qkv`` tensor (its ``.to_v`` rule never sees a FLUX name)."""


def _keep_in_fp32_names(component: nn.Module) -> tuple[str, ...]:
    """transformers' ``_keep_in_fp32_modules`` of a component (T5's ``wo``): every transformers quantizer leaves them
    unquantized (``get_modules_to_not_convert`` adds them: torchao, Quanto, bitsandbytes); with a bf16 pipeline
    they stay bf16 (transformers upcasts them only for fp16). diffusers components have none."""
    return tuple(getattr(type(component), "_keep_in_fp32_modules", None) or ())


def _kept_in_fp32(component: nn.Module) -> tuple[str, ...]:
    """transformers' ``_keep_in_fp32_modules`` of a component loaded with bitsandbytes: those modules are not
    quantized and are held in float32 (T5's ``wo``: a quarter of the T5-XXL encoder's weights). Converted here,
    returned as names for ``quantize_linears`` to skip."""
    names = _keep_in_fp32_names(component)
    if not names:
        return ()
    for path, module in component.named_modules():
        if path and path.rsplit(".", 1)[-1] in names:
            for pname, p in list(module._parameters.items()):
                if p is not None and p.is_floating_point():
                    module._parameters[pname] = nn.Parameter(p.detach().to(torch.float32), requires_grad=False)
    return names


def _compute_dtype(workload: Workload) -> torch.dtype:
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[workload.param_dtype] \
        if workload.param_dtype != "float32" else torch.bfloat16


def layerwise_fp8(module: nn.Module, *, compute_dtype: torch.dtype) -> int:
    """diffusers' layerwise casting on ``module``: returns how many layers store fp8 weights."""
    patterns = [re.compile(p) for p in LAYERWISE_SKIP]
    count = 0
    for name, layer in module.named_modules():
        if not isinstance(layer, LAYERWISE_TYPES) or any(p.search(name) for p in patterns):
            continue
        for pname, p in list(layer._parameters.items()):
            if p is not None and p.is_floating_point():
                layer._parameters[pname] = nn.Parameter(p.detach().to(torch.float8_e4m3fn), requires_grad=False)
        _cast_around_forward(layer, compute_dtype)
        count += 1
    return count


def _cast_around_forward(layer: nn.Module, compute_dtype: torch.dtype) -> None:
    """The layer's weights in ``compute_dtype`` during its forward only, as diffusers' LayerwiseCastingHook
    does with ``module.to(compute_dtype)`` before and ``module.to(storage_dtype)`` after. The stored fp8 tensors
    are kept and put back after the forward (the downcast kernel still runs, and is timed): the weights stay the
    load-time storages, so they count as parameters (``Memory after loading``), not as tensors the step made."""
    original = layer.forward

    def forward(*args: Any, __orig: Any = original, __layer: nn.Module = layer, **kwargs: Any) -> Any:
        params = __layer._parameters
        stored = {n: p for n, p in params.items() if p is not None}
        for n, p in stored.items():
            params[n] = nn.Parameter(p.to(compute_dtype), requires_grad=False)
        try:
            return __orig(*args, **kwargs)
        finally:
            for n, p in stored.items():
                params[n].to(torch.float8_e4m3fn)  # type: ignore[union-attr]  # the downcast's pass (same values)
                params[n] = p

    layer.forward = forward  # type: ignore[method-assign]


def inject_lora(denoiser: nn.Module, source: ModelSource, workload: Workload) -> None:
    """``denoiser.requires_grad_(False); denoiser.add_adapter(LoraConfig(...))`` as diffusers' LoRA scripts do."""
    from peft import LoraConfig, inject_adapter_in_model

    from gpuplan.trace.peft import _adapters_built_in_place, linear_module_names
    from gpuplan.workload import ALL_LINEAR

    targets: Any
    if not workload.lora_targets:
        targets = ["to_k", "to_q", "to_v", "to_out.0"]  # the diffusers scripts' default targets
    elif workload.lora_targets == (ALL_LINEAR,):
        targets = ALL_LINEAR
    else:
        targets = list(workload.lora_targets)
        known = {path.rsplit(".", 1)[-1] for path, _ in denoiser.named_modules() if path} | \
            {".".join(path.split(".")[-2:]) for path, _ in denoiser.named_modules() if path.count(".") >= 1}
        missing = [t for t in targets if t not in known]
        if missing:
            names = ", ".join(linear_module_names(denoiser)[:24])
            raise ConfigError(f"--lora-targets {','.join(missing)} matches no module of {source.name}'s denoiser; its "
                              f"linear modules are: {names}")
    if workload.train_modules:
        raise ConfigError("--train-modules is not modelled for pipelines; LoRA on the denoiser only")
    denoiser.requires_grad_(False)
    config = LoraConfig(r=workload.lora_rank, lora_alpha=workload.lora_alpha,  # type: ignore[arg-type]
                        lora_dropout=workload.lora_dropout, target_modules=targets, init_lora_weights="gaussian",
                        use_dora=workload.peft == "dora")
    dtype = next(denoiser.parameters()).dtype
    previous = torch.get_default_dtype()
    # the scripts cast the transformer to the weight dtype before add_adapter: the adapters follow the base
    torch.set_default_dtype(dtype if dtype.is_floating_point and dtype.itemsize >= 2 else torch.bfloat16)
    try:
        with _adapters_built_in_place(denoiser):
            inject_adapter_in_model(config, denoiser)
    finally:
        torch.set_default_dtype(previous)
