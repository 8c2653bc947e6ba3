"""Validation of data files on load: each kind of malformed file fails with a one-line message."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpuplan.hardware import GPU
from gpuplan.hardware.loader import CatalogDataError, gpu_from_mapping

from .conftest import raw_data_files

GOOD = raw_data_files()["A100-80GB-SXM"]


def _load(**changes: Any) -> GPU:
    data = copy.deepcopy(GOOD)
    for key, value in changes.items():
        if value is _DROP:
            del data[key]
        else:
            data[key] = value
    return gpu_from_mapping(data, filename_stem="A100-80GB-SXM")


_DROP = object()


def test_the_good_file_loads() -> None:
    assert _load().id == "A100-80GB-SXM"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"source": _DROP}, r"missing keys \['source'\]"),
        ({"colour": "green"}, r"unknown keys \['colour'\]"),
        ({"source": None}, "source must not be empty"),
        ({"id": "A100"}, "id 'A100' differs from the file name"),
        ({"dense": False}, "tensor rates must be dense"),
        ({"bf16_tflops": "fast"}, "bf16_tflops='fast' is not int/float"),
        ({"bf16_tflops": True}, "bf16_tflops=True is not int/float"),
        ({"memory_total_bytes": -1}, "memory_total_bytes=-1 is negative"),
        ({"compute_capability": "8"}, "compute_capability '8' is not like '8.0'"),
        ({"retrieved": "last week"}, "retrieved 'last week' is not an ISO date"),
        ({"intra_node_link": "carrier pigeon"}, "intra_node_link must be one of"),
        ({"aliases": ["", "x"]}, "aliases must be a list of non-empty strings"),
        ({"mig_source": None}, "MIG profiles need a mig_source"),
        ({"mig_profiles": [{**GOOD["mig_profiles"][0], "name": "one-slice"}]}, "is not like '3g.40gb'"),
        ({"mig_profiles": [{**GOOD["mig_profiles"][0], "compute_slices": 9}]}, "slices outside 1..max"),
    ],
)
def test_malformed_files_fail_in_one_line(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(CatalogDataError, match=message) as info:
        _load(**changes)
    assert str(info.value).startswith("gpu data file A100-80GB-SXM.yaml")
    assert "\n" not in str(info.value)


def test_a_gpu_without_any_rate_must_say_why() -> None:
    rates = dict.fromkeys(("fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "fp8_tflops",
                           "int8_tops", "fp4_tflops", "fp16_fp16acc_tflops", "fp8_fp16acc_tflops"))
    with pytest.raises(CatalogDataError, match="no compute rate at all and no note saying why"):
        _load(notes=None, **rates)
    assert _load(**rates).peak_tflops("bf16") is None  # with its note it loads
