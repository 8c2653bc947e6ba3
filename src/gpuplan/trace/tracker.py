"""Storage-level recording of a step: every op, every storage allocated and freed, in order.

A private ``TorchDispatchMode`` sees each aten op below autograd (so backward and optimizer ops
too); each new output storage is registered once (views share their base's storage; tied
weights are one storage) and a ``weakref.finalize`` on the storage records its free. Storages are
keyed by the identity of the storage object, never by data pointer: on fake/meta tensors every
storage has the same null pointer (the DeepSpeed estimator counts 0.76 GiB for Llama-2-7B
because of that, tracing-notes.md).

The same recorder runs over fake tensors (the estimate) and real CPU tensors (the exact
accounting the tests compare against). On fake tensors a few ops get a stand-in kernel: those whose
meta kernel refuses inputs the real kernels take (``_grouped_mm`` outside bf16), and those whose
output shape depends on data (``nonzero``, boolean-mask indexing), traced at their worst case.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry
from torch.utils.weak import WeakIdKeyDictionary

from gpuplan.trace.modules import ModuleScope
from gpuplan.trace.records import MemEvent, OpRecord, RawTrace, StepPoint, StorageInfo

_MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "_scaled_mm", "addbmm", "dot", "_grouped_mm",
               "_scaled_grouped_mm"}
_CONV_OPS = {"convolution", "convolution_backward", "_convolution", "cudnn_convolution"}
_ATTENTION_OPS = {
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_forward",
    "_flash_attention_backward",
    "_efficient_attention_forward",
    "_efficient_attention_backward",
}
# Ops that move no data (metadata only); recorded neither as ops nor as allocations.
_NO_DATA_OPS = {"detach", "alias", "lift_fresh", "_to_copy_meta", "sym_size", "sym_stride", "is_same_size"}


_ACTIVATION_PHASES = frozenset({"forward", "loss", "prefill", "decode", "denoise", "vae_encode", "vae_decode"})
PHASES = frozenset({"setup", "backward", "optimizer", "zero_grad"} | _ACTIVATION_PHASES)
"""The phases of a step (``Recorder.enter``); a diffusion pipeline's also ``encode:COMPONENT`` for each text
encoder (models/pipeline_program.py), so offload can tell which component runs."""
ENCODE_PHASE_PREFIX = "encode:"


def _op_class(name: str) -> str:
    if name in _MATMUL_OPS:
        return "matmul"
    if name in _CONV_OPS:
        return "conv"
    if name in _ATTENTION_OPS:
        return "attention"
    return "other"


def _grouped_mm_flops(a: torch.Tensor, b: torch.Tensor, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """MoE expert matmuls (torch._grouped_mm), which torch.utils.flop_counter does not count:
    every output element is a K-long dot product; with 2-D operands the groups split K."""
    out = out_val[0] if isinstance(out_val, (tuple, list)) else out_val
    if a.dim() == 2 and b.dim() == 2:
        return 2 * a.shape[0] * b.shape[1] * a.shape[1]
    return 2 * out.numel() * a.shape[-1]


def _conv_pass_flops(x_shape: Any, w_shape: Any, out_shape: Any, transposed: bool) -> int:
    """Multiply-adds of one convolution pass: 2·N·Cout·(Cin/groups)·K…·(output positions), where
    the weight's second dimension is already Cin/groups (Cout/groups when transposed, over the
    input positions). The input gradient and the weight gradient each cost exactly one such pass."""
    positions = 1
    for d in (x_shape if transposed else out_shape)[2:]:
        positions *= int(d)
    weight = 1
    for d in w_shape:
        weight *= int(d)
    return 2 * int(x_shape[0]) * positions * weight


def _conv_backward_flops(grad_out: torch.Tensor, x: torch.Tensor, w: torch.Tensor, _bias: Any, _stride: Any,
                         _padding: Any, _dilation: Any, transposed: bool, _output_padding: Any, _groups: Any,
                         output_mask: Any, *args: Any, out_val: Any = None, **kwargs: Any) -> int:
    """``convolution_backward``: torch.utils.flop_counter counts the weight gradient as if
    ``groups`` were 1 (groups× too high: 32× for a 32-channel depthwise convolution), so the
    count is made here, one forward-sized pass per requested gradient."""
    one_pass = _conv_pass_flops(x.shape, w.shape, grad_out.shape, bool(transposed))
    return one_pass * (int(bool(output_mask[0])) + int(bool(output_mask[1])))


_EXTRA_FLOP_FORMULAS: dict[str, Callable[..., int]] = {"_grouped_mm": _grouped_mm_flops,
                                                         "_scaled_grouped_mm": _grouped_mm_flops}
# Formulas that replace torch.utils.flop_counter's (which is wrong for these ops).
_OWN_FLOP_FORMULAS: dict[str, Callable[..., int]] = {"convolution_backward": _conv_backward_flops}


def _grouped_mm_any_dtype(mat_a: torch.Tensor, mat_b: torch.Tensor, offs: torch.Tensor | None = None,
                          bias: torch.Tensor | None = None, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    """``aten._grouped_mm`` (MoE experts: transformers' default ``grouped_mm`` experts, fp32 weights
    under fp32/tf32/AMP) on fake tensors. The real kernels take every float dtype — CUDA runs
    CUTLASS for bf16 and a loop of ``mm`` into one output otherwise (aten/native/cuda/Blas.cpp),
    the CPU a loop — but the meta kernel accepts bf16 only (fp16 only with cuBLASLt grouped GEMM
    on a live GPU). The output is the one tensor either kernel allocates, shaped by torch's own
    meta helper; autograd (``_grouped_mm``'s derivative formula) saves and computes the same."""
    from torch._meta_registrations import _create_grouped_mm_output_tensor

    return _create_grouped_mm_output_tensor(mat_a, mat_b, offs, out_dtype)  # type: ignore[no-any-return]


# Data-dependent output shapes (how many elements a mask selects) have no answer on fake tensors.
# They are traced at their worst case, every element selected, so the memory is an upper bound;
# the trace counts them (``RawTrace.worst_case_ops``) and the estimate says so.
def _nonzero_worst_case(x: torch.Tensor) -> torch.Tensor:
    return torch.empty((x.numel(), x.dim()), dtype=torch.long, device=x.device)


def _masked_select_worst_case(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.empty(torch.broadcast_shapes(x.shape, mask.shape).numel(), dtype=x.dtype, device=x.device)


def _long_indices(indices: Any) -> list[Any]:
    """Boolean masks among ``indices`` as the long index tensors the kernel derives from them."""
    out: list[Any] = []
    for index in indices:
        if isinstance(index, torch.Tensor) and index.dtype in (torch.bool, torch.uint8):
            out.extend(_nonzero_worst_case(index).unbind(1))
        else:
            out.append(index)
    return out


def _index_worst_case(x: torch.Tensor, indices: Any) -> torch.Tensor:
    return torch.ops.aten.index.Tensor(x, _long_indices(indices))  # type: ignore[no-any-return]


def _index_put_worst_case(x: torch.Tensor, indices: Any, values: torch.Tensor, accumulate: bool = False
                          ) -> torch.Tensor:
    return torch.ops.aten.index_put.default(x, _long_indices(indices), values, accumulate)  # type: ignore[no-any-return]


def _index_put_inplace_worst_case(x: torch.Tensor, indices: Any, values: torch.Tensor, accumulate: bool = False
                                  ) -> torch.Tensor:
    return torch.ops.aten.index_put_.default(x, _long_indices(indices), values, accumulate)  # type: ignore[no-any-return]


_WORST_CASE_KERNELS: dict[str, Callable[..., Any]] = {
    "nonzero": _nonzero_worst_case, "masked_select": _masked_select_worst_case,
}
_MASK_INDEX_KERNELS: dict[str, Callable[..., Any]] = {
    "index": _index_worst_case, "index_put": _index_put_worst_case, "_index_put_impl": _index_put_worst_case,
    "index_put_": _index_put_inplace_worst_case,
}


def _has_mask_index(args: tuple[Any, ...]) -> bool:
    indices = args[1] if len(args) > 1 and isinstance(args[1], (list, tuple)) else ()
    return any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices)


def _loss_on_unreduced_buffer(name: str) -> Callable[..., Any]:
    """The CPU kernels of ``mse_loss`` and ``smooth_l1_loss`` with a mean or sum reduction return the 0-dim loss in
    the storage of the unreduced buffer they wrote first (broadcast input × target elements; measured on torch
    2.14's CPU build: a (1, 64, 16) fp32 mse_loss holds 4,096 bytes, not 4), while the meta kernel allocates 4
    bytes. The stand-in keeps the unreduced result's storage under the reduced value, as the kernel does."""
    op = getattr(torch.ops.aten, name).default

    def kernel(*args: Any, **kwargs: Any) -> torch.Tensor:
        rest = list(args[2:])
        reduction = rest.pop(0) if rest else kwargs.pop("reduction", 1)
        unreduced = op(args[0], args[1], 0, *rest, **kwargs)
        reduced = unreduced.mean() if reduction == 1 else unreduced.sum()
        out = torch.empty((), dtype=reduced.dtype, device=reduced.device)
        return out.set_(unreduced.untyped_storage(), 0, (), ())

    return kernel


_CPU_LOSS_KERNELS: dict[str, Callable[..., Any]] = {n: _loss_on_unreduced_buffer(n)
                                                    for n in ("mse_loss", "smooth_l1_loss")}


def _reduces(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    reduction = args[2] if len(args) > 2 else kwargs.get("reduction", 1)
    return reduction != 0


def _fake_kernel(name: str, args: tuple[Any, ...],
                 kwargs: dict[str, Any] | None = None) -> tuple[Callable[..., Any] | None, bool]:
    """A stand-in for an op whose meta kernel cannot answer on fake tensors (or answers with other storage than
    the real kernel allocates), and whether it assumes the worst case of a data-dependent shape."""
    if not args or not isinstance(args[0], FakeTensor):
        return None, False
    if name in _CPU_LOSS_KERNELS and args[0].device.type == "cpu" and _reduces(args, kwargs or {}):
        return _CPU_LOSS_KERNELS[name], False
    if name == "_grouped_mm" and args[0].dtype != torch.bfloat16:
        return _grouped_mm_any_dtype, False
    if name in _WORST_CASE_KERNELS:
        return _WORST_CASE_KERNELS[name], True
    if name in _MASK_INDEX_KERNELS and _has_mask_index(args):
        return _MASK_INDEX_KERNELS[name], True
    return None, False


_HOST_DEPTH = [0]


@contextlib.contextmanager
def on_host() -> Iterator[None]:
    """Storages made inside are host memory (activation offload's pinned CPU buffers): counted in
    ``RawTrace.host_*``, never in the GPU's live bytes; the ops inside are copies over the host link
    (timed by memory/offload.py), not kernels, so they are not recorded as ops."""
    _HOST_DEPTH[0] += 1
    try:
        yield
    finally:
        _HOST_DEPTH[0] -= 1


def _tensor_bytes(t: torch.Tensor) -> int:
    stored = getattr(t, "stored_bytes", None)  # a quantized weight's stand-in (trace/quantized.py) reads its bytes
    return stored if isinstance(stored, int) else t.numel() * t.element_size()


def _payload(t: torch.Tensor) -> torch.Tensor:
    """The tensor a kernel reads: a wrapper subclass holding its values in ``_data`` (torchao's
    Float8TrainingTensor reports the bf16 it stands for) reads those (fp8), at their rate and size."""
    data = getattr(t, "_data", None)
    return data if isinstance(data, torch.Tensor) and type(t) is not torch.Tensor else t


def _written_in_place(func: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors an op that returns nothing writes: every tensor of its mutable (``Tensor(a!)``,
    ``Tensor(a!)[]``) arguments — the in-place multi-tensor ops (``_foreach_mul_``, ``_fused_adamw_``)
    write each tensor of their lists in place. The fused optimizers (``_fused_adam(w)_``, ``_fused_sgd_``,
    ``_fused_adagrad_``) mark ``grads`` mutable but store them only when unscaling with a ``grad_scale``
    (aten/src/ATen/native/cuda/fused_adam_utils.cuh: ``if (i != kGradIdx || grad_scale_ptr) store``)."""
    schema = getattr(func, "_schema", None)
    if schema is None:
        return []
    written: list[torch.Tensor] = []
    for i, arg in enumerate(schema.arguments):
        if arg.alias_info is None or not arg.alias_info.is_write:
            continue
        if arg.name == "grads" and name.startswith("_fused_") and kwargs.get("grad_scale") is None:
            continue
        value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
        written.extend(t for t in tree_leaves(value) if isinstance(t, torch.Tensor))
    return written


class Recorder:
    """State of one traced run; the step program moves it through the phases (``enter``)."""

    def __init__(self, *, block_containers: Iterable[str] = (), record_ops: bool = True) -> None:
        self.phase = "setup"
        self.trace = RawTrace()
        self.record_ops = record_ops
        self._live_bytes = 0
        self._next_id = 0
        self._ids: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._active = True
        self._module = ""
        self._containers = tuple(block_containers)
        self._block_patterns = [
            (c, re.compile(rf"(?:^|\.){re.escape(c)}\.(\d+)(?:\.|$)")) for c in self._containers
        ]
        self._block_cache: dict[str, str | None] = {}
        self._storage_block: dict[int, str | None] = {}
        self._untracked_blocks: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._host: WeakIdKeyDictionary = WeakIdKeyDictionary()
        self._host_bytes = 0
        self._last_optimizer_block: str | None = None
        self.module_scope = ModuleScope()
        self.repeat = -1
        """Decode step being run (set by the runner in generate mode), else -1."""

    def enter(self, phase: str) -> None:
        """The step moves to ``phase``: storages created from now on are born in it (and are
        activations or temporaries by it). The step program calls this; nothing sets ``phase``."""
        if phase not in PHASES and not phase.startswith(ENCODE_PHASE_PREFIX):
            raise ValueError(f"unknown step phase {phase!r}; allowed: {', '.join(sorted(PHASES))}")
        self.phase = phase

    # -- storages ---------------------------------------------------------------------------
    @property
    def live_bytes(self) -> int:
        return self._live_bytes

    def storage_id(self, t: torch.Tensor) -> int | None:
        """The recorder's id of ``t``'s storage, or None if it was never registered."""
        return self._ids.get(t.untyped_storage())

    def register(self, t: torch.Tensor, *, category: str | None = None, block: str | None = None) -> int:
        """Register ``t``'s storage (once) and return its id; ``category`` overrides later."""
        st = t.untyped_storage()
        sid = self._ids.get(st)
        if sid is None:
            sid = self._new_storage(st)
        info = self.trace.storages[sid]
        if category is not None:
            info.category = category
        if block is not None:
            self._storage_block[sid] = block
        return sid

    def _new_storage(self, st: torch.UntypedStorage) -> int:
        sid = self._next_id
        self._next_id += 1
        size = st.nbytes()
        self._ids[st] = sid
        # What a step allocates while running the model is activation memory (saved for backward,
        # or the live outputs of inference); anything else is a temporary until reclassified as a
        # gradient, optimizer state or KV cache.
        category = ("activations" if self.phase in _ACTIVATION_PHASES or self.phase.startswith(ENCODE_PHASE_PREFIX)
                    else "temporaries")
        self.trace.storages[sid] = StorageInfo(sid, size, self.phase, self._module, category)
        self._live_bytes += size
        self.trace.events.append(MemEvent(sid, size))
        if self._live_bytes > self.trace.peak_bytes:
            self.trace.peak_bytes = self._live_bytes
            self.trace.peak_event_index = len(self.trace.events) - 1
            self.trace.peak_phase = self.phase
        weakref.finalize(st, self._on_free, sid, size)
        return sid

    def _new_host_storage(self, st: torch.UntypedStorage) -> None:
        size = st.nbytes()
        self._host[st] = size
        self._host_bytes += size
        self.trace.host_copy_bytes += size
        self.trace.host_peak_bytes = max(self.trace.host_peak_bytes, self._host_bytes)
        weakref.finalize(st, self._on_host_free, size)

    def _on_host_free(self, size: int) -> None:
        if self._active:
            self._host_bytes -= size

    def _on_free(self, sid: int, size: int) -> None:
        if not self._active:
            return
        self._live_bytes -= size
        self.trace.events.append(MemEvent(sid, -size))

    def close(self) -> None:
        """Stop recording frees (storages dying after the run are not part of it)."""
        self._active = False

    # -- modules and blocks -----------------------------------------------------------------
    def current_module(self) -> str:
        return self.module_scope.current()

    def block_of(self, module: str) -> str | None:
        hit = self._block_cache.get(module, "")
        if hit != "":
            return hit
        block = None
        for container, pattern in self._block_patterns:
            m = pattern.search(module)
            if m:
                block = f"{container}:{m.group(1)}"
                break
        self._block_cache[module] = block
        return block

    def set_storage_block(self, sid: int, block: str | None) -> None:
        self._storage_block[sid] = block

    def tag_untracked(self, t: torch.Tensor, block: str | None) -> None:
        """Give a tensor that is not GPU memory (a host-side step counter) a block, so ops on it
        are placed like the ops on its parameter."""
        self._untracked_blocks[t.untyped_storage()] = block

    # -- ops --------------------------------------------------------------------------------
    def on_op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], run: Callable[[], Any]) -> Any:
        name = func._overloadpacket.__name__
        if name in _NO_DATA_OPS or func.namespace == "prim":
            return run()
        if _HOST_DEPTH[0]:
            out = run()
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                    st = t.untyped_storage()
                    if self._ids.get(st) is None and st not in self._host:
                        self._new_host_storage(st)
            return out
        self._module = self.current_module()
        # In backward, an op belongs to the block whose autograd node runs it, also when it is a
        # recompute of an earlier block (checkpointing recomputes block j-1 inside block j's
        # backward): that keeps each block's backward one contiguous, repeatable section.
        node_module = ModuleScope.current_node_module() if self.phase == "backward" else ""
        in_block = self.block_of(node_module or self._module)
        if in_block is None and self.phase in ("optimizer", "zero_grad"):
            in_block = self._block_from_args(args)
        live_before = self._live_bytes
        events_before = len(self.trace.events)
        stand_in, worst_case = _fake_kernel(name, args, kwargs)
        if worst_case:
            self.trace.worst_case_ops[name] = self.trace.worst_case_ops.get(name, 0) + 1
        out = stand_in(*args, **kwargs) if stand_in is not None else run()
        peak = self._live_bytes
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.layout == torch.strided:
                st = t.untyped_storage()
                if self._ids.get(st) is None:
                    sid = self._new_storage(st)
                    peak = max(peak, self._live_bytes)
                    if in_block is not None and self.phase in ("optimizer", "zero_grad"):
                        # a per-parameter temporary (Adafactor's update, whose norm is taken
                        # parameter by parameter) belongs to its parameter's block
                        self._storage_block[sid] = in_block
        new_events = len(self.trace.events) > events_before or live_before != self._live_bytes
        if self.record_ops and not func.is_view:
            self._record_op(func, name, args, kwargs, out, in_block)
        if new_events or self.record_ops:
            self.trace.points.append(StepPoint(self.phase, in_block, peak, self._live_bytes, len(self.trace.events),
                                              live_before, events_before, self.repeat))
        return out

    def _block_from_args(self, args: tuple[Any, ...]) -> str | None:
        """Optimizer ops on one parameter's tensors belong to that parameter's block; an op on
        nothing known (a scalar or a temporary of the per-parameter loop) stays in the block of
        the op before it; an op across blocks (foreach over all parameters) belongs to none."""
        blocks = self._arg_blocks(args)
        if blocks is None:
            return self._last_optimizer_block
        self._last_optimizer_block = blocks.pop() if len(blocks) == 1 else None
        return self._last_optimizer_block

    def _arg_blocks(self, args: tuple[Any, ...]) -> set[str | None] | None:
        """The blocks of the tagged storages among ``args`` (None: none of them is tagged)."""
        blocks: set[str | None] = set()
        seen = False
        for t in tree_leaves(args):
            if isinstance(t, torch.Tensor):
                st = t.untyped_storage()
                sid = self._ids.get(st)
                if sid is not None and sid in self._storage_block:
                    blocks.add(self._storage_block[sid])
                    seen = True
                elif st in self._untracked_blocks:
                    blocks.add(self._untracked_blocks[st])
                    seen = True
                if len(blocks) > 1:
                    return blocks
        return blocks if seen else None

    def _record_op(
        self, func: Any, name: str, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any, block: str | None
    ) -> None:
        in_tensors = [_payload(t) for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        out_tensors = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
        bytes_read = sum(_tensor_bytes(t) for t in in_tensors)
        bytes_written = sum(_tensor_bytes(t) for t in (out_tensors or _written_in_place(func, name, args, kwargs)))
        flops = 0
        formula = (_OWN_FLOP_FORMULAS.get(name) or flop_registry.get(func._overloadpacket)
                   or _EXTRA_FLOP_FORMULAS.get(name))
        if formula is not None:
            try:
                flops = int(formula(*args, **kwargs, out_val=out))
            except Exception:  # a formula that does not accept this overload's arguments
                flops = 0
        dtype = next((t.dtype for t in in_tensors if t.is_floating_point()), None)
        if dtype is None:
            dtype = next((t.dtype for t in out_tensors), torch.float32)
        self.trace.ops.append(
            OpRecord(
                name=str(func),
                phase=self.phase,
                module=self._module,
                op_class=_op_class(name),
                dtype=str(dtype).removeprefix("torch."),
                flops=flops,
                bytes_read=bytes_read,
                bytes_written=bytes_written,
                block=block,
            )
        )


class RecordingMode(TorchDispatchMode):
    """The dispatch mode that feeds a :class:`Recorder`."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        return self.recorder.on_op(func, args, kwargs, lambda: func(*args, **kwargs))
