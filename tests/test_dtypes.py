"""gpuplan.dtypes: the one bytes-per-dtype table equals what PyTorch allocates per element."""

from __future__ import annotations

import pytest
import torch

from gpuplan.dtypes import DTYPE_BYTES, FLOAT_DTYPES, dtype_bytes


@pytest.mark.parametrize("name", sorted(DTYPE_BYTES))
def test_every_size_is_torchs_element_size(name: str) -> None:
    dtype = getattr(torch, name)
    assert torch.empty((), dtype=dtype).element_size() == DTYPE_BYTES[name]
    assert dtype_bytes(str(dtype)) == DTYPE_BYTES[name]  # "torch.bfloat16" reads as "bfloat16"


def test_float_dtypes_are_the_computing_ones_and_unknown_names_fail() -> None:
    assert all(getattr(torch, n).is_floating_point for n in FLOAT_DTYPES)
    with pytest.raises(KeyError):
        dtype_bytes("float7")
