"""The real step: the estimator's own step program, built on a real device.

The estimate traces ``gpuplan.trace.runner.StepProgram`` on fake tensors; a measurement must
run that same program (same inputs, loss, optimizer, checkpointing, zero_grad) on real tensors,
or the comparison would measure two programs. Only what is host-specific changes here: the model
and its inputs are built on ``device``, and the program's semantics are the device's own
(``DeviceSemantics``: real ``torch.autocast``; the trace's CUDA emulation exists only because
the trace runs on the CPU).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from gpuplan.measure.recorder import (
    LocalRecordingMode,
    ResizingRecorder,
    collectives_on_private_buffers,
    following_resizes,
    local_tensor,
)
from gpuplan.models.sources import Inputs, ModelSource
from gpuplan.trace.optimizers import build_optimizer
from gpuplan.trace.records import RawTrace
from gpuplan.trace.runner import (
    DTYPES,
    DeviceSemantics,
    StepProgram,
    StepRunner,
    Target,
    apply_checkpointing,
    block_modules,
    find_containers,
    quiet,
    step_gc,
)
from gpuplan.workload import Workload

Wrap = Callable[[nn.Module], nn.Module]
MakeOptimizer = Callable[[list[nn.Parameter]], Any]


@dataclass(slots=True)
class Program:
    """A built model, optimizer and inputs on one device, and the step that runs them."""

    model: nn.Module
    optimizer: Any
    inputs: Inputs
    step: StepProgram
    device: torch.device
    workload: Workload
    live_extra: Callable[[], list[torch.Tensor]] | None = None
    """Tensors a layout keeps alive outside the model and optimizer (DDP's gradient buckets)."""

    def run_step(self) -> None:
        """One unrecorded step (a training step, a forward, or a whole generation)."""
        self.step.run(None)

    def record_step(self) -> RawTrace:
        """One step under the storage recorder: the tracked bytes of this rank/process."""
        rec = ResizingRecorder()
        self._register_existing(rec)
        # as the runner does: no cyclic GC inside the recorded step except where the step collects
        with step_gc():
            try:
                # no module attribution: a measurement needs the bytes, not which module holds them
                with LocalRecordingMode(rec), following_resizes(rec), collectives_on_private_buffers():
                    self.step.run(rec)
            finally:
                rec.close()
        return rec.trace

    def _register_existing(self, rec: ResizingRecorder) -> None:
        # what is alive before the step starts: weights, gradients kept by zero_grad(set_to_none=False),
        # optimizer state, inputs (as the runner registers them, but through DTensor shards)
        for p in self.model.parameters():
            rec.register(p, category="parameters")
            if p.grad is not None:
                rec.register(p.grad, category="gradients")
        for b in self.model.buffers():
            rec.register(b, category="parameters")
        opt = getattr(self.optimizer, "optim", self.optimizer)  # ZeroRedundancyOptimizer holds the local one
        if opt is not None:
            for state in opt.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor):
                        rec.register(local_tensor(v), category="optimizer_state")
        for t in self.inputs.tensors():
            rec.register(t, category="activations")
        for t in self.live_extra() if self.live_extra is not None else ():
            rec.register(t, category="gradients")


def _to_device(inputs: Inputs, device: torch.device) -> Inputs:
    def move(v: Any) -> Any:
        return v.to(device) if isinstance(v, torch.Tensor) else v

    return Inputs(args=tuple(move(a) for a in inputs.args),
                  kwargs={k: move(v) for k, v in inputs.kwargs.items()}, labels=move(inputs.labels))


def build_program(source: ModelSource, workload: Workload, device: torch.device, *,
                  compute_capability: tuple[int, int] | None = None, wrap: Wrap | None = None,
                  make_optimizer: MakeOptimizer | None = None,
                  live_extra: Callable[[], list[torch.Tensor]] | None = None,
                  step_class: type[StepProgram] | None = None) -> Program:
    """Build ``source`` for ``workload`` on ``device``; ``wrap`` applies a parallel layout to the
    model (after checkpointing, before the optimizer), ``make_optimizer`` replaces the workload's
    optimizer (ZeRO-1 wraps it)."""
    cuda = device.type == "cuda"
    if cuda and workload.precision == "tf32":
        # what --precision tf32 means on a GPU: TF32 tensor cores for fp32 matmuls and convolutions
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    target = Target(cuda=cuda, compute_capability=compute_capability or (9, 0))
    runner = StepRunner(source, workload, target, fake=False)
    with quiet(), torch.device(device):
        model = runner.build_model().to(device)
        counts = source.layer_counts()
        containers = find_containers(model, counts) if counts else {}
        amp_dtype = DTYPES[workload.autocast_dtype] if workload.autocast_dtype else None
        semantics = DeviceSemantics(device.type, amp_dtype)
        if workload.trains and workload.checkpointing != "none":
            apply_checkpointing(block_modules(model, containers), workload.checkpointing, semantics.recompute)
        inputs = _to_device(source.inputs(model, workload), device)
        unwrapped = model
        if wrap is not None:
            model = wrap(model)
        optimizer = None
        if workload.trains:
            params = [p for p in model.parameters() if p.requires_grad]
            optimizer = (make_optimizer(params) if make_optimizer is not None
                         else build_optimizer(workload.optimizer, workload.optimizer_impl, params, cuda=cuda))
    step = (step_class or StepProgram)(source, workload, model, optimizer, inputs, semantics, unwrapped=unwrapped)
    return Program(model=model, optimizer=optimizer, inputs=inputs, step=step, device=device,
                   workload=workload, live_extra=live_extra)

