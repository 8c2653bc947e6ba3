"""``gpuplan.simulate``: trace the user's own program — model, optimizer, loss and step function —
as they wrote it, on fake tensors with CUDA semantics, and report its peak GPU memory.

    with gpuplan.simulate(gpu="RTX-4090") as sim:
        model = MyNet().cuda()                       # built inside: no real memory is used
        opt = torch.optim.AdamW(model.parameters())
        batch = sim.randn(32, 3, 224, 224)
        for _ in range(2):                           # the second step is the steady state
            train_step(model, opt, batch)            # their code, unchanged (autocast included)
    print(sim.report())

Inside the block, tensors are fake (shapes and dtypes only), ``.cuda()`` / ``.to("cuda")`` keep
them on the fake device, ``torch.autocast("cuda", ...)`` applies CUDA's autocast lists, attention
and dropout run the kernels CUDA would pick for the GPU, and optimizers default to their CUDA
(``foreach``) implementation. Every storage's allocation and free is recorded.

Known limitations: the whole program is one timeline (no phases are known, so memory alive at the
peak that is not a parameter, gradient or optimizer state of a live module/optimizer is reported
as activations); code that reads tensor values (``.item()``, ``if loss < x``) fails on fake
tensors; CUDA streams, ``torch.compile`` and custom CUDA kernels are not modelled.
"""

from __future__ import annotations

import contextlib
import gc
from typing import TYPE_CHECKING, Any

from gpuplan.estimate import Estimate
from gpuplan.hardware import DEFAULT_COMPUTE_CAPABILITY
from gpuplan.trace.step import TracedStep, peak_point
from gpuplan.workload import Workload

if TYPE_CHECKING:
    import torch

    from gpuplan.hardware import GPU


