"""bitsandbytes AdamW stand-ins (trace/optimizers.py BnbAdamW) against the real bitsandbytes optimizers, which
run on the CPU in 0.50: the same state tensors (names, shapes, dtypes, the shared quantisation maps), and the
traced optimizer state equal to that layout in bytes."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
import torch

from gpuplan.models.sources import HFConfigSource
from gpuplan.trace.optimizers import BnbAdamW, build_optimizer, paged_state_bytes, state_tensors
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload
from tests.fixtures.tiny_models import TINY_LLAMA

bnb_optim = pytest.importorskip("bitsandbytes.optim")

# one tensor past the 8-bit threshold (4096) with a partial 256-block, one under it, one past the paged one (1e5)
SHAPES = [(300, 70), (100,), (400, 251)]


def _layout(state: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {k: (tuple(v.shape), v.dtype) for k, v in state.items() if k != "step"}


@pytest.mark.parametrize(("name", "real_class"), [("adamw-8bit", "AdamW8bit"), ("paged-adamw-8bit", "PagedAdamW8bit"),
                                                  ("paged-adamw", "PagedAdamW")])
def test_state_is_what_bitsandbytes_keeps(name: str, real_class: str) -> None:
    """bitsandbytes Optimizer2State.init_state: uint8 state1/state2 + fp32 absmax1/absmax2 per 256 + the qmaps
    (one pair per optimizer), or fp32 state1/state2 (32-bit, and tensors under 4096 elements); step is a host
    counter in both (bitsandbytes: an int), never GPU memory."""
    params = [torch.nn.Parameter(torch.randn(*s)) for s in SHAPES]
    for p in params:
        p.grad = torch.randn_like(p)
    with pytest.warns(UserWarning) if name.startswith("paged") else contextlib.nullcontext():  # "not supported on CPU"
        real = getattr(bnb_optim, real_class)(params, lr=1e-3)
        real.step()
    ours = build_optimizer(name, "auto", params, cuda=True)
    assert isinstance(ours, BnbAdamW)
    ours.step()
    for p in params:
        assert _layout(ours.state[p]) == _layout(real.state[p])
    shared = {id(t) for t in state_tensors(real)} - {id(v) for p in params for k, v in real.state[p].items()
                                                       if k not in ("qmap1", "qmap2")}
    assert len(shared) == (2 if "8bit" in name else 0)  # the two maps, once for every parameter
    assert _device_bytes(ours) == _device_bytes(real)


def _device_bytes(opt: Any) -> int:
    """State bytes on the device: every distinct state tensor but the host step counter."""
    steps = {id(state.get("step")) for state in opt.state.values()}
    return sum(t.numel() * t.element_size() for t in state_tensors(opt) if id(t) not in steps)


def test_paged_state_is_the_large_tensors_moments() -> None:
    """bitsandbytes get_state_buffer pages state1/state2 of tensors of 1e5 elements or more (cudaMallocManaged)."""
    params = [torch.nn.Parameter(torch.randn(*s)) for s in SHAPES]
    for p in params:
        p.grad = torch.zeros_like(p)
    paged = build_optimizer("paged-adamw-8bit", "auto", params, cuda=True)
    unpaged = build_optimizer("adamw-8bit", "auto", params, cuda=True)
    assert paged is not None and unpaged is not None
    paged.step()
    unpaged.step()
    assert paged_state_bytes(paged) == 2 * 400 * 251  # two uint8 moments of the one tensor over 1e5 elements
    assert paged_state_bytes(unpaged) == 0


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adamw-8bit", "paged-adamw", "paged-adamw-8bit"])
def test_traced_optimizer_state_is_the_layout_in_bytes(optimizer: str) -> None:
    """The traced step's optimizer_state component is the bitsandbytes layout of every trainable parameter."""
    step = trace_step(HFConfigSource("tiny-llama", TINY_LLAMA),
                      Workload(mode="train", batch_size=1, seq_len=8, optimizer=optimizer), scale=False)
    from transformers import LlamaConfig, LlamaForCausalLM

    sizes = [p.numel() for p in LlamaForCausalLM(LlamaConfig(**TINY_LLAMA)).parameters()]
    if optimizer == "paged-adamw":
        expected = sum(8 * n for n in sizes)
    else:
        expected = sum(2 * n + 2 * 4 * -(-n // 256) if n >= 4096 else 8 * n for n in sizes) + 2 * 256 * 4
    assert step.tensor_components["optimizer_state"] == expected
