"""The GPU catalog: ``get_gpu(name)`` and ``list_gpus(filters)``.

Data files are read on first use (not at import) and cached for the life of the process. A name that is
exactly an id reads that GPU's file alone: reading all of them takes ~0.1 s, a share of a cached answer's
0.5 s (docs/speed.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from gpuplan.errors import ConfigError, require_choice
from gpuplan.hardware.gpu import DTYPES, GPU, TIERS
from gpuplan.hardware.loader import data_file_ids, load_gpu
from gpuplan.hardware.names import NameIndex
from gpuplan.units import GIB

SORT_KEYS: tuple[str, ...] = (
    "name", "memory", "bandwidth", "bf16", "fp16", "fp8", "tf32", "fp32", "price", "year",
)


@functools.cache
def all_gpus() -> tuple[GPU, ...]:
    """Every catalog entry (no MIG slices), sorted by id, including multi-device packages
    (``devices_per_package > 1``); :func:`list_gpus` leaves those out unless asked."""
    return tuple(_gpu_in_file(stem) for stem in _ids())


@functools.cache
def _ids() -> tuple[str, ...]:
    return data_file_ids()


@functools.cache
def _gpu_in_file(stem: str) -> GPU:
    """One file's GPU, read once: :func:`get_gpu` by id and :func:`all_gpus` share the same record."""
    return load_gpu(stem)


@functools.cache
def _index() -> NameIndex:
    return NameIndex.build(all_gpus())


def get_gpu(name: str) -> GPU:
    """The GPU called ``name``: an id (any case), an alias, an nvidia-smi / torch device name, a
    shorthand such as ``H100``, or a MIG slice such as ``A100-80GB-SXM:1g.10gb``.

    Raises :class:`gpuplan.errors.UnknownGPUError` (one line, with the closest ids or the
    candidates) for unknown or ambiguous names.
    """
    if name in _ids():  # exactly an id (the file's name): that file alone, the record the index would give
        return _gpu_in_file(name)
    return _index().resolve(name)


def gpu_ids() -> tuple[str, ...]:
    return tuple(g.id for g in all_gpus())


def list_gpus(
    *,
    vendor: str | None = None,
    arch: str | None = None,
    min_memory_gib: float | None = None,
    dtype: str | None = None,
    tier: str | None = None,
    sort: str = "name",
    include_mig: bool = False,
    include_packages: bool = False,
) -> tuple[GPU, ...]:
    """Catalog GPUs passing every given filter, ordered by ``sort``.

    * ``vendor``: ``nvidia``, ``amd``, ``intel`` or ``apple`` (case-insensitive);
    * ``arch``: case-insensitive part of the architecture (``hopper``, ``ada``, ``cdna 3``);
    * ``min_memory_gib``: at least this much memory in GiB (``memory_total_bytes``);
    * ``dtype``: the hardware runs this dtype natively (see :meth:`GPU.supports`);
    * ``tier``: entry / research / enterprise (see :attr:`GPU.tier`);
    * ``sort``: ``name`` ascending, anything else descending with unknown values last;
    * ``include_mig``: also list every MIG slice of every MIG-capable GPU;
    * ``include_packages``: also list multi-device packages (MI250X-OAM = two MI250X GCDs). They
      are left out by default because each of their devices is already listed, and a planner that
      counted a package as one GPU would double its memory.
    """
    gpus = all_gpus()
    if not include_packages:
        gpus = tuple(g for g in gpus if g.devices_per_package == 1)
    if include_mig:
        gpus = gpus + tuple(g.mig(p.name) for g in gpus for p in g.mig_profiles)
    checks: list[Callable[[GPU], bool]] = []
    if vendor is not None:
        want = require_choice("vendor", vendor.lower(), sorted({g.vendor_key for g in all_gpus()}))
        checks.append(lambda g: g.vendor_key == want)
    if arch is not None:
        needle = arch.strip().lower()
        if not any(needle in g.arch.lower() for g in all_gpus()):
            archs = sorted({g.arch for g in all_gpus()})
            raise ConfigError(f"no catalog GPU has architecture {arch!r} (known: {', '.join(archs)})")
        checks.append(lambda g: needle in g.arch.lower())
    if min_memory_gib is not None:
        if min_memory_gib < 0:
            raise ConfigError(f"--min-memory-gib must be >= 0, got {min_memory_gib}")
        floor = min_memory_gib * GIB
        checks.append(lambda g: g.memory_total_bytes >= floor)
    if dtype is not None:
        want_dtype = require_choice("dtype", dtype.lower(), DTYPES)
        checks.append(lambda g: g.supports(want_dtype))
    if tier is not None:
        want_tier = require_choice("tier", tier.lower(), TIERS)
        checks.append(lambda g: g.tier == want_tier)
    kept = [g for g in gpus if all(check(g) for check in checks)]
    return tuple(sort_gpus(kept, sort))


def sort_gpus(gpus: list[GPU], sort: str) -> list[GPU]:
    """Order by ``sort`` (one of SORT_KEYS): name ascending, numbers descending, unknowns last."""
    key = require_choice("sort key", sort, SORT_KEYS)
    if key == "name":
        return sorted(gpus, key=lambda g: g.id.lower())
    value = _SORT_VALUE[key]
    known = [g for g in gpus if value(g) is not None]
    unknown = [g for g in gpus if value(g) is None]
    known.sort(key=lambda g: (-(value(g) or 0.0), g.id.lower()))
    return known + sorted(unknown, key=lambda g: g.id.lower())


_SORT_VALUE: dict[str, Callable[[GPU], float | None]] = {
    "memory": lambda g: float(g.memory_total_bytes),
    "bandwidth": lambda g: g.memory_bandwidth_gb_per_s,
    "bf16": lambda g: g.peak_tflops("bf16"),
    "fp16": lambda g: g.peak_tflops("fp16"),
    "fp8": lambda g: g.peak_tflops("fp8"),
    "tf32": lambda g: g.peak_tflops("tf32"),
    "fp32": lambda g: g.peak_tflops("fp32"),
    "price": lambda g: None if g.launch_price_usd is None else float(g.launch_price_usd),
    "year": lambda g: None if g.release_year is None else float(g.release_year),
}


def resolve_gpu(gpu: GPU | str | None) -> GPU | None:
    """A GPU record from a GPU or a name as users type it (None stays None)."""
    if gpu is None:
        return None
    return gpu if isinstance(gpu, GPU) else get_gpu(str(gpu))
