"""Parallel layouts built with the real PyTorch (and DeepSpeed) APIs, one per rank.

* ``ddp``: ``DistributedDataParallel`` with ``gradient_as_bucket_view=True``, the setting the
  planner plans and ``plan --emit`` writes (not torch's default, False, which keeps a second,
  bucket copy of every gradient). The gradients are views into the buckets, which live for the
  whole run; a communication hook captures them so the recorder counts them as live from the
  start of the step.
* ``fsdp``: FSDP2 ``fully_shard`` on every repeated block, then on the root (the pattern of the
  PyTorch FSDP2 tutorial and torchtitan), ``reshard_after_forward=True``.
* ``zero1``: DDP plus ``ZeroRedundancyOptimizer`` (optimizer state sharded across ranks).
* ``zero2`` / ``zero3``: DeepSpeed ZeRO stages 2 and 3, only when DeepSpeed is installed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from gpuplan.errors import ConfigError, MissingDependencyError, require_choice
from gpuplan.trace.optimizers import LEARNING_RATE
from gpuplan.trace.runner import block_modules, find_containers
from gpuplan.workload import Workload

LAYOUTS: tuple[str, ...] = ("ddp", "fsdp", "zero1", "zero2", "zero3")
GRADIENT_AS_BUCKET_VIEW = True
"""DDP's setting in every measured DDP run (ddp, zero1): the one the planner plans."""
DEEPSPEED_LAYOUTS = frozenset({"zero2", "zero3"})
DEEPSPEED_PRECISIONS = ("fp32", "bf16")
"""fp32, or DeepSpeed's own bf16 mode: its mixed precision is not torch.autocast (deepspeed_layout.py)."""


def check_layout(layout: str, workload: Workload) -> str:
    """Validate a layout name for ``workload`` (one-line errors)."""
    require_choice("layout", layout, LAYOUTS)
    if not workload.trains:
        raise ConfigError(f"--layout {layout} shards a training step; use --mode train (got {workload.mode})")
    if layout in DEEPSPEED_LAYOUTS and importlib.util.find_spec("deepspeed") is None:
        raise MissingDependencyError(f"--layout {layout} runs DeepSpeed ZeRO-{layout[-1]}, and DeepSpeed is "
                                     "not installed (pip install deepspeed); ddp, fsdp and zero1 need only "
                                     "PyTorch")
    if layout in DEEPSPEED_LAYOUTS and workload.precision not in DEEPSPEED_PRECISIONS:
        raise ConfigError(f"--layout {layout} (DeepSpeed) measures --precision fp32 or bf16, not "
                          f"{workload.precision}: DeepSpeed's mixed precision is not torch.autocast")
    if layout == "zero1" and workload.optimizer not in _ZERO1_OPTIMIZERS:
        raise ConfigError(f"--layout zero1 wraps a torch.optim optimizer; --optimizer {workload.optimizer} "
                          f"is not one (allowed: {', '.join(_ZERO1_OPTIMIZERS)})")
    return layout


_ZERO1_OPTIMIZERS: dict[str, tuple[str, dict[str, Any]]] = {
    "adamw": ("AdamW", {}), "adam": ("Adam", {}), "sgd": ("SGD", {}),
    "sgd-momentum": ("SGD", {"momentum": 0.9}),
}


@dataclass(slots=True)
class Layout:
    """How to wrap the model, build the optimizer, and which extra tensors stay live."""

    name: str
    wrap: Callable[[nn.Module], nn.Module]
    make_optimizer: Callable[[list[nn.Parameter]], Any] | None = None
    buckets: dict[int, torch.Tensor] = field(default_factory=dict)
    """DDP's current gradient buckets by bucket index."""
    step_class: type | None = None
    """A step program other than the runner's (DeepSpeed needs engine.backward / engine.step)."""
    extra: Callable[[], list[torch.Tensor]] | None = None

    def live_extra(self) -> list[torch.Tensor]:
        return list(self.buckets.values()) + (self.extra() if self.extra is not None else [])


def _ddp(device: torch.device, layout: Layout) -> Callable[[nn.Module], nn.Module]:
    def wrap(model: nn.Module) -> nn.Module:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
        from torch.nn.parallel import DistributedDataParallel as DDP

        # as planned and emitted (gpuplan.parallel.evaluate, emit): gradients are bucket views
        ddp = DDP(model, device_ids=[device.index] if device.type == "cuda" else None,
                  gradient_as_bucket_view=GRADIENT_AS_BUCKET_VIEW)

        # no annotations: DDP compares them with dist.GradBucket at runtime, and postponed
        # (string) annotations fail that check
        def capture(state, bucket):  # type: ignore[no-untyped-def]
            # by index: DDP rebuilds its buckets after the first iteration (in gradient-ready
            # order), and holding the first set would keep dead buffers alive
            layout.buckets[bucket.index()] = bucket.buffer()
            return allreduce_hook(state, bucket)

        ddp.register_comm_hook(None, capture)  # None: the default process group, as allreduce_hook expects
        return ddp

    return wrap


def _fsdp(device: torch.device, source_counts: dict[str, int]) -> Callable[[nn.Module], nn.Module]:
    def wrap(model: nn.Module) -> nn.Module:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (dist.get_world_size(),))
        containers = find_containers(model, source_counts) if source_counts else {}
        for _, block in block_modules(model, containers):
            fully_shard(block, mesh=mesh, reshard_after_forward=True)
        fully_shard(model, mesh=mesh, reshard_after_forward=True)
        return model

    return wrap


def _zero1_optimizer(workload: Workload) -> Callable[[list[nn.Parameter]], Any]:
    def make(params: list[nn.Parameter]) -> Any:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        cls_name, extra = _ZERO1_OPTIMIZERS[workload.optimizer]
        kwargs: dict[str, Any] = {"lr": LEARNING_RATE, **extra}
        return ZeroRedundancyOptimizer(params, optimizer_class=getattr(torch.optim, cls_name), **kwargs)

    return make


def build_layout(name: str, workload: Workload, device: torch.device, source_counts: dict[str, int]
                 ) -> Layout:
    check_layout(name, workload)  # as the launcher checked it (DeepSpeed's precisions among others)
    layout = Layout(name=name, wrap=lambda m: m)
    if name in ("ddp", "zero1"):
        layout.wrap = _ddp(device, layout)
        if name == "zero1":
            layout.make_optimizer = _zero1_optimizer(workload)
    elif name == "fsdp":
        layout.wrap = _fsdp(device, source_counts)
    else:
        from gpuplan.measure.deepspeed_layout import DeepSpeedEngine

        ds = DeepSpeedEngine(name, workload, device)
        layout = Layout(name=name, wrap=ds.wrap, make_optimizer=ds.make_optimizer, step_class=ds.step_class,
                        extra=ds.live_extra)
    return layout
