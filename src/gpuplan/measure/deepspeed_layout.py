"""ZeRO-2 / ZeRO-3 through DeepSpeed (``deepspeed.initialize``), when DeepSpeed is installed.

The workload's own torch optimizer is handed to DeepSpeed (``zero_allow_untested_optimizer``), so
the optimizer state is the same kind as in the other layouts; the step calls ``engine.backward``
and ``engine.step`` as DeepSpeed requires (its gradient partitioning hangs off them). Precision:
fp32, or DeepSpeed's own bf16 mode for ``--precision bf16``; AMP is refused (DeepSpeed's mixed
precision is not torch.autocast). On the CPU the storage-tracked bytes miss the buffers DeepSpeed
allocates inside ``initialize`` (flat partitions it builds before the first step); on CUDA the
allocator's peak counts everything.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from gpuplan.trace.optimizers import build_optimizer
from gpuplan.trace.runner import StepProgram
from gpuplan.trace.tracker import Recorder
from gpuplan.workload import Workload


class _EngineOptimizer:
    """What the step sees as its optimizer: stepping and zeroing go through the engine."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        inner = getattr(engine.optimizer, "optimizer", engine.optimizer)
        self.optim = inner  # the torch optimizer holding the (partitioned) state
        self.state = inner.state

    def step(self) -> None:
        self.engine.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        pass  # engine.step() zeroes (or frees) the gradients itself


class DeepSpeedStep(StepProgram):
    """The training step as DeepSpeed requires it: engine.backward / engine.step."""

    def train_step(self, recorder: Recorder | None = None) -> None:
        engine = self.model
        rec = recorder if recorder is not None else Recorder(record_ops=False)
        for _ in range(self.w.grad_accum):
            rec.enter("forward")
            with self.semantics.forward():
                out = self._forward(rec, **({"use_cache": False} if self.is_hf_lm else {}))
                rec.enter("loss")
                loss = self.source.loss(self.model, out, self.inputs, self.w)
            del out
            rec.enter("backward")
            engine.backward(loss)  # type: ignore[operator]
            del loss
        rec.enter("optimizer")
        engine.step()  # type: ignore[operator]


def _zero_config(stage: int, params: int, hidden: int | None) -> dict[str, Any]:
    """Bucket sizes as gpuplan's planner emits them (``plan --emit deepspeed``): ZeRO-1/2
    ``bucket_elements`` (2e8 elements, smaller for small models; DeepSpeed's default reduce bucket of
    5e8 elements would allocate 2 GB of fp32 staging even for a toy model); ZeRO-3 ``zero3_buckets``
    of the hidden size (h², 0.9·h², 10·h), falling back to ``bucket_elements`` for a model without one."""
    from gpuplan.parallel.evaluate import bucket_elements, zero3_buckets

    bucket = bucket_elements(params)
    if stage == 3:
        if hidden:
            reduce, prefetch, persistence = zero3_buckets(hidden)
            return {"stage": 3, "reduce_bucket_size": reduce, "stage3_prefetch_bucket_size": prefetch,
                    "stage3_param_persistence_threshold": persistence}
        return {"stage": 3, "reduce_bucket_size": bucket, "stage3_prefetch_bucket_size": int(0.9 * bucket)}
    return {"stage": stage, "reduce_bucket_size": bucket, "allgather_bucket_size": bucket}


class DeepSpeedEngine:
    """The pieces of a ``zero2`` / ``zero3`` layout (``measure.layouts.build_layout`` assembles
    them): ``wrap`` builds the engine around the model, the optimizer and the step go through it."""

    step_class = DeepSpeedStep

    def __init__(self, name: str, workload: Workload, device: torch.device) -> None:
        self.stage = int(name[-1])
        self.workload = workload
        self.device = device
        self.engine: Any = None

    def wrap(self, model: nn.Module) -> nn.Module:
        import deepspeed

        workload, device, stage = self.workload, self.device, self.stage
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = build_optimizer(workload.optimizer, workload.optimizer_impl, params,
                                    cuda=device.type == "cuda")
        config = {
            "train_micro_batch_size_per_gpu": workload.batch_size,
            "gradient_accumulation_steps": workload.grad_accum,
            "zero_optimization": _zero_config(stage, sum(p.numel() for p in params),
                                               getattr(getattr(model, "config", None), "hidden_size", None)),
            "zero_allow_untested_optimizer": True,
            "bf16": {"enabled": workload.precision == "bf16"},
            "steps_per_print": 1 << 30,
        }
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        self.engine = engine
        return engine  # type: ignore[no-any-return]

    def make_optimizer(self, params: list[nn.Parameter]) -> Any:
        return _EngineOptimizer(self.engine)

    def live_extra(self) -> list[torch.Tensor]:
        # ZeRO-3 parameters keep their shard in ds_tensor (param.data is emptied)
        if self.engine is None:
            return []
        return [p.ds_tensor for p in self.engine.module.parameters() if getattr(p, "ds_tensor", None) is not None]
