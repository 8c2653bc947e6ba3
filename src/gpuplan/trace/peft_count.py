"""What a PEFT estimate tells the user besides the trace: the adapters' exact parameter count at
full depth, as ``peft`` itself counts them (``get_nb_trainable_parameters``).

Apart from trace/peft.py because it builds the model through the runner, which applies PEFT
through trace/adapt.py: keeping it here keeps the imports one-way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gpuplan.trace.peft import trainable_parameters
from gpuplan.workload import ALL_LINEAR

if TYPE_CHECKING:
    from gpuplan.models.sources import ModelSource
    from gpuplan.workload import Workload


def trainable_count(source: ModelSource, workload: Workload) -> tuple[int, int]:
    """(trainable, all) parameters of the full-depth PEFT model as ``peft`` counts them
    (``PeftModel.get_nb_trainable_parameters``), built on fake tensors: no weight is allocated."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuplan.trace.runner import StepRunner, Target, quiet, transformers_on_fake_tensors

    runner = StepRunner(source, workload, Target(), fake=True)
    with quiet(), torch.device("cpu"), FakeTensorMode(), \
            transformers_on_fake_tensors(source.kind in ("catalog", "hf-config")):
        model = runner.build_model()
        counter = getattr(model, "get_nb_trainable_parameters", None)
        if callable(counter):
            trainable, total = counter()
            return int(trainable), int(total)
        return trainable_parameters(model)


def peft_notes(source: ModelSource, workload: Workload) -> list[str]:
    """What a PEFT estimate assumes, with the adapters' exact parameter count (empty without PEFT)."""
    if not workload.uses_peft:
        return []
    import peft

    trainable, _ = trainable_count(source, workload)
    if workload.lora_targets == (ALL_LINEAR,):
        targets = "every linear layer but the output head"
    elif workload.lora_targets:
        targets = ", ".join(workload.lora_targets)
    else:
        targets = "PEFT's default targets for the architecture"
    method = {"lora": "LoRA", "qlora": "QLoRA (LoRA on an NF4 base)", "dora": "DoRA"}[workload.peft]
    extra = f"; trained whole: {', '.join(workload.train_modules)}" if workload.train_modules else ""
    return [f"{method} with peft {peft.__version__}: {trainable:,} trainable parameters (rank {workload.lora_rank} "
            f"on {targets}{extra}); the frozen base holds no gradients or optimizer state; adapters in float32 "
            "(peft's autocast_adapter_dtype)"]
