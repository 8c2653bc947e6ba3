"""What CUDA does differently from the host the trace runs on, modelled explicitly.

The trace runs on host-neutral fake CPU tensors (tracing-notes.md: fake CUDA tensors need a CUDA
build and fail in backward without a driver; ``torch.autocast("cuda")`` disables itself without
a GPU). Two behaviours that move gigabytes are therefore emulated here, above the dispatcher,
where PyTorch itself applies them on a GPU:

* **CUDA autocast.** The op lists of ``aten/src/ATen/autocast_mode.cpp`` for CUDA: matmul-like
  ops run in the lower precision (fp32 inputs cast, parameter casts cached until the autocast
  region ends); the fp32 list (softmax, log_softmax, layer_norm, losses, exp, ...) runs in fp32;
  the promote list casts to the widest input dtype. CPU autocast uses different lists (softmax
  is not upcast there), so the CPU autocast cannot stand in for it.
* **Scaled-dot-product attention backend.** ``F.scaled_dot_product_attention`` is routed to the
  aten kernel CUDA would pick for the target GPU — flash (sm80+, fp16/bf16, no explicit mask),
  memory-efficient (sm50+, masks and fp32 allowed) or math — whose meta kernels give the exact
  outputs and saved tensors (logsumexp rows instead of the s×s probability matrix).

Both also see inside ``nn.MultiheadAttention`` (``F.multi_head_attention_forward``, a Python
composite a mode would otherwise receive whole), as CUDA's dispatcher does.

Known limitations: ops reached only through C++ composites (e.g. a loss implemented in C++ that
calls log_softmax internally) are cast as a whole by their Python-visible name; the cuDNN
attention backend is not modelled (PyTorch prefers flash / efficient by default).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map

from gpuplan.trace.capability import EFFICIENT_ATTENTION_MIN_CC, FLASH_ATTENTION_MIN_CC, cc_number

# CUDA autocast lists (aten/src/ATen/autocast_mode.cpp, CUDA section), by the name the Python
# function or Tensor method carries.
LOWER_PRECISION_OPS = frozenset({
    "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "convolution", "_convolution", "prelu", "addmm", "addmv", "addr", "matmul", "__matmul__", "__rmatmul__",
    "einsum", "mm", "mv", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "multi_dot", "linalg_vecdot",
    "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell", "scaled_dot_product_attention",
})
FP32_OPS = frozenset({
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "__pow__", "softplus", "layer_norm", "group_norm", "frobenius_norm", "nuclear_norm",
    "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss",
    "margin_ranking_loss", "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss",
    "multi_margin_loss", "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "cross_entropy", "rms_norm",
})
# Run in fp32 by passing dtype=float32 (no fp32 copy of the input is materialised).
FP32_DTYPE_ARG_OPS = frozenset({"softmax", "log_softmax", "cumsum", "cumprod", "sum", "prod"})
PROMOTE_OPS = frozenset({
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "grid_sampler", "index_put", "scatter_add",
    "tensordot", "cat", "stack",
})

_LOW = (torch.float16, torch.bfloat16)


def _func_name(func: Callable[..., Any]) -> str:
    return getattr(func, "__name__", "")


def _without_dispatch_check(func: Callable[..., Any]) -> Callable[..., Any]:
    """A copy of a Python composite whose ``has_torch_function`` check answers no, so that it runs
    its body under the modes instead of handing itself to them whole."""
    import types

    scope = {**func.__globals__, "has_torch_function": lambda *_: False}  # type: ignore[attr-defined]
    copy = types.FunctionType(func.__code__, scope, func.__name__,  # type: ignore[attr-defined]
                              func.__defaults__, func.__closure__)  # type: ignore[attr-defined]
    copy.__kwdefaults__ = func.__kwdefaults__  # type: ignore[attr-defined]
    return copy


# Python composites whose inner ops CUDA semantics must see one by one. A TorchFunctionMode is
# handed the composite whole and then runs it with itself popped, so without this the projections
# of ``nn.MultiheadAttention`` (torchvision ViT, Whisper-style encoders) would escape autocast and
# its scaled-dot-product attention would run the host kernel: fp32 projections, no attention
# backend, no attention FLOPs. CUDA's autocast and kernel choice sit in the dispatcher and see them.
# (``nn.MultiheadAttention``'s inference fast path, ``_native_multi_head_attention``, is never taken
# while a mode is active; it runs the same projections and the same SDPA kernel choice.)
_TRANSPARENT: dict[Callable[..., Any], Callable[..., Any]] = {
    F.multi_head_attention_forward: _without_dispatch_check(F.multi_head_attention_forward),
}


def _run_transparently(mode: TorchFunctionMode, func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """Run a composite of ``_TRANSPARENT`` with ``mode`` pushed back (it is popped while it
    handles the call; the modes below it are still active)."""
    from torch.overrides import _pop_mode, _push_mode

    _push_mode(mode)
    try:
        return _TRANSPARENT[func](*args, **kwargs)
    finally:
        _pop_mode()


class CudaAutocast(TorchFunctionMode):
    """Apply CUDA autocast's casting rules to whatever runs inside (forward and loss)."""

    _active: ClassVar[list[CudaAutocast]] = []

    def __init__(self, dtype: torch.dtype, cache: dict[int, torch.Tensor] | None = None) -> None:
        super().__init__()
        self.dtype = dtype
        self._owns_cache = cache is None
        self._cache: dict[int, torch.Tensor] = {} if cache is None else cache

    def __enter__(self) -> CudaAutocast:
        CudaAutocast._active.append(self)
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        CudaAutocast._active.remove(self)
        if self._owns_cache:
            self._cache.clear()  # autocast drops its cast cache when the region ends
        super().__exit__(*exc)

    @classmethod
    def resume(cls, dtype: torch.dtype | None) -> contextlib.AbstractContextManager[Any]:
        """Autocast for a checkpointed block: share the live region's cache, or start a new one
        when the block is recomputed during backward (after the region ended)."""
        if dtype is None:
            return contextlib.nullcontext()
        outer = cls._active[-1] if cls._active else None
        return cls(dtype, cache=outer._cache if outer is not None else None)

    def _to_low(self, x: Any) -> Any:
        if not (isinstance(x, torch.Tensor) and x.is_floating_point() and x.dtype == torch.float32):
            return x
        # autocast_mode.cpp cached_cast: leaves that require grad and are not views (a view made under
        # no_grad, e.g. ``weight.t()`` in a custom Function's forward, is a leaf requiring grad too)
        if x.is_leaf and x.requires_grad and not x._is_view():
            hit = self._cache.get(id(x))
            if hit is None:
                hit = x.to(self.dtype)
                self._cache[id(x)] = hit
            return hit
        return x.to(self.dtype)

    @staticmethod
    def _to_fp32(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and x.dtype in _LOW:
            return x.float()
        return x

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _TRANSPARENT:
            return _run_transparently(self, func, args, kwargs)
        name = _func_name(func)
        if name in LOWER_PRECISION_OPS:
            args, kwargs = tree_map(self._to_low, (args, kwargs))
        elif name in FP32_OPS:
            args, kwargs = tree_map(self._to_fp32, (args, kwargs))
        elif name in FP32_DTYPE_ARG_OPS:
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.dtype in _LOW and kwargs.get("dtype") is None:
                kwargs = {**kwargs, "dtype": torch.float32}
        elif name in PROMOTE_OPS:
            tensors = [t for t in _flat_tensors(args) if t.is_floating_point()]
            if any(t.dtype == torch.float32 for t in tensors) and any(t.dtype in _LOW for t in tensors):
                args, kwargs = tree_map(self._to_fp32, (args, kwargs))
        return func(*args, **kwargs)


def _flat_tensors(obj: Any) -> list[torch.Tensor]:
    found: list[torch.Tensor] = []
    tree_map(lambda x: found.append(x) if isinstance(x, torch.Tensor) else None, obj)
    return found


@dataclass(frozen=True, slots=True)
class AttentionPolicy:
    """Which SDPA kernel the target would run: 'auto' follows PyTorch's CUDA priority order."""

    requested: str = "auto"
    """auto | flash | sdpa-efficient | sdpa-math | eager (eager is handled by the model builder)."""
    compute_capability: tuple[int, int] = (9, 0)

    def choose(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: Any, enable_gqa: bool) -> str:
        cc = cc_number(self.compute_capability)
        head_dim = q.shape[-1]
        value_dim = v.shape[-1]
        low = q.dtype in _LOW
        # aten/src/ATen/native/transformers/cuda/sdp_utils.cpp: flash needs one head dim for q, k
        # and v (MLA — DeepSeek-V2/V3 — has value heads narrower than query heads, so it is refused
        # there); memory-efficient needs q and k alike and q, v aligned.
        flash_ok = (cc >= FLASH_ATTENTION_MIN_CC and low and attn_mask is None and head_dim <= 256
                    and head_dim % 8 == 0
                    and k.shape[-1] == head_dim and value_dim == head_dim)
        align = 8 if low else 4
        efficient_ok = (cc >= EFFICIENT_ATTENTION_MIN_CC
                        and (q.dtype != torch.bfloat16 or cc >= FLASH_ATTENTION_MIN_CC) and head_dim % align == 0
                        and k.shape[-1] == head_dim and value_dim % align == 0
                        and not (enable_gqa and q.shape[-3] != k.shape[-3]))
        if self.requested == "flash":
            return "flash" if flash_ok else ("efficient" if efficient_ok else "math")
        if self.requested == "sdpa-efficient":
            return "efficient" if efficient_ok else "math"
        if self.requested == "sdpa-math":
            return "math"
        if flash_ok:
            return "flash"
        if efficient_ok:
            return "efficient"
        return "math"


class CudaAttention(TorchFunctionMode):
    """Route ``F.scaled_dot_product_attention`` to the aten kernel CUDA would run, and dropout to
    CUDA's fused ``native_dropout`` (a 1-byte mask is kept for backward; the CPU path multiplies
    by a noise tensor of the input's dtype and keeps that instead: 2–4× the bytes)."""

    def __init__(self, policy: AttentionPolicy) -> None:
        super().__init__()
        self.policy = policy
        self.choices: dict[str, int] = {}
        """How many calls went to each backend (reported with the estimate)."""
        self.depth = 0

    def __enter__(self) -> CudaAttention:
        self.depth += 1
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1
        super().__exit__(*exc)

    def resume(self) -> contextlib.AbstractContextManager[Any]:
        """Re-enter for a block recomputed during backward (checkpointing), if not active."""
        return contextlib.nullcontext() if self.depth else self

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func in _TRANSPARENT:
            return _run_transparently(self, func, args, kwargs)
        if func is F.dropout:
            return _fused_dropout(*args, **kwargs)
        if func is not F.scaled_dot_product_attention:
            return func(*args, **kwargs)
        return self._sdpa(*args, **kwargs)

    def _sdpa(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        dropout_p: float = 0.0,
        is_causal: bool = False,
        scale: float | None = None,
        enable_gqa: bool = False,
    ) -> torch.Tensor:
        backend = self.policy.choose(query, key, value, attn_mask, enable_gqa)
        self.choices[backend] = self.choices.get(backend, 0) + 1
        aten = torch.ops.aten
        if backend == "flash":
            # The flash kernel reads grouped K/V heads in place (GQA): no repeated copy.
            out = aten._scaled_dot_product_flash_attention(query, key, value, dropout_p, is_causal, False,
                                                           scale=scale)
            return out[0]  # type: ignore[no-any-return]
        if backend == "efficient":
            needs_lse = query.requires_grad or key.requires_grad or value.requires_grad
            out = aten._scaled_dot_product_efficient_attention(query, key, value, attn_mask, needs_lse, dropout_p,
                                                               is_causal, scale=scale)
            return out[0]  # type: ignore[no-any-return]
        out = aten._scaled_dot_product_attention_math(query, key, value, attn_mask, dropout_p, is_causal,
                                                      None, scale=scale, enable_gqa=enable_gqa)
        return out[0]  # type: ignore[no-any-return]


def _fused_dropout(input: torch.Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> torch.Tensor:
    if not training or p == 0.0 or input.numel() == 0:
        return input
    if p == 1.0:
        return input * 0.0
    out, _mask = torch.ops.aten.native_dropout(input, p, training)
    if inplace:
        return input.copy_(out)
    return out  # type: ignore[no-any-return]