class Simulation:
    """The context manager returned by :func:`simulate`."""

    def __init__(self, gpu: str | GPU | None = None, *, name: str = "simulated program") -> None:
        from gpuplan.hardware import resolve_gpu

        self.gpu = resolve_gpu(gpu)
        self.name = name
        self._stack: contextlib.ExitStack | None = None
        self._recorder: Any = None
        self._attention: Any = None
        self._result: Estimate | None = None
        self._params: dict[int, int] = {}

    # -- tensors for the user's inputs ---------------------------------------------------------
    def randn(self, *size: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        import torch

        return torch.randn(*size, dtype=dtype)

    def randint(self, high: int, size: tuple[int, ...]) -> torch.Tensor:
        import torch

        return torch.randint(0, high, size)

    def zeros(self, *size: int, dtype: torch.dtype | None = None) -> torch.Tensor:
        import torch

        return torch.zeros(*size, dtype=dtype)

    # -- context -------------------------------------------------------------------------------
    def __enter__(self) -> Simulation:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode

        from gpuplan.trace.cuda_semantics import AttentionPolicy, CudaAttention
        from gpuplan.trace.modules import ModuleScope
        from gpuplan.trace.runner import no_weight_init, transformers_on_fake_tensors
        from gpuplan.trace.tracker import Recorder, RecordingMode

        cc = (self.gpu.compute_capability if self.gpu is not None and self.gpu.compute_capability
              else DEFAULT_COMPUTE_CAPABILITY)
        self._recorder = Recorder()
        self._recorder.enter("forward")
        self._recorder.module_scope = ModuleScope()
        self._attention = CudaAttention(AttentionPolicy("auto", cc))
        stack = contextlib.ExitStack()
        stack.enter_context(torch.device("cpu"))
        stack.enter_context(FakeTensorMode(allow_non_fake_inputs=False))
        stack.enter_context(transformers_on_fake_tensors(False))
        stack.enter_context(no_weight_init())
        stack.enter_context(_cuda_device_calls())
        stack.enter_context(_cuda_autocast())
        stack.enter_context(_foreach_optimizers())
        stack.enter_context(_module_conversions())
        stack.enter_context(self._attention)
        gc.collect()
        stack.enter_context(RecordingMode(self._recorder))
        stack.enter_context(self._recorder.module_scope)
        stack.enter_context(self._hooks())
        self._stack = stack
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stack is not None
        try:
            if exc[0] is None:
                self._result = self._build_result()
        finally:
            self._recorder.close()
            self._stack.close()
            self._stack = None

    def _hooks(self) -> contextlib.ExitStack:
        """Classify storages as the program runs: parameters when their module is called,
        gradients and optimizer state when an optimizer steps; and set the phase."""
        import torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        rec = self._recorder
        stack = contextlib.ExitStack()

        def on_module(module: torch.nn.Module, args: Any) -> None:
            for p in module.parameters(recurse=False):
                if id(p) not in self._params:
                    self._params[id(p)] = p.numel()
                rec.register(p, category="parameters")
            for b in module.buffers(recurse=False):
                rec.register(b, category="parameters")

        def before_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            for group in opt.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        rec.register(p.grad, category="gradients")
            rec.enter("optimizer")

        def after_step(opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            for state in opt.state.values():
                for v in state.values():
                    if isinstance(v, torch.Tensor) and rec.storage_id(v) is not None:
                        rec.register(v, category="optimizer_state")
            rec.enter("forward")

        original_backward = torch.Tensor.backward

        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> None:
            rec.enter("backward")
            try:
                original_backward(tensor, *args, **kwargs)  # type: ignore[no-untyped-call]
            finally:
                rec.enter("forward")

        stack.enter_context(torch.nn.modules.module.register_module_forward_pre_hook(on_module))
        stack.enter_context(register_optimizer_step_pre_hook(before_step))
        stack.enter_context(register_optimizer_step_post_hook(after_step))
        torch.Tensor.backward = backward  # type: ignore[method-assign, assignment]
        stack.callback(setattr, torch.Tensor, "backward", original_backward)
        return stack

    def _build_result(self) -> Estimate:
        """Replay the recorded events for the peak, its breakdown and the allocator."""
        from gpuplan.memory.allocator import min_capacity, replay
        from gpuplan.memory.on_gpu import memory_on_gpu
        from gpuplan.trace.scaling import category_vectors

        trace = self._recorder.trace
        params = sum(self._params.values())
        point = peak_point(trace)
        components = category_vectors(trace, [point])[point] if point >= 0 else {}
        stats = replay(trace.events)
        step = TracedStep(
            ops=tuple(trace.ops), tensor_peak_bytes=trace.peak_bytes, tensor_components=components,
            peak_phase="program", params_count=params, param_bytes=components.get("parameters", 0), block_counts={},
            traced_blocks={}, rounded_peak_bytes=stats.peak_allocated_bytes,
            reserved_peak_bytes=stats.peak_reserved_bytes,
            min_reserved_bytes=min_capacity(trace.events, stats.peak_allocated_bytes, stats.peak_reserved_bytes),
            top_activation_modules=(), attention_backends=dict(self._attention.choices),
            notes=("the whole simulated program is one timeline: the peak is over every step run",))
        trains = any(s.category in ("gradients", "optimizer_state") for s in trace.storages.values())
        mem = memory_on_gpu(step, self.gpu, trains=trains)
        return Estimate(
            model=self.name, workload=Workload(mode="train" if trains else "infer"), params_count=params,
            peak_allocated_bytes=mem.peak_allocated_bytes, peak_reserved_bytes=mem.peak_reserved_bytes,
            total_required_bytes=mem.total_required_bytes, min_required_bytes=mem.min_required_bytes,
            components=mem.components, peak_phase="program", flops_per_step=step.flops, step=step, gpu=self.gpu,
            fits=mem.fits, headroom_bytes=mem.headroom_bytes, assumptions=mem.notes)

    def report(self) -> Estimate:
        """The result (same type as :func:`gpuplan.estimate`); available after the block ends."""
        if self._result is None:
            from gpuplan.errors import GpuplanError

            raise GpuplanError("sim.report() is available after the `with gpuplan.simulate(...)` block has ended")
        return self._result


def simulate(gpu: str | GPU | None = None, *, name: str = "simulated program") -> Simulation:
    """Trace the code run inside the ``with`` block on fake tensors with CUDA semantics."""
    return Simulation(gpu, name=name)


@contextlib.contextmanager
def _cuda_device_calls() -> Any:
    """``.cuda()`` and ``.to("cuda")`` keep tensors and modules on the fake device."""
    import torch

    def is_cuda(arg: Any) -> bool:
        return (isinstance(arg, str) and arg.startswith("cuda")) or (
            isinstance(arg, torch.device) and arg.type == "cuda") or isinstance(arg, int)

    originals = (torch.Tensor.cuda, torch.Tensor.to, torch.nn.Module.cuda, torch.nn.Module.to)

    def tensor_cuda(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        return self

    def tensor_to(self: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        args = tuple(a for a in args if not is_cuda(a))
        if is_cuda(kwargs.get("device")):
            kwargs.pop("device")
        return originals[1](self, *args, **kwargs) if args or kwargs else self

    def module_cuda(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        return self

    def module_to(self: torch.nn.Module, *args: Any, **kwargs: Any) -> torch.nn.Module:
        args = tuple(a for a in args if not is_cuda(a))
        if is_cuda(kwargs.get("device")):
            kwargs.pop("device")
        return originals[3](self, *args, **kwargs) if args or kwargs else self

    torch.Tensor.cuda, torch.Tensor.to = tensor_cuda, tensor_to  # type: ignore[method-assign, assignment]
    torch.nn.Module.cuda, torch.nn.Module.to = module_cuda, module_to  # type: ignore[method-assign, assignment]
    try:
        yield
    finally:
        torch.Tensor.cuda, torch.Tensor.to, torch.nn.Module.cuda, torch.nn.Module.to = originals  # type: ignore


@contextlib.contextmanager
def _cuda_autocast() -> Any:
    """``torch.autocast("cuda", dtype)`` (and ``torch.cuda.amp.autocast``) apply CUDA's lists."""
    import torch

    from gpuplan.trace.cuda_semantics import CudaAutocast

    original = torch.autocast

    def autocast(device_type: str = "cuda", dtype: Any = None, enabled: bool = True, **kwargs: Any) -> Any:
        if device_type != "cuda":
            return original(device_type, dtype=dtype, enabled=enabled, **kwargs)
        if not enabled:
            return contextlib.nullcontext()
        return CudaAutocast(dtype or torch.float16)

    torch.autocast = autocast  # type: ignore[misc, assignment]
    try:
        yield
    finally:
        torch.autocast = original  # type: ignore[misc]


@contextlib.contextmanager
def _foreach_optimizers() -> Any:
    """Optimizers built inside resolve to their CUDA default (``foreach``), not the fake-tensor loop."""
    import sys

    import torch.optim  # noqa: F401  (loads every optimizer module)

    def cuda_default(params: Any, differentiable: bool, use_fused: bool = False) -> tuple[bool, bool]:
        if differentiable:
            return False, False
        return use_fused, not use_fused

    # each optimizer module imported the helper by name: patch it where it is looked up
    modules = [m for name, m in list(sys.modules.items())
               if name.startswith("torch.optim") and hasattr(m, "_default_to_fused_or_foreach")]
    saved = [(m, getattr(m, "_default_to_fused_or_foreach")) for m in modules]  # noqa: B009
    for m in modules:
        setattr(m, "_default_to_fused_or_foreach", cuda_default)  # noqa: B010
    try:
        yield
    finally:
        for m, fn in saved:
            setattr(m, "_default_to_fused_or_foreach", fn)  # noqa: B010


@contextlib.contextmanager
def _module_conversions() -> Any:
    """``model.half()`` / ``model.to(torch.bfloat16)``: PyTorch swaps fake parameters in place, which
    the fake mode's weak references forbid; new Parameter objects are assigned instead."""
    import torch

    original = torch.nn.Module._apply

    def apply(self: torch.nn.Module, fn: Any, recurse: bool = True) -> torch.nn.Module:
        if recurse:
            for child in self.children():
                child._apply(fn)  # type: ignore[no-untyped-call]
        for key, param in self._parameters.items():
            if param is None:
                continue
            with torch.no_grad():
                converted = fn(param)
            if converted is not param:
                self._parameters[key] = torch.nn.Parameter(converted, requires_grad=param.requires_grad)
        for key, buf in self._buffers.items():
            if buf is not None:
                self._buffers[key] = fn(buf)
        return self

    torch.nn.Module._apply = apply  # type: ignore[method-assign]
    try:
        yield
    finally:
        torch.nn.Module._apply = original  # type: ignore[method-assign]
