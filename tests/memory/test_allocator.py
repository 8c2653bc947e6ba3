"""The caching-allocator model follows c10/cuda/CUDACachingAllocator.cpp's default rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.memory.allocator import CachingAllocatorModel, replay, round_size, segment_size
from gpuplan.trace.records import MemEvent

MIB = 1 << 20


def test_rounding_and_segment_sizes() -> None:
    assert round_size(1) == 512
    assert round_size(513) == 1024
    assert segment_size(1 * MIB) == 2 * MIB  # small pool: 2 MiB segments
    assert segment_size(1 * MIB + 512) == 20 * MIB  # large request under 10 MiB: a 20 MiB segment
    assert segment_size(10 * MIB + 1) == 12 * MIB  # 10 MiB and up: rounded to 2 MiB


def test_small_blocks_share_one_segment_and_are_reused() -> None:
    alloc = CachingAllocatorModel()
    for sid in range(4):
        assert alloc.malloc(sid, 1000)
    assert alloc.reserved_bytes == 2 * MIB
    assert alloc.allocated_bytes == 4 * 1024
    alloc.free(1)
    assert alloc.malloc(9, 1024)  # best fit reuses the freed 1 KiB block
    assert alloc.reserved_bytes == 2 * MIB


def test_large_request_splits_a_20_mib_segment_and_merges_on_free() -> None:
    alloc = CachingAllocatorModel()
    alloc.malloc(1, 4 * MIB)
    alloc.malloc(2, 4 * MIB)
    assert alloc.reserved_bytes == 20 * MIB
    alloc.free(1)
    alloc.free(2)
    assert alloc.malloc(3, 18 * MIB)  # the merged free block serves it: no new segment
    assert alloc.reserved_bytes == 20 * MIB


def test_capacity_frees_cached_segments_before_failing() -> None:
    stats = replay([MemEvent(1, 30 * MIB), MemEvent(1, -30 * MIB), MemEvent(2, 40 * MIB)], capacity_bytes=50 * MIB)
    assert stats.oom_event_index is None  # the cached 30 MiB segment was released for the 40 MiB one
    stats = replay([MemEvent(1, 30 * MIB), MemEvent(2, 40 * MIB)], capacity_bytes=50 * MIB)
    assert stats.oom_event_index == 1 and stats.oom_request_bytes == 40 * MIB


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=64 * MIB), min_size=1, max_size=40), st.randoms())
def test_reserved_covers_allocated_and_frees_return_everything(sizes: list[int], rnd: object) -> None:
    alloc = CachingAllocatorModel()
    for sid, size in enumerate(sizes):
        alloc.malloc(sid, size)
        assert alloc.reserved_bytes >= alloc.allocated_bytes >= round_size(size)
    order = list(range(len(sizes)))
    rnd.shuffle(order)  # type: ignore[attr-defined]
    for sid in order:
        alloc.free(sid)
    assert alloc.allocated_bytes == 0
    assert alloc.peak_reserved_bytes >= alloc.peak_allocated_bytes >= sum(round_size(s) for s in sizes) // len(sizes)


def test_min_capacity_is_below_the_uncapped_reserve() -> None:
    """Two 30 MiB tensors freed, then a 40 MiB one: uncapped, the cache keeps both 30 MiB segments
    (100 MiB reserved); with 64 MiB the allocator releases them and the 40 MiB request succeeds."""
    from gpuplan.memory.allocator import min_capacity

    events = [MemEvent(1, 30 * MIB), MemEvent(2, 30 * MIB), MemEvent(1, -30 * MIB), MemEvent(2, -30 * MIB),
              MemEvent(3, 40 * MIB)]
    uncapped = replay(events)
    assert uncapped.peak_reserved_bytes == 100 * MIB
    needed = min_capacity(events, uncapped.peak_allocated_bytes, uncapped.peak_reserved_bytes)
    assert 60 * MIB <= needed <= 62 * MIB
    assert replay(events, capacity_bytes=needed).oom_event_index is None
    assert replay(events, capacity_bytes=needed - 2 * MIB).oom_event_index is not None
