"""What a PEFT estimate tells the user besides the trace: the adapters' parameter count at full depth,
read from the traced step (``TracedStep.trainable_params_count``, scaled from the traced blocks; it
equals ``peft``'s own ``get_nb_trainable_parameters``, tested), so stating it builds nothing and
imports neither torch nor peft (an answer from the trace cache states it too).
"""

from __future__ import annotations

from importlib import metadata
from typing import TYPE_CHECKING

from gpuplan.workload import ALL_LINEAR

if TYPE_CHECKING:
    from gpuplan.trace.records import TracedStep
    from gpuplan.workload import Workload


def peft_notes(workload: Workload, step: TracedStep) -> list[str]:
    """What a PEFT estimate assumes, with the adapters' exact parameter count (empty without PEFT)."""
    if not workload.uses_peft:
        return []
    trainable = step.trainable_params_count if step.trainable_params_count is not None else 0
    if workload.lora_targets == (ALL_LINEAR,):
        targets = "every linear layer but the output head"
    elif workload.lora_targets:
        targets = ", ".join(workload.lora_targets)
    else:
        targets = "PEFT's default targets for the architecture"
    method = {"lora": "LoRA", "qlora": "QLoRA (LoRA on an NF4 base)", "dora": "DoRA"}[workload.peft]
    extra = f"; trained whole: {', '.join(workload.train_modules)}" if workload.train_modules else ""
    return [f"{method} with peft {metadata.version('peft')}: {trainable:,} trainable parameters (rank "
            f"{workload.lora_rank} on {targets}{extra}); the frozen base holds no gradients or optimizer state; "
            "adapters in float32 (peft's autocast_adapter_dtype)"]
