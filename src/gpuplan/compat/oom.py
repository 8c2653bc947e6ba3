"""Read the numbers out of a CUDA out-of-memory message and say what they mean.

Message formats (data/errors.yaml, source S-PT-CCA): the current caching-allocator text ("GPU 0 has a
total capacity of T of which F is free. ... A is allocated by PyTorch, and R is reserved by PyTorch but
unallocated"), the 2.1-era one with the "capacty" typo, and the <= 2.0 one ("(GPU 0; T total capacity;
A already allocated; F free; R reserved in total by PyTorch)").
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuplan.units import GIB, KIB, MIB, format_bytes

_SIZE = r"(\d+(?:\.\d+)?) ?(bytes|B|KiB|MiB|GiB|TiB)"
_UNITS = {"bytes": 1, "b": 1, "kib": KIB, "mib": MIB, "gib": GIB, "tib": 1024 * GIB}

_TRIED = re.compile(rf"(CUDA|HIP) out of memory\. Tried to allocate {_SIZE}")
_NEW_TOTAL = re.compile(rf"GPU (\d+) has a total capac(?:i)?ty of {_SIZE} of which {_SIZE} is free")
_PROCESS = re.compile(rf"this process has {_SIZE} memory in use")
_OTHER = re.compile(rf"Process \d+ has {_SIZE} memory in use")
_ALLOWED = re.compile(rf"{_SIZE} allowed;")
_NEW_SPLIT = re.compile(
    rf"Of the allocated memory {_SIZE} is allocated by PyTorch, "
    rf"(?:with {_SIZE} allocated in private pools \(e\.g\., CUDA Graphs\), )?"
    rf"and {_SIZE} is reserved by PyTorch but unallocated"
)
_OLD = re.compile(
    rf"\(GPU (\d+); {_SIZE} total capacity; {_SIZE} already allocated; {_SIZE} free; "
    rf"(?:{_SIZE} allowed; )?{_SIZE} reserved in total by PyTorch\)"
)


def _bytes(number: str, unit: str) -> int:
    return round(float(number) * _UNITS[unit.lower()])


@dataclass(frozen=True)
class OomNumbers:
    """Everything the message said, in bytes; None where the message did not say it."""

    tried_bytes: int
    device: int | None
    total_bytes: int | None
    free_bytes: int | None
    allocated_bytes: int | None  # allocated by PyTorch (tensors alive)
    reserved_unallocated_bytes: int | None  # cached by the allocator but not in use
    private_pools_bytes: int | None
    process_in_use_bytes: int | None  # this process, including non-PyTorch memory
    other_processes_bytes: int | None  # sum of the "Process N has X" entries
    allowed_bytes: int | None  # set_per_process_memory_fraction limit
    format: str  # "current", "2.1-typo" or "legacy"


@dataclass(frozen=True)
class OomVerdict:
    kind: str  # "larger-than-gpu", "fragmentation", "other-processes", "needs-less-memory"
    shortfall_bytes: int | None  # how much more would have had to be free (None if unknown)
    summary: str
    actions: tuple[str, ...]


def parse_oom(text: str) -> OomNumbers | None:
    """The numbers of the first OOM message in ``text``; None if there is none."""
    tried = _TRIED.search(text)
    if tried is None:
        return None
    tried_bytes = _bytes(tried.group(2), tried.group(3))
    allowed = _ALLOWED.search(text)
    allowed_bytes = _bytes(allowed.group(1), allowed.group(2)) if allowed else None
    new = _NEW_TOTAL.search(text)
    if new:
        split = _NEW_SPLIT.search(text)
        process = _PROCESS.search(text)
        others = [_bytes(m.group(1), m.group(2)) for m in _OTHER.finditer(text)]
        return OomNumbers(
            tried_bytes=tried_bytes,
            device=int(new.group(1)),
            total_bytes=_bytes(new.group(2), new.group(3)),
            free_bytes=_bytes(new.group(4), new.group(5)),
            allocated_bytes=_bytes(split.group(1), split.group(2)) if split else None,
            reserved_unallocated_bytes=_bytes(split.group(5), split.group(6)) if split else None,
            private_pools_bytes=_bytes(split.group(3), split.group(4)) if split and split.group(3) else None,
            process_in_use_bytes=_bytes(process.group(1), process.group(2)) if process else None,
            other_processes_bytes=sum(others) if others else None,
            allowed_bytes=allowed_bytes,
            format="2.1-typo" if "total capacty" in text else "current",
        )
    old = _OLD.search(text)
    if old:
        allocated = _bytes(old.group(4), old.group(5))
        reserved = _bytes(old.group(10), old.group(11))
        return OomNumbers(
            tried_bytes=tried_bytes,
            device=int(old.group(1)),
            total_bytes=_bytes(old.group(2), old.group(3)),
            free_bytes=_bytes(old.group(6), old.group(7)),
            allocated_bytes=allocated,
            reserved_unallocated_bytes=max(reserved - allocated, 0),
            private_pools_bytes=None,
            process_in_use_bytes=None,
            other_processes_bytes=None,
            allowed_bytes=_bytes(old.group(8), old.group(9)) if old.group(8) else allowed_bytes,
            format="legacy",
        )
    return OomNumbers(tried_bytes, None, None, None, None, None, None, None, None, allowed_bytes, "unknown")


def judge_oom(n: OomNumbers) -> OomVerdict:
    """What the numbers say: too big for the GPU, fragmentation, other processes, or too much data."""
    fit_cmd = "gpuplan fit MODEL --gpu GPU [workload flags]"
    tried = format_bytes(n.tried_bytes)
    capacity = n.allowed_bytes or n.total_bytes
    if capacity is not None and n.tried_bytes > capacity:
        return OomVerdict(
            "larger-than-gpu", n.tried_bytes - capacity,
            f"A single allocation of {tried} is larger than the whole {format_bytes(capacity)} "
            f"{'allowed for this process' if n.allowed_bytes else 'GPU'}: no allocator setting can make it "
            "fit.",
            (f"Shrink the tensor behind it by at least {format_bytes(n.tried_bytes - capacity)} (smaller "
             "batch, "
             "sequence or image, chunked computation), or shard/offload the model.",
             f"`{fit_cmd}` finds the largest batch and cheapest memory techniques that fit."),
        )
    if n.free_bytes is None:
        return OomVerdict("needs-less-memory", None,
                          f"Tried to allocate {tried}; the message does not say how much was free.",
                          (f"`{fit_cmd}` to find a batch size and techniques that fit.",))
    reserved_free = n.reserved_unallocated_bytes or 0
    shortfall = n.tried_bytes - n.free_bytes - reserved_free
    if n.free_bytes >= n.tried_bytes:
        return OomVerdict(
            "fragmentation", shortfall,
            f"The GPU reported {format_bytes(n.free_bytes)} free, more than the {tried} requested, yet the "
            "allocation failed: device memory is fragmented (or a per-process memory limit applies).",
            ("export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (lets the allocator grow segments "
             "instead of needing one new contiguous block).",
             "If torch.cuda.set_per_process_memory_fraction is used, raise the fraction."),
        )
    if shortfall <= 0:
        actions = [
            "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (lets the allocator grow segments "
            "instead of needing one new contiguous block).",
            "Also possible: free references to tensors you no longer need before the large allocation.",
        ]
        headroom = n.free_bytes + reserved_free
        if n.total_bytes and n.allocated_bytes and n.allocated_bytes >= 0.9 * n.total_bytes:
            # defragmenting leaves almost nothing: the next allocation of the step would fail instead
            actions.append(
                f"Live tensors already take {format_bytes(n.allocated_bytes)} of "
                f"{format_bytes(n.total_bytes)}: even without fragmentation only {format_bytes(headroom)} "
                f"would be left, so the workload probably needs less memory too (`{fit_cmd}`)."
            )
        return OomVerdict(
            "fragmentation", shortfall,
            f"{format_bytes(n.free_bytes)} free on the GPU plus {format_bytes(reserved_free)} reserved by "
            f"PyTorch but unallocated would cover the {tried} request, yet no single block was large enough: "
            "the memory is fragmented.",
            tuple(actions),
        )
    actions = []
    if n.other_processes_bytes:
        actions.append(f"Other processes hold {format_bytes(n.other_processes_bytes)} on this GPU: stop them "
                       "(nvidia-smi lists them) or use another GPU.")
    elif n.total_bytes is not None and n.process_in_use_bytes is not None:
        outside = n.total_bytes - n.free_bytes - n.process_in_use_bytes
        if outside > max(shortfall, GIB // 2):
            actions.append(f"About {format_bytes(outside)} is used outside this process: stop other "
                           "processes on this GPU or use another GPU.")
    if reserved_free >= GIB:
        actions.append(f"{format_bytes(reserved_free)} is reserved but unallocated: "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True makes part of it usable.")
    # "Otherwise" only reads right after another remedy; as the first bullet it points at nothing
    lead = "Otherwise reduce" if actions else "Reduce"
    actions.append(f"{lead} peak memory by at least {format_bytes(shortfall)} (more, since later "
                   "allocations follow): smaller batch or sequence, bf16/fp16 autocast, activation "
                   "checkpointing, a lighter optimizer, or FSDP/ZeRO sharding.")
    actions.append(f"`{fit_cmd}` finds the largest batch and the cheapest technique set that fit.")
    others_enough = bool(n.other_processes_bytes) and (n.other_processes_bytes or 0) >= shortfall
    kind = "other-processes" if others_enough else "needs-less-memory"
    return OomVerdict(
        kind, shortfall,
        f"Tried to allocate {tried} with {format_bytes(n.free_bytes)} free and {format_bytes(reserved_free)} "
        f"reserved-but-unallocated: at least {format_bytes(shortfall)} more would have had to be free.",
        tuple(actions),
    )


_MPS = re.compile(
    r"MPS backend out of memory \(MPS allocated: ([\d.]+) ?([KMGT]i?B), other allocations: ([\d.]+) ?([KMGT]i?B), "
    r"max allowed: ([\d.]+) ?([KMGT]i?B)\)\. Tried to allocate ([\d.]+) ?([KMGT]i?B)"
)
# the MPS allocator's format_size divides by 1024 whether it prints "GB" or "GiB" (both spellings occur)
_MPS_UNITS = {"k": KIB, "m": MIB, "g": GIB, "t": 1024 * GIB}


@dataclass(frozen=True)
class MpsOomNumbers:
    allocated_bytes: int  # MPS allocated: PyTorch's live buffers
    other_bytes: int  # other allocations: Metal's own buffers and caches in this process
    max_allowed_bytes: int  # the high-watermark cap
    tried_bytes: int


def parse_mps_oom(text: str) -> MpsOomNumbers | None:
    match = _MPS.search(text)
    if match is None:
        return None
    values = [round(float(match.group(i)) * _MPS_UNITS[match.group(i + 1)[0].lower()]) for i in (1, 3, 5, 7)]
    return MpsOomNumbers(*values)


def mps_oom_details(n: MpsOomNumbers, default_ratio: float) -> tuple[str, ...]:
    """What the numbers of an MPS out-of-memory message say, in sentences."""
    used = n.allocated_bytes + n.other_bytes
    short = used + n.tried_bytes - n.max_allowed_bytes
    out = [
        f"PyTorch's tensors hold {format_bytes(n.allocated_bytes)} and Metal's other allocations "
        f"{format_bytes(n.other_bytes)}; the cap is {format_bytes(n.max_allowed_bytes)}, so the "
        f"{format_bytes(n.tried_bytes)} request was {format_bytes(max(short, 0))} over it.",
        f"At the default PYTORCH_MPS_HIGH_WATERMARK_RATIO={default_ratio}, that cap means Metal recommends "
        f"{format_bytes(round(n.max_allowed_bytes / default_ratio))} as this Mac's GPU working set.",
    ]
    if n.other_bytes > n.allocated_bytes:
        out.append("Most of it is outside PyTorch's tensors: torch.mps.empty_cache() releases Metal's cached "
                   "buffers; other programs share the same memory.")
    return tuple(out)
