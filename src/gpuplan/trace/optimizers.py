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


class BnbAdamW(Optimizer):
    """Memory-faithful stand-in for bitsandbytes' AdamW (``AdamW8bit``, ``PagedAdamW``, ``PagedAdamW8bit``;
    bitsandbytes' kernels need CUDA). State per parameter exactly as ``Optimizer2State.init_state``
    (bitsandbytes 0.50, ``optim/optimizer.py``) lays it out:

    * 8-bit: ``state1`` / ``state2`` uint8 like the parameter, ``absmax1`` / ``absmax2`` fp32, one per
      256-element block (blockwise quantisation, Dettmers et al. 2022), and ``qmap1`` / ``qmap2``: the
      optimizer's two 256-entry fp32 quantisation maps, one pair shared by every parameter;
    * 32-bit (``PagedAdamW``), and 8-bit for tensors under ``min_8bit_size`` = 4096 elements: ``state1`` /
      ``state2`` fp32;
    * ``step`` is a host counter. The update is one fused kernel per tensor: no step temporaries.

    Paged: bitsandbytes puts the state of tensors of 1e5 elements or more in CUDA unified memory
    (``get_paged``: cudaMallocManaged, outside PyTorch's caching allocator). It is modelled as resident
    on the GPU (where it lives until the GPU runs short, when the driver pages it to host memory and the
    step slows down): counted in the optimizer state like unpaged state.
    """

    BLOCK_SIZE = 256
    MIN_8BIT_SIZE = 4096
    PAGED_MIN_SIZE = 100_000
    QMAP_SIZE = 256

    def __init__(self, params: Iterable[Any], lr: float = LEARNING_RATE, *, bits: int = 8,
                 paged: bool = False) -> None:
        super().__init__(params, {"lr": lr})
        self.bits = bits
        self.paged = paged
        self._qmaps: tuple[torch.Tensor, torch.Tensor] | None = None

    def _shared_qmaps(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self._qmaps is None:  # bitsandbytes' name2qmap["dynamic"] and ["udynamic"], created once
            self._qmaps = (torch.zeros(self.QMAP_SIZE, dtype=torch.float32),
                           torch.zeros(self.QMAP_SIZE, dtype=torch.float32))
        return self._qmaps

    @torch.no_grad()
    def step(self, closure: Any = None) -> None:  # type: ignore[override]
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    # bitsandbytes counts steps in a host int; a host scalar here (the recorder leaves
                    # "step" untracked under CUDA semantics, as for torch's optimizers)
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    if self.bits == 32 or p.numel() < self.MIN_8BIT_SIZE:
                        state["state1"] = torch.zeros_like(p, dtype=torch.float32)
                        state["state2"] = torch.zeros_like(p, dtype=torch.float32)
                    else:
                        blocks = -(-p.numel() // self.BLOCK_SIZE)
                        qmap1, qmap2 = self._shared_qmaps()
                        state["state1"] = torch.zeros_like(p, dtype=torch.uint8)
                        state["qmap1"] = qmap1
                        state["state2"] = torch.zeros_like(p, dtype=torch.uint8)
                        state["qmap2"] = qmap2
                        state["absmax1"] = torch.zeros(blocks, dtype=torch.float32)
                        state["absmax2"] = torch.zeros(blocks, dtype=torch.float32)
                state["step"].add_(1)
                p.add_(p.grad, alpha=-group["lr"])  # in place, as the fused kernel updates it


def paged_state_bytes(opt: Optimizer | None) -> int:
    """Bytes of optimizer state bitsandbytes would page (unified memory): tensors of parameters with at
    least ``PAGED_MIN_SIZE`` elements of a paged optimizer."""
    if not isinstance(opt, BnbAdamW) or not opt.paged:
        return 0
    return sum(v.untyped_storage().nbytes() for p, state in opt.state.items() if p.numel() >= opt.PAGED_MIN_SIZE
               for k, v in state.items() if k in ("state1", "state2") and isinstance(v, torch.Tensor))


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
    if name in ("adamw-8bit", "paged-adamw-8bit", "paged-adamw"):
        return BnbAdamW(params, bits=32 if name == "paged-adamw" else 8, paged=name.startswith("paged"))
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
    found: dict[int, torch.Tensor] = {}  # a tensor shared by every parameter's state (bnb's qmaps) once
    for state in opt.state.values():
        found.update((id(v), v) for v in state.values() if isinstance(v, torch.Tensor))
    return list(found.values())
