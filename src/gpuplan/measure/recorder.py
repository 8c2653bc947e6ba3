"""The trace recorder, extended for real distributed runs.

``gpuplan.trace.tracker.Recorder`` counts a storage's bytes from its creation to its death. Two
things a real FSDP2 / DTensor run does escape that:

* FSDP2 frees and re-allocates the unsharded parameters with ``UntypedStorage.resize_`` (to 0
  after a module's forward, back to full size before its backward) instead of creating new
  storages; ``torch.distributed._tools.mem_tracker`` patches ``resize_`` for the same reason.
* DTensor parameters, gradients and optimizer states are wrapper tensors without a storage of
  their own; their memory is the local shard's. The dispatch mode steps aside for them
  (``NotImplemented``) so the local ops they run underneath are what gets recorded.
* A gloo collective's work object holds its tensors, and gloo's worker thread may drop that
  reference *after* the caller has dropped its own: the storage then dies on the worker thread
  whenever the scheduler runs it, and the recorded peak depends on timing (a loaded machine kept
  FSDP2's 283 KiB root all-gather buffer of the tiny GPT-2 alive into backward: +8.4% on one CI
  run). :func:`collectives_on_private_buffers` hands gloo private copies instead.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import _disable_current_modes

from gpuplan.trace.records import MemEvent
from gpuplan.trace.tracker import Recorder, RecordingMode


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The tensor holding ``t``'s memory on this rank (the local shard of a DTensor)."""
    inner = getattr(t, "_local_tensor", None)
    return inner if isinstance(inner, torch.Tensor) else t


class ResizingRecorder(Recorder):
    """A :class:`Recorder` that follows ``UntypedStorage.resize_`` and sees through DTensors."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._sizes: dict[int, int] = {}

    def register(self, t: torch.Tensor, *, category: str | None = None, block: str | None = None) -> int:
        return super().register(local_tensor(t), category=category, block=block)

    def _new_storage(self, st: torch.UntypedStorage) -> int:
        sid = super()._new_storage(st)
        self._sizes[sid] = st.nbytes()
        return sid

    def _on_free(self, sid: int, size: int) -> None:
        # the storage dies at its current size, which resize_ may have changed since creation
        super()._on_free(sid, self._sizes.pop(sid, size))

    def on_resize(self, st: torch.UntypedStorage) -> None:
        if not self._active:
            return
        sid = self._ids.get(st)  # type: ignore[no-untyped-call]
        new = st.nbytes()
        if sid is None:
            if new > 0:
                self._new_storage(st)
            return
        delta = new - self._sizes.get(sid, 0)
        if delta == 0:
            return
        self._sizes[sid] = new
        self._live_bytes += delta
        self.trace.events.append(MemEvent(sid, delta))
        if self._live_bytes > self.trace.peak_bytes:
            self.trace.peak_bytes = self._live_bytes
            self.trace.peak_event_index = len(self.trace.events) - 1
            self.trace.peak_phase = self.phase


class LocalRecordingMode(RecordingMode):  # type: ignore[no-untyped-call]
    """Records plain-tensor ops; wrapper subclasses (DTensor) dispatch to their local ops first."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: Any = None) -> Any:
        if any(t is not torch.Tensor and t is not torch.nn.Parameter for t in types):
            return NotImplemented
        return super().__torch_dispatch__(func, types, args, kwargs)


@contextlib.contextmanager
def following_resizes(recorder: ResizingRecorder) -> Iterator[None]:
    """Patch ``UntypedStorage.resize_`` for the duration so ``recorder`` sees every resize."""
    original = torch.UntypedStorage.resize_

    def resize_(self: torch.UntypedStorage, size: int) -> Any:
        out = original(self, size)
        recorder.on_resize(self)
        return out

    torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        torch.UntypedStorage.resize_ = original  # type: ignore[method-assign]


def _on_private_buffers(collective: Callable[..., Any], tensor_args: tuple[str, ...]) -> Callable[..., Any]:
    """``collective`` run on clones of its ``tensor_args`` (the first one is the output, or the tensor
    reduced in place), the result copied back into the caller's tensor on this thread. The clones and
    the collective run outside the recording mode: the collective writes into its arguments and
    allocates nothing of the step's, and a clone is never one of the step's storages."""
    signature = inspect.signature(collective)

    def run(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        real = bound.arguments[tensor_args[0]]
        with _disable_current_modes():
            for name in tensor_args:
                bound.arguments[name] = bound.arguments[name].detach().clone()
            work = collective(*bound.args, **bound.kwargs)
            if work is not None:  # async_op=True: completed here, before the copy back
                work.wait()
        with torch.no_grad():
            real.copy_(bound.arguments[tensor_args[0]])
        return work

    return run


# the torch.distributed functions a measured layout calls from Python during a step (FSDP2: the
# *_single pair; DeepSpeed and older FSDP2: *_tensor), by their tensor parameters, output first. DDP's
# reducer calls the process group from C++ on bucket tensors that live for the whole run, so its
# frees never depend on the worker thread.
_COLLECTIVES: dict[str, tuple[str, ...]] = {
    "all_gather_single": ("output_tensor", "input_tensor"),
    "all_gather_into_tensor": ("output_tensor", "input_tensor"),
    "reduce_scatter_single": ("output", "input"),
    "reduce_scatter_tensor": ("output", "input"),
    "all_reduce": ("tensor",),
    "broadcast": ("tensor",),
}


@contextlib.contextmanager
def collectives_on_private_buffers() -> Iterator[None]:
    """Inside: the :data:`_COLLECTIVES` of ``torch.distributed`` run on clones made outside the
    recording mode, so every recorded storage dies when the step's own code drops it, on this
    thread. A no-op where no process group is initialised. The clones cost a copy per collective
    (the recorded step only; the timed steps call the collectives as they are)."""
    if not (dist.is_available() and dist.is_initialized()):
        yield
        return
    originals = {name: getattr(dist, name) for name in _COLLECTIVES if hasattr(dist, name)}
    for name, fn in originals.items():
        setattr(dist, name, _on_private_buffers(fn, _COLLECTIVES[name]))
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
