"""FP8 training (``--precision fp8``): the real torchao float8 training conversion, run on fake tensors.

``torchao.float8.convert_to_float8_training`` swaps each eligible ``nn.Linear`` for a ``Float8Linear``
(torchao 0.18, ``float8_linear.py``). Its semantics are therefore torchao's own, not a copy:

* all three GEMMs of a linear layer run in fp8 through ``torch._scaled_mm``: forward ``input @ weightᵀ``
  (both e4m3), backward ``grad_output @ weight`` (grad e5m2) and ``grad_outputᵀ @ input``;
* the default recipe scales tensorwise (one fp32 amax-derived scale per cast, computed on the fly:
  dynamic scaling); ``rowwise`` keeps one scale per row;
* saved for backward: the high-precision input and weight (``save_for_backward(input_hp, weight_hp_t)``);
  the fp8 copies are recast in backward, so there is no cached fp8 weight between forward and backward
  on one GPU. Under FSDP2 with ``enable_fsdp_float8_all_gather`` the weights are all-gathered in fp8
  (half the bf16 all-gather bytes; the planner's note, not modelled here);
* parameters, gradients and optimizer state stay in the model dtype: bf16 here (torchao's and
  torchtitan's single-GPU setting), so memory saves only the fp8 temporaries' halving, and time takes
  the fp8 tensor-core rate for those GEMMs.

Layers torchao cannot run (a dimension not divisible by 16, as ``torch._scaled_mm`` requires) and the output
head (torchtitan's default ``filter_fqns=["output"]``; here ``lm_head``) stay in bf16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.errors import ConfigError
from gpuplan.scaled_formats import SCALED_FORMATS

if TYPE_CHECKING:
    from torch import nn

    from gpuplan.workload import Workload

_SCALED_MM_MULTIPLE = 16
"""``torch._scaled_mm`` needs both dimensions of the weight divisible by 16."""
_SKIPPED = ("lm_head", "output")


def _eligible(module: nn.Module, fqn: str) -> bool:
    from torch import nn

    if not isinstance(module, nn.Linear):
        return False
    if fqn.rsplit(".", 1)[-1] in _SKIPPED:
        return False
    return module.in_features % _SCALED_MM_MULTIPLE == 0 and module.out_features % _SCALED_MM_MULTIPLE == 0


def convert_to_fp8_training(model: nn.Module, precision: str = "fp8") -> nn.Module:
    """``model`` with torchao ``Float8Linear`` layers (tensorwise dynamic scaling, torchao's default): the
    program of every scaled recipe (``gpuplan.scaled_formats``: mxfp8 / nvfp4 re-priced from it)."""
    try:
        from torchao.float8 import convert_to_float8_training
    except ImportError as exc:
        raise ConfigError(f"--precision {precision} models torchao's float8 training and needs torchao: "
                          "pip install 'gpuplan[finetune]'") from exc
    from gpuplan.trace.quantized import quantized_layers

    if quantized_layers(model):
        raise ConfigError(f"--precision {precision} trains the linear layers through scaled low-precision GEMMs "
                          "and cannot run on quantized base weights; drop --load-in-4bit/--load-in-8bit (or the "
                          "quantized checkpoint) or use --precision bf16")
    return convert_to_float8_training(model, module_filter_fn=_eligible)


def convert_for_precision(model: nn.Module, workload: Workload) -> nn.Module:
    """``model`` as the precision runs it: fp8 / mxfp8 / nvfp4 convert the linear layers; every other
    precision is a dtype (set when the model is built) and autocast."""
    if not workload.scaled_training:
        return model
    return convert_to_fp8_training(model, workload.precision)


def fp8_layers(model: nn.Module) -> int:
    """How many linear layers compute in fp8."""
    return sum(1 for m in model.modules() if type(m).__name__ == "Float8Linear")


def fp8_notes(workload: Workload) -> list[str]:
    """The assumption lines for ``--precision fp8`` (and the recipes re-priced from it)."""
    if not workload.scaled_training:
        return []
    if workload.precision != "fp8":
        fmt = SCALED_FORMATS[workload.precision]
        kept = (f"the last {workload.high_precision_blocks} blocks" if workload.high_precision_blocks is not None
                else f"the last {fmt.default_high_precision_fraction:.0%} of the blocks"
                if fmt.default_high_precision_fraction else "no block (the recipe's default)")
        return [f"--precision {fmt.precision}: {fmt.recipe}; traced as torchao's float8 program (every linear "
                "layer with both sides divisible by 16 but the output head, bf16 input and weight saved for "
                f"backward, bf16 parameters, gradients and optimizer state); GEMMs at the {fmt.gemm_rate} rate, "
                f"casts writing {fmt.cast_bytes_per_element:.4g} B per element as torch.compile fuses them; "
                f"{kept} {'keeps' if kept.startswith('no block') else 'keep'} bf16 linear layers "
                "(--high-precision-blocks)"
                + ("; NVFP4's random Hadamard transform and 2-D weight scaling not modelled, cast temporaries "
                   "counted at fp8's byte per element" if fmt.precision == "nvfp4" else "")]
    return ["--precision fp8: torchao Float8Linear on every linear layer with both sides divisible by 16 (not the "
            "output head), tensorwise dynamic scaling, bf16 parameters, gradients and optimizer state; the three "
            "GEMMs per layer at the fp8 rate; each scaling cast as torch.compile fuses it (amax + cast: 2 kernels, "
            "the bf16 tensor read twice; torchtitan requires --compile.enable for float8); under FSDP2 weights "
            "can be all-gathered in fp8 (not modelled)"]
