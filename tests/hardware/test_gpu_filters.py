"""list_gpus: property tests (a filter never lets a violating GPU through, nor drops a good one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import ConfigError
from gpuplan.hardware import DTYPES, GPU, TIERS, all_gpus, list_gpus
from gpuplan.hardware.catalog import SORT_KEYS
from gpuplan.units import GIB

VENDORS = sorted({g.vendor_key for g in all_gpus()})
ARCH_WORDS = sorted({w.lower() for g in all_gpus() for w in g.arch.split() if w.isalpha()})


def _passes(
    gpu: GPU, vendor: str | None, arch: str | None, min_gib: float | None, dtype: str | None, tier: str | None
) -> bool:
    return ((vendor is None or gpu.vendor_key == vendor)
            and (arch is None or arch in gpu.arch.lower())
            and (min_gib is None or gpu.memory_total_bytes >= min_gib * GIB)
            and (dtype is None or gpu.supports(dtype))
            and (tier is None or gpu.tier == tier))


@settings(max_examples=150, deadline=None)
@given(
    vendor=st.none() | st.sampled_from(VENDORS),
    arch=st.none() | st.sampled_from(ARCH_WORDS),
    min_gib=st.none() | st.floats(min_value=0, max_value=600, allow_nan=False),
    dtype=st.none() | st.sampled_from(DTYPES),
    tier=st.none() | st.sampled_from(TIERS),
    mig=st.booleans(),
)
def test_filters_return_exactly_the_gpus_that_pass(
    vendor: str | None, arch: str | None, min_gib: float | None, dtype: str | None, tier: str | None,
    mig: bool,
) -> None:
    got = list_gpus(vendor=vendor, arch=arch, min_memory_gib=min_gib, dtype=dtype, tier=tier, include_mig=mig)
    pool = [g for g in all_gpus() if g.devices_per_package == 1]
    if mig:
        pool += [g.mig(p.name) for g in all_gpus() for p in g.mig_profiles]
    assert all(_passes(g, vendor, arch, min_gib, dtype, tier) for g in got)
    assert {g.id for g in got} == {g.id for g in pool if _passes(g, vendor, arch, min_gib, dtype, tier)}


@settings(max_examples=60, deadline=None)
@given(sort=st.sampled_from(SORT_KEYS), vendor=st.none() | st.sampled_from(VENDORS))
def test_sort_orders_known_values_descending_and_unknowns_last(sort: str, vendor: str | None) -> None:
    gpus = list_gpus(vendor=vendor, sort=sort)
    if sort == "name":
        assert [g.id.lower() for g in gpus] == sorted(g.id.lower() for g in gpus)
        return
    fields: dict[str, Callable[[GPU], float | None]] = {
        "memory": lambda g: g.memory_total_bytes, "bandwidth": lambda g: g.memory_bandwidth_gb_per_s,
        "price": lambda g: g.launch_price_usd, "year": lambda g: g.release_year,
    }
    values = [fields[sort](g) if sort in fields else g.peak_tflops(sort) for g in gpus]
    known = [v for v in values if v is not None]
    assert known == sorted(known, reverse=True)
    assert values[: len(known)] == known  # every None after every number


def test_packages_are_listed_only_on_request() -> None:
    devices = {g.id for g in list_gpus(vendor="amd")}
    everything = {g.id for g in list_gpus(vendor="amd", include_packages=True)}
    assert {"MI250X", "MI250"} <= devices and not devices & {"MI250X-OAM", "MI250-OAM"}
    assert everything - devices == {"MI250X-OAM", "MI250-OAM"}


def test_vendor_and_arch_are_case_insensitive() -> None:
    assert list_gpus(vendor="NVIDIA") == list_gpus(vendor="nvidia")
    assert {g.id for g in list_gpus(arch="HOPPER")} >= {"H100-SXM", "H200-SXM", "GH200-96GB"}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"vendor": "nvdia"}, "unknown vendor 'nvdia'; did you mean nvidia?"),
     ({"arch": "kepler"}, "no catalog GPU has architecture 'kepler'"),
     ({"min_memory_gib": -5}, "--min-memory-gib must be >= 0"),
     ({"dtype": "fp64"}, "unknown dtype 'fp64'"),
     ({"tier": "hobby"}, "unknown tier 'hobby'"),
     ({"sort": "speed"}, "unknown sort key 'speed'")],
)
def test_bad_filters_are_config_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        list_gpus(**kwargs)
