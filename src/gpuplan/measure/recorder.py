"""The trace recorder, extended for real distributed runs.

``gpuplan.trace.tracker.Recorder`` counts a storage's bytes from its creation to its death. Two
things a real FSDP2 / DTensor run does escape that:

* FSDP2 frees and re-allocates the unsharded parameters with ``UntypedStorage.resize_`` (to 0
  after a module's forward, back to full size before its backward) instead of creating new
  storages; ``torch.distributed._tools.mem_tracker`` patches ``resize_`` for the same reason.
* DTensor parameters, gradients and optimizer states are wrapper tensors without a storage of
  their own; their memory is the local shard's. The dispatch mode steps aside for them
  (``NotImplemented``) so the local ops they run underneath are what gets recorded.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

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
