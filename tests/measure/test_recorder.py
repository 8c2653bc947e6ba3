"""The resize-aware recorder: FSDP2 frees and re-allocates unsharded parameters with
``UntypedStorage.resize_``, which a creation/death-only recorder would miss."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist

from gpuplan.measure.recorder import (
    LocalRecordingMode,
    ResizingRecorder,
    collectives_on_private_buffers,
    following_resizes,
)


def test_resize_to_zero_and_back_is_followed() -> None:
    t = torch.empty(1000, dtype=torch.float32)
    rec = ResizingRecorder()
    rec.register(t, category="parameters")
    with LocalRecordingMode(rec), following_resizes(rec):
        t.untyped_storage().resize_(0)
        assert rec.live_bytes == 0
        t.untyped_storage().resize_(4000)
        assert rec.live_bytes == 4000
        tmp = torch.ones(250)  # 1000 bytes while the storage is full size: the peak
        del tmp
        t.untyped_storage().resize_(0)
    rec.close()
    assert rec.trace.peak_bytes == 5000
    assert torch.UntypedStorage.resize_ is not None and rec.live_bytes == 0


def test_storage_dies_at_its_current_size() -> None:
    rec = ResizingRecorder()
    with LocalRecordingMode(rec), following_resizes(rec):
        t = torch.zeros(100)  # 400 bytes, created inside the step
        t.untyped_storage().resize_(0)
        del t  # freed at size 0: nothing more to subtract
        assert rec.live_bytes == 0
    rec.close()
    assert rec.trace.peak_bytes == 400


def test_patch_is_removed_afterwards() -> None:
    original = torch.UntypedStorage.resize_
    with following_resizes(ResizingRecorder()):
        assert torch.UntypedStorage.resize_ is not original
    assert torch.UntypedStorage.resize_ is original


def test_the_recorder_owns_its_phases() -> None:
    """Phases change through ``Recorder.enter``; storages are born in the phase entered (a forward's
    are activations, an optimizer step's temporaries), and an unknown phase is refused."""
    import pytest

    rec = ResizingRecorder()
    with LocalRecordingMode(rec):
        rec.enter("forward")
        a = torch.ones(10)
        rec.enter("optimizer")
        b = torch.ones(20)
    assert [(s.phase, s.category) for s in rec.trace.storages.values()] == [("forward", "activations"),
                                                                           ("optimizer", "temporaries")]
    with pytest.raises(ValueError, match="unknown step phase 'fwd'; allowed: backward, decode"):
        rec.enter("fwd")
    del a, b


class _LateWorker:
    """A stand-in for gloo's worker thread at its slowest: it keeps every tensor a collective was given
    until ``finish`` (gloo's work object holds them until the worker thread drops it, after the caller
    may have dropped its own references: 654 of 4,000 all-gather buffers died on the worker thread in
    a one-process gloo loop on an idle machine, and on a loaded CI machine FSDP2's root all-gather
    buffer outlived the forward, +8.4% on the sweep test's tracked peak)."""

    def __init__(self) -> None:
        self.held: list[torch.Tensor] = []

    def all_gather_single(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                          group: object = None, async_op: bool = False) -> None:
        output_tensor.copy_(input_tensor)  # a one-rank gather
        self.held += [output_tensor, input_tensor]

    def finish(self) -> None:
        self.held.clear()


@pytest.mark.parametrize("private", [True, False])
def test_collective_buffers_die_when_the_step_drops_them(one_rank_group: None, monkeypatch: pytest.MonkeyPatch,
                                                         private: bool) -> None:
    """With the collectives on private clones, a recorded storage dies when the step drops it, whatever the
    worker does with what it was given; without, it lives on until the worker lets go."""
    worker = _LateWorker()
    monkeypatch.setattr(dist, "all_gather_single", worker.all_gather_single)
    rec = ResizingRecorder()
    wrapper = collectives_on_private_buffers() if private else contextlib.nullcontext()
    with LocalRecordingMode(rec), following_resizes(rec), wrapper:
        inp = torch.full((1024,), 7.0)
        out = torch.empty(1024)
        dist.all_gather_single(out, inp)
        assert out[0].item() == 7.0
        del inp, out
        assert rec.live_bytes == (0 if private else 8192)
        worker.finish()
        assert rec.live_bytes == 0
    rec.close()
    assert rec.trace.peak_bytes == 8192


@pytest.mark.parametrize("async_op", [False, True])
def test_collectives_on_private_buffers_still_deliver(one_rank_group: None, async_op: bool) -> None:
    """The real gloo collectives FSDP2 and DeepSpeed call, through the clones: results copied back into the
    caller's tensors, async work already complete, nothing recorded left alive, the patch undone after."""
    rec = ResizingRecorder()
    originals = {name: getattr(dist, name) for name in ("all_gather_single", "all_reduce", "reduce_scatter_single")}
    with LocalRecordingMode(rec), following_resizes(rec), collectives_on_private_buffers():
        for i in range(20):
            inp = torch.full((4096,), float(i))
            out = torch.empty(4096)
            work = dist.all_gather_single(out, inp, async_op=async_op)
            summed = torch.ones(4096)
            work_ar = dist.all_reduce(summed, async_op=async_op)
            scattered = torch.empty(4096)
            dist.reduce_scatter_single(scattered, inp)
            for w in (work, work_ar):
                assert (w is None) != async_op and (w is None or w.is_completed())
            assert out[0].item() == i and summed[0].item() == 1.0 and scattered[-1].item() == i
            del inp, out, summed, scattered, work, work_ar
            assert rec.live_bytes == 0
    rec.close()
    assert all(getattr(dist, name) is fn for name, fn in originals.items())


def test_collectives_untouched_without_a_process_group() -> None:
    original = dist.all_reduce
    with collectives_on_private_buffers():
        assert dist.all_reduce is original
