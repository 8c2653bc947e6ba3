"""PEFT adapters (LoRA, DoRA; QLoRA's LoRA half) applied with the real ``peft`` library.

The traced step is what PEFT runs: ``get_peft_model`` wraps the targeted layers with its own
adapter modules (its dropout, its forward, DoRA's weight norm), freezes the base — so the frozen
weights hold no gradients and no optimizer state — and, as PEFT does by default
(``autocast_adapter_dtype=True``), keeps the adapters in float32 over a bf16/fp16 base. On fake
tensors the adapters are built as fake tensors too: PEFT's initialisers only fill values.

Module names gain PEFT's ``base_model.model.`` prefix; the repeated blocks are found by their
count (``runner.find_containers``), so block scaling sees them inside the wrapper.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.workload import ALL_LINEAR

if TYPE_CHECKING:
    from torch import nn

    from gpuplan.models.sources import ModelSource
    from gpuplan.workload import Workload

# gpuplan's task of a source -> PEFT's task type (the PeftModel subclass a Trainer user builds);
# other tasks get the plain PeftModel, whose forward is the base model's.
_TASK_TYPES = {"causal-lm": "CAUSAL_LM", "seq2seq-lm": "SEQ_2_SEQ_LM", "sequence-classification": "SEQ_CLS"}
_LISTED_NAMES = 24
"""Linear module names listed at most in a message about targets."""


def _is_linear(module: nn.Module) -> bool:
    """A linear layer as PEFT's LoRA wraps it: ``nn.Linear`` or transformers' ``Conv1D`` (GPT-2)."""
    from torch import nn

    return isinstance(module, nn.Linear) or type(module).__name__ == "Conv1D"


def _is_adaptable(module: nn.Module) -> bool:
    """Layer types PEFT's LoRA also takes by name: embeddings and convolutions."""
    from torch import nn

    return _is_linear(module) or isinstance(module, (nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d))


def linear_module_names(model: nn.Module) -> list[str]:
    """The distinct last names of the model's linear layers (what ``--lora-targets`` names), in
    model order."""
    names: list[str] = []
    for path, module in model.named_modules():
        if path and _is_linear(module):
            last = path.rsplit(".", 1)[-1]
            if last not in names:
                names.append(last)
    return names


def _targets_hint(model: nn.Module) -> str:
    names = linear_module_names(model)
    shown = ", ".join(names[:_LISTED_NAMES]) + (f", ... ({len(names)} names)" if len(names) > _LISTED_NAMES else "")
    return (f"its linear modules are: {shown}" if names else "it has no nn.Linear layer") + \
        f"; pass --lora-targets NAME[,NAME...] or {ALL_LINEAR}"


def lora_config(model: nn.Module, source: ModelSource, workload: Workload) -> Any:
    """PEFT's ``LoraConfig`` for the workload (targets checked against the model, one line if wrong)."""
    from peft import LoraConfig

    targets: str | list[str] | None
    if not workload.lora_targets:
        targets = None  # PEFT's default for the architecture (its model_type -> targets table)
    elif workload.lora_targets == (ALL_LINEAR,):
        targets = ALL_LINEAR
    else:
        targets = list(workload.lora_targets)
    if targets is None and not _has_default_targets(model):
        raise ConfigError(f"--peft {workload.peft}: PEFT has no default LoRA targets for {source.name}; "
                          + _targets_hint(model))
    if isinstance(targets, list):
        adaptable = [path for path, module in model.named_modules() if path and _is_adaptable(module)]
        known = {path.rsplit(".", 1)[-1] for path in adaptable} | set(adaptable)
        missing = [t for t in targets if t not in known]
        if missing:
            raise ConfigError(f"--lora-targets {','.join(missing)} matches no linear module of {source.name}; "
                              + _targets_hint(model))
    if workload.train_modules:
        names = {path.rsplit(".", 1)[-1] for path, _ in model.named_modules() if path} | \
            {path for path, _ in model.named_modules()}
        missing = [m for m in workload.train_modules if m not in names]
        if missing:
            own = sorted({path.split(".")[-1] for path, m in model.named_modules()
                          if path and not any(True for _ in m.children()) and any(True for _ in m.parameters())})
            raise ConfigError(f"--train-modules {','.join(missing)} matches no module of {source.name}; "
                              f"modules with parameters: {', '.join(own[:_LISTED_NAMES])}")
    # peft annotates lora_alpha as int, but only divides by it (scaling = alpha / r): any number works
    return LoraConfig(
        r=workload.lora_rank, lora_alpha=workload.lora_alpha,  # type: ignore[arg-type]
        lora_dropout=workload.lora_dropout,
        target_modules=targets, use_dora=workload.peft == "dora",
        modules_to_save=list(workload.train_modules) or None,
        task_type=_TASK_TYPES.get(source.task),
    )


