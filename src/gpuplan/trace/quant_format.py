"""Which quantized base-weight format a step runs, and what the estimate says about it — without torch.

The stand-in layers that hold a format's tensors are in trace/quantized.py (they need torch); the
choice of format and its one-line refusals are here, so an answer read from the trace cache can state
them without importing the tracing stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.memory.weight_quant import WeightFormat, format_from_config, weight_format

if TYPE_CHECKING:
    from gpuplan.models.sources import ModelSource
    from gpuplan.workload import Workload


def format_of(source: ModelSource, workload: Workload) -> WeightFormat | None:
    """The base-weight format the step runs: a checkpoint's ``quantization_config``, else the flags
    (``--load-in-4bit`` / ``--load-in-8bit``), else QLoRA's NF4 base; None for 16/32-bit weights."""
    from gpuplan.errors import ConfigError

    qc = source.quantization()
    load_in = workload.load_in
    if qc is not None:
        fmt = format_from_config(qc)
        if load_in != "none":
            raise ConfigError(f"{source.name} is already quantized ({fmt.describe()}); drop --load-in-{load_in}")
        return fmt
    if load_in == "4bit":
        return weight_format("bnb-nf4", double_quant=True)
    if load_in == "8bit":
        return weight_format("bnb-int8")
    if getattr(workload, "peft", "none") == "qlora":
        return weight_format("bnb-nf4", double_quant=True)
    return None


def check_trainable(fmt: WeightFormat, source: ModelSource, workload: Workload) -> None:
    """A quantized base trains only through adapters: transformers' Trainer refuses "purely quantized
    models" (the packed weights take no gradient), so a full fine-tune of one is a usage error."""
    from gpuplan.errors import ConfigError

    if workload.trains and not workload.uses_peft:
        raise ConfigError(f"{source.name} in {fmt.describe()} cannot be trained whole (quantized weights take no "
                          "gradient; transformers' Trainer refuses it): add --peft lora, or drop the quantization")


def quantization_notes(source: ModelSource, workload: Workload, weight_quant: str = "none") -> list[str]:
    """The assumption lines for the base-weight format of the step (none without one). A quantized base
    and ``--weight-quant`` are two answers to one question: refused in one line."""
    from gpuplan.errors import ConfigError

    fmt = format_of(source, workload)
    if fmt is None:
        return []
    origin = (f"--load-in-{workload.load_in}" if workload.load_in != "none"
              else "--peft qlora" if source.quantization() is None else "the checkpoint's quantization_config")
    if weight_quant != "none":
        raise ConfigError(f"--weight-quant {weight_quant} cannot apply on top of {origin} (weights already "
                          f"{fmt.describe()}); drop --weight-quant")
    check_trainable(fmt, source, workload)
    return [f"base weights {fmt.describe()} ({origin}): the format's tensors traced exactly in bytes on the fake "
            f"device, layers named {', '.join(fmt.skip)} kept 16-bit; the real kernels need a GPU, so their "
            "temporaries follow the library's code (dequantized weight per layer where it dequantizes)"]
