"""A model of PyTorch's CUDA caching allocator, replayed over a trace's allocation events.

It follows ``c10/cuda/CUDACachingAllocator.cpp`` with default settings (no
``PYTORCH_CUDA_ALLOC_CONF``): sizes rounded up to 512 bytes; requests of at most 1 MiB come from
the small pool, carved from 2 MiB segments; larger ones from the large pool, whose new segments
are 20 MiB for requests under 10 MiB and the request rounded up to 2 MiB otherwise; a request
takes the smallest cached free block that fits (best fit), which is split when the remainder is
at least 512 bytes (small pool) or more than 1 MiB (large pool); freed blocks merge with free
neighbours in the same segment; segments stay reserved until ``empty_cache``. When a new segment
would exceed the device's capacity, the allocator frees its fully unused cached segments and
retries before reporting out-of-memory, as PyTorch does.

Known limitations: one stream (no cross-stream reuse delays); no ``expandable_segments``,
``max_split_size_mb`` or ``roundup_power2_divisions``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


class MemEvent(Protocol):
    """What the replay reads of an allocation event (trace/records.MemEvent has it; memory sits below
    trace, so it names the shape rather than importing the type)."""

    @property
    def storage_id(self) -> int: ...

    @property
    def size_bytes(self) -> int:
        """Positive: an allocation of that size; negative: the free of that storage."""
        ...


MIN_BLOCK_BYTES = 512
SMALL_SIZE_BYTES = 1 << 20  # kSmallSize: requests up to 1 MiB use the small pool
SMALL_BUFFER_BYTES = 2 << 20  # kSmallBuffer: small-pool segment size
LARGE_BUFFER_BYTES = 20 << 20  # kLargeBuffer: segment for large requests under kMinLargeAlloc
MIN_LARGE_ALLOC_BYTES = 10 << 20  # kMinLargeAlloc
ROUND_LARGE_BYTES = 2 << 20  # kRoundLarge


def round_size(size: int) -> int:
    if size < MIN_BLOCK_BYTES:
        return MIN_BLOCK_BYTES
    return -(-size // MIN_BLOCK_BYTES) * MIN_BLOCK_BYTES


def segment_size(size: int) -> int:
    if size <= SMALL_SIZE_BYTES:
        return SMALL_BUFFER_BYTES
    if size < MIN_LARGE_ALLOC_BYTES:
        return LARGE_BUFFER_BYTES
    return -(-size // ROUND_LARGE_BYTES) * ROUND_LARGE_BYTES


class _Block:
    __slots__ = ("free", "next", "prev", "segment", "size", "small", "uid")

    def __init__(self, uid: int, size: int, segment: int, small: bool) -> None:
        self.uid = uid
        self.size = size
        self.segment = segment
        self.small = small
        self.free = True
        self.prev: _Block | None = None
        self.next: _Block | None = None


@dataclass(frozen=True, slots=True)
class AllocatorStats:
    peak_reserved_bytes: int
    peak_allocated_bytes: int
    """Peak of the rounded request sizes (what ``max_memory_allocated`` reports)."""
    num_segments: int
    oom_event_index: int | None = None
    """Index of the first allocation that could not be served within the capacity, if any."""
    oom_request_bytes: int = 0


class CachingAllocatorModel:
    """Replays allocations and frees; ``capacity_bytes`` None means unlimited."""

    def __init__(self, capacity_bytes: int | None = None) -> None:
        self.capacity_bytes = capacity_bytes
        self._free: dict[bool, list[tuple[int, int]]] = {True: [], False: []}
        self._blocks: dict[int, _Block] = {}
        self._segments: dict[int, tuple[int, _Block]] = {}  # id -> (size, first block)
        self._by_storage: dict[int, _Block] = {}
        self._uid = 0
        self.reserved_bytes = 0
        self.allocated_bytes = 0
        self.peak_reserved_bytes = 0
        self.peak_allocated_bytes = 0

    def _new_block(self, size: int, segment: int, small: bool) -> _Block:
        self._uid += 1
        block = _Block(self._uid, size, segment, small)
        self._blocks[block.uid] = block
        return block

    def _insert_free(self, block: _Block) -> None:
        block.free = True
        bisect.insort(self._free[block.small], (block.size, block.uid))

    def _remove_free(self, block: _Block) -> None:
        lst = self._free[block.small]
        i = bisect.bisect_left(lst, (block.size, block.uid))
        del lst[i]
        block.free = False

    def malloc(self, storage_id: int, request_bytes: int) -> bool:
        """Serve one allocation; False when it does not fit within the capacity."""
        if request_bytes <= 0:
            return True
        size = round_size(request_bytes)
        small = size <= SMALL_SIZE_BYTES
        lst = self._free[small]
        i = bisect.bisect_left(lst, (size, -1))
        if i < len(lst):
            block = self._blocks[lst[i][1]]
            self._remove_free(block)
        else:
            seg_bytes = segment_size(size)
            if self.capacity_bytes is not None and self.reserved_bytes + seg_bytes > self.capacity_bytes:
                self._release_unused_segments()
                if self.reserved_bytes + seg_bytes > self.capacity_bytes:
                    return False
            seg_id = self._uid + 1
            block = self._new_block(seg_bytes, seg_id, small)
            block.free = False
            self._segments[seg_id] = (seg_bytes, block)
            self.reserved_bytes += seg_bytes
            self.peak_reserved_bytes = max(self.peak_reserved_bytes, self.reserved_bytes)
        remaining = block.size - size
        if (small and remaining >= MIN_BLOCK_BYTES) or (not small and remaining > SMALL_SIZE_BYTES):
            rest = self._new_block(remaining, block.segment, small)
            rest.prev, rest.next = block, block.next
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            self._insert_free(rest)
        self._by_storage[storage_id] = block
        self.allocated_bytes += block.size
        self.peak_allocated_bytes = max(self.peak_allocated_bytes, self.allocated_bytes)
        return True

    def free(self, storage_id: int) -> None:
        block = self._by_storage.pop(storage_id, None)
        if block is None:
            return
        self.allocated_bytes -= block.size
        for neighbour in (block.prev, block.next):
            if neighbour is not None and neighbour.free:
                self._remove_free(neighbour)
                block.size += neighbour.size
                if neighbour is block.prev:
                    block.prev = neighbour.prev
                    if neighbour.prev is not None:
                        neighbour.prev.next = block
                    if self._segments[block.segment][1] is neighbour:
                        self._segments[block.segment] = (self._segments[block.segment][0], block)
                else:
                    block.next = neighbour.next
                    if neighbour.next is not None:
                        neighbour.next.prev = block
                del self._blocks[neighbour.uid]
        self._insert_free(block)

    def _release_unused_segments(self) -> None:
        """Free every segment that is one whole free block (cudaFree of cached memory)."""
        for seg_id, (seg_bytes, first) in list(self._segments.items()):
            if first.free and first.next is None and first.size == seg_bytes:
                self._remove_free(first)
                del self._blocks[first.uid]
                del self._segments[seg_id]
                self.reserved_bytes -= seg_bytes


def replay(events: Iterable[MemEvent], capacity_bytes: int | None = None) -> AllocatorStats:
    """Run a trace's allocation events through the allocator model."""
    model = CachingAllocatorModel(capacity_bytes)
    for index, ev in enumerate(events):
        if ev.size_bytes > 0:
            if not model.malloc(ev.storage_id, ev.size_bytes):
                return AllocatorStats(model.peak_reserved_bytes, model.peak_allocated_bytes, len(model._segments),
                                      index, ev.size_bytes)
        else:
            model.free(ev.storage_id)
    return AllocatorStats(model.peak_reserved_bytes, model.peak_allocated_bytes, len(model._segments))


def min_capacity(events: Sequence[MemEvent], low_bytes: int, high_bytes: int, resolution_bytes: int = 2 << 20) -> int:
    """The smallest device capacity (in ``resolution_bytes`` steps) with which the replay runs
    without out-of-memory: under pressure the allocator releases cached segments and retries, so
    a run can need less than the reserved peak it reaches on a larger device."""
    if replay(events, capacity_bytes=low_bytes).oom_event_index is None:
        return low_bytes
    lo, hi = low_bytes, max(high_bytes, low_bytes)
    while hi - lo > resolution_bytes:
        mid = (lo + hi) // 2
        if replay(events, capacity_bytes=mid).oom_event_index is None:
            hi = mid
        else:
            lo = mid
    return hi
