"""The optimizer of the traced step, as CUDA PyTorch would construct it.

``auto`` resolves the way ``torch.optim`` does for CUDA parameters: Adam/AdamW/SGD take the
``foreach`` implementation, whose step holds temporaries for all parameters of a group at once
(tracing-notes.md: +1040 MiB at BERT-large's step). Fake CPU tensors would resolve to the
per-parameter loop instead, so the implementation is always passed explicitly for a CUDA target.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.optim import Optimizer
from torch.utils._python_dispatch import TorchDispatchMode

from gpuplan.errors import ConfigError

LEARNING_RATE = 1e-4


class AdamW8bit(Optimizer):
    """Memory-faithful stand-in for ``bitsandbytes.optim.AdamW8bit`` (bitsandbytes needs CUDA).

    State per parameter as bitsandbytes keeps it: two uint8 moments plus one fp32 absmax per
    256-element block each (blockwise quantisation, Dettmers et al. 2022; bitsandbytes
    Optimizer2State.init_state), or two 32-bit moments for tensors under ``min_8bit_size`` = 4096
    elements. The update is one fused kernel per tensor, so no step temporaries are allocated.
    """

    BLOCK_SIZE = 256
    MIN_8BIT_SIZE = 4096

    def __init__(self, params: Iterable[Any], lr: float = LEARNING_RATE) -> None:
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    if p.numel() < self.MIN_8BIT_SIZE:
                        state["exp_avg"] = torch.zeros_like(p, dtype=torch.float32)
                        state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.float32)
                    else:
                        blocks = -(-p.numel() // self.BLOCK_SIZE)
                        state["exp_avg"] = torch.zeros_like(p, dtype=torch.uint8)
                        state["exp_avg_sq"] = torch.zeros_like(p, dtype=torch.uint8)
                        state["absmax1"] = torch.zeros(blocks, dtype=torch.float32)
                        state["absmax2"] = torch.zeros(blocks, dtype=torch.float32)
                state["step"].add_(1)
                p.add_(p.grad, alpha=-group["lr"])  # in place, as the fused kernel updates it


class _HostScalars(TorchDispatchMode):
    """Answer ``.item()`` on fake tensors with 1.0. Adafactor reads its step count and two norms
    as host numbers each step; on fake tensors they have no value, and the values change only
    scalars of the update, never which tensors it allocates."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func is torch.ops.aten._local_scalar_dense.default and isinstance(args[0], FakeTensor):
            return 1.0 if args[0].is_floating_point() else 1
        return func(*args, **(kwargs or {}))


class Adafactor(torch.optim.Adafactor):
    """``torch.optim.Adafactor`` as it runs, made traceable on fake tensors. Its state is torch's
    own (``_init_group``): for a parameter of two or more dimensions the factored second moment,
    a row vector (last dimension 1) and a column vector (second-to-last dimension 1); for a
    vector the full-size variance; and a host-side step counter (Shazeer & Stern 2018)."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:  # type: ignore[override]
        with _HostScalars():
            return super().step(closure)


def build_optimizer(name: str, impl: str, params: list[torch.nn.Parameter], *, cuda: bool) -> Optimizer | None:
    """The optimizer ``name`` with implementation ``impl`` (auto | foreach | fused | for-loop)."""
    if name == "none":
        return None
    if name == "adamw-8bit":
        return AdamW8bit(params)
    kwargs: dict[str, Any] = {}
    if impl == "auto":
        impl = "foreach" if cuda else "default"
    if impl == "foreach":
        kwargs["foreach"] = True
    elif impl == "for-loop":
        kwargs["foreach"] = False
    elif impl == "fused":
        if name not in ("adam", "adamw", "sgd", "sgd-momentum"):
            raise ConfigError(f"--optimizer-impl fused is not available for {name}; allowed with adam, adamw, sgd")
        kwargs["fused"] = True
    if name == "adamw":
        return torch.optim.AdamW(params, lr=LEARNING_RATE, **kwargs)
    if name == "adam":
        return torch.optim.Adam(params, lr=LEARNING_RATE, **kwargs)
    if name == "sgd":
        return torch.optim.SGD(params, lr=LEARNING_RATE, **kwargs)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=LEARNING_RATE, momentum=0.9, **kwargs)
    if name == "adafactor":
        kwargs.pop("fused", None)
        return Adafactor(params, lr=1e-2, **kwargs)
    raise ConfigError(f"unknown optimizer {name!r}")


def state_tensors(opt: Optimizer | None) -> list[torch.Tensor]:
    if opt is None:
        return []
    found: list[torch.Tensor] = []
    for state in opt.state.values():
        found.extend(v for v in state.values() if isinstance(v, torch.Tensor))
    return found
