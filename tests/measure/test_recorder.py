"""The resize-aware recorder: FSDP2 frees and re-allocates unsharded parameters with
``UntypedStorage.resize_``, which a creation/death-only recorder would miss."""

from __future__ import annotations

import torch

from gpuplan.measure.recorder import LocalRecordingMode, ResizingRecorder, following_resizes


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