def default_lora_targets(model_type: str | None) -> list[str] | None:
    """PEFT's LoRA targets for an architecture when none are named (its model_type table), or None: what
    ``--lora-targets`` left empty means, spelled out for frameworks whose own default differs (gpuplan.rl.emit)."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING

    targets = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model_type or "")
    return list(targets) if targets else None


def _has_default_targets(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    return default_lora_targets(getattr(config, "model_type", None)) is not None


def apply_peft(model: nn.Module, source: ModelSource, workload: Workload) -> nn.Module:
    """``get_peft_model(model, LoraConfig(...))`` as a user writes it; with checkpointing, inputs
    require grad as PEFT/Trainer make them (``enable_input_require_grads``)."""
    from peft import get_peft_model

    if workload.peft == "dora":
        from gpuplan.trace.quantized import quantized_layers

        if quantized_layers(model):
            # PEFT's DoRA reads the base weight through dequantize_module_weight, which knows bnb's
            # Params4bit / HQQ, not trace/quantized.py's stand-ins: it would see the packed bytes
            raise ConfigError(f"--peft dora on a quantized base (QDoRA) of {source.name} is not modelled; use "
                              "--peft qlora (LoRA on NF4) or DoRA on a 16-bit base (drop --load-in-4bit/8bit)")
    config = lora_config(model, source, workload)
    try:
        with _adapters_built_in_place(model):
            peft_model = get_peft_model(model, config)
    except ValueError as exc:  # PEFT's own refusal (e.g. a layer type LoRA cannot wrap)
        raise ConfigError(f"--peft {workload.peft}: peft refuses {source.name}: {str(exc).splitlines()[0]}; "
                          + _targets_hint(model)) from exc
    if workload.trains and workload.checkpointing != "none":
        enable = getattr(model, "enable_input_require_grads", None)
        if callable(enable):
            enable()
    return peft_model  # type: ignore[no-any-return]


@contextlib.contextmanager
def _adapters_built_in_place(model: nn.Module) -> Iterator[None]:
    """On fake tensors, PEFT's moves of each new adapter to the base layer's device and dtype
    (``module.to``) must swap fake parameters, which torch refuses while the fake mode holds weak
    references to them. The moves change nothing that lasts: everything is on the CPU already, and
    the dtype move is undone by PEFT's ``autocast_adapter_dtype`` (bf16/fp16 adapters back to
    float32, where they were built). So under fake tensors the dtype move is skipped and a move to
    where the module already is returns it unchanged; real tensors take PEFT's own path."""
    import torch
    from torch import nn
    from torch._subclasses.fake_tensor import FakeTensor

    first = next(model.parameters(), None)
    if not isinstance(first, FakeTensor):
        yield
        return
    import peft.utils.other as peft_other
    from peft.tuners.tuners_utils import BaseTunerLayer

    original_move = BaseTunerLayer._move_adapter_to_device_of_base_layer
    original_to = nn.Module.to
    original_copy = peft_other.copy

    def to(self: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        device, dtype, _, memory_format = torch._C._nn._parse_to(*args, **kwargs)
        tensors = [*self.parameters(), *self.buffers()]
        if dtype is None and memory_format is None and all(device is None or t.device == device for t in tensors):
            return self
        return original_to(self, *args, **kwargs)

    BaseTunerLayer._move_adapter_to_device_of_base_layer = lambda self, *a, **k: None  # type: ignore[method-assign]
    nn.Module.to = to  # type: ignore[method-assign,assignment]
    peft_other.copy = _FakeAwareCopy  # type: ignore[assignment]
    try:
        yield
    finally:
        BaseTunerLayer._move_adapter_to_device_of_base_layer = original_move  # type: ignore[method-assign]
        nn.Module.to = original_to  # type: ignore[method-assign]
        peft_other.copy = original_copy


class _FakeAwareCopy:
    """``copy`` as PEFT's ``modules_to_save`` uses it (``copy.deepcopy(module)``), for fake tensors:
    ``deepcopy`` of a fake tensor lands in a fake mode of its own, which the step cannot mix with the
    model's (and which corrupted memory when it was freed). Each tensor's copy is made fresh in the
    active fake mode instead (same shape, dtype, requires_grad; values mean nothing on fake tensors)."""

    copy = staticmethod(copy.copy)

    @staticmethod
    def deepcopy(obj: Any, memo: dict[int, Any] | None = None) -> Any:
        import torch
        from torch import nn

        memo = {} if memo is None else memo
        if isinstance(obj, nn.Module):
            for t in [*obj.parameters(), *obj.buffers()]:
                fresh = torch.empty(t.shape, dtype=t.dtype, device=t.device)
                memo[id(t)] = nn.Parameter(fresh, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) \
                    else fresh
        return copy.deepcopy(obj, memo)
