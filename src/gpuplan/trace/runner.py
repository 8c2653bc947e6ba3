"""Run one steady-state step of a workload under the recorder.

Training: a warm-up step first (so the optimizer state exists, as in every step after the first),
then the recorded step: ``grad_accum`` × (forward, loss, backward), optimizer step, zero_grad.
Inference: one forward under ``no_grad``. Generation: a prefill with the model's own KV cache,
then ``new_tokens`` decode steps of one token each (``model.generate()`` cannot run on fake
tensors: its stopping checks read data).

With ``fake=True`` (the estimate) everything runs on fake CPU tensors — no weight is allocated —
and CUDA's behaviour is emulated (trace/cuda_semantics.py). With ``fake=False`` and
``cuda=False`` the same step runs for real on the CPU: the exact accounting the tests compare
against.

The step itself is :class:`StepProgram`, public because ``gpuplan.measure`` runs the very same
program on a real device: only its :class:`Semantics` differ (:class:`CudaEmulation` on fake
tensors here, :class:`DeviceSemantics` — the device's own autocast — for a real run).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import logging
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from gpuplan.errors import TraceError
from gpuplan.models.sources import Inputs, ModelSource
from gpuplan.trace.accumulation import ACCUM_STEPS_TRACED
from gpuplan.trace.adapt import adapt_model
from gpuplan.trace.cuda_semantics import AttentionPolicy, CudaAttention, CudaAutocast
from gpuplan.trace.modules import ModuleScope
from gpuplan.trace.optimizers import build_optimizer, state_tensors
from gpuplan.trace.quantized import QuantizedLinear, logical_params_count
from gpuplan.trace.records import RunResult
from gpuplan.trace.tracker import Recorder, RecordingMode, on_host
from gpuplan.workload import Workload

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""Workload dtype name -> torch dtype."""
# Decode steps traced before extrapolating the rest (two are needed for the slope; the first
# steps can differ from later ones while the cache warms up).
DECODE_STEPS_TRACED = 4
# AMP fp16 multiplies the loss by the GradScaler's scale before backward (2**16 initially).
_GRAD_SCALE = 65536.0


@dataclass(frozen=True, slots=True)
class Target:
    """Whose semantics the step follows."""

    cuda: bool = True
    compute_capability: tuple[int, int] = (9, 0)


def own_parameters(model: nn.Module) -> tuple[dict[str, int], dict[str, frozenset[int]]]:
    """(:attr:`RunResult.module_params`, :attr:`RunResult.module_param_sizes`) of ``model``."""
    counts: dict[str, int] = {}
    sizes: dict[str, frozenset[int]] = {}
    seen: set[int] = set()
    for name, mod in model.named_modules():
        own = list(mod.parameters(recurse=False))
        # a quantized layer's packed weight counts as the weights it stores (as params_count does),
        # so the planner's per-parameter bytes (packed bytes / weights) multiply the same count
        logical = mod.logical_params_count if isinstance(mod, QuantizedLinear) else None
        n = sum(logical if logical is not None and p is mod.weight else p.numel() for p in own if id(p) not in seen)
        seen.update(id(p) for p in own)
        if n:
            counts[name] = n
        weight = getattr(mod, "weight", None)
        if own:
            sizes[name] = frozenset(p.numel() for p in own)
        elif isinstance(weight, nn.Parameter):  # a head reusing a weight registered elsewhere
            sizes[name] = frozenset({weight.numel()})
    return counts, sizes


def trainable_split(model: nn.Module) -> tuple[int, int, int, int]:
    """(trainable elements, their stored bytes, frozen floating-point elements, their stored bytes)
    of ``model``'s parameters, each storage once: the split a sharded engine's model states follow
    (fp32 master, gradients and optimizer state for the trainable ones only). A quantized layer's
    packed weight is neither: it is frozen and stays packed."""
    seen: set[int] = set()
    t_n = t_b = f_n = f_b = 0
    for module in model.modules():
        for name, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            nbytes = p.numel() * p.element_size()
            if p.requires_grad:
                t_n, t_b = t_n + p.numel(), t_b + nbytes
            elif p.is_floating_point() and not (isinstance(module, QuantizedLinear) and name == "weight"):
                f_n, f_b = f_n + p.numel(), f_b + nbytes
    return t_n, t_b, f_n, f_b


def _weight_bytes(module: nn.Module, *, recurse: bool, seen: set[int] | None = None) -> int:
    tensors = [*module.parameters(recurse=recurse), *module.buffers(recurse=recurse)]
    seen = set() if seen is None else seen
    total = 0
    for t in tensors:
        key = id(t.untyped_storage())
        if key not in seen:
            seen.add(key)
            total += t.untyped_storage().nbytes()
    return total


def child_weights(model: nn.Module) -> dict[str, list[int]]:
    """:attr:`RunResult.child_weights` of ``model``: per top-level child, its weight bytes, its largest module's
    own weights (what sequential offload holds), and diffusers' block-level groups — the child's own top-level
    ``ModuleList``/``Sequential`` entries are groups of one block each, everything else one group."""
    out: dict[str, list[int]] = {}
    for name, child in model.named_children():
        total = _weight_bytes(child, recurse=True)
        leaf = max((_weight_bytes(m, recurse=False) for m in child.modules()), default=0)
        blocks = [b for _, sub in child.named_children() if isinstance(sub, (nn.ModuleList, nn.Sequential))
                  for b in sub.children()]
        block_bytes = [_weight_bytes(b, recurse=True) for b in blocks]
        out[name] = [total, leaf, total - sum(block_bytes), max(block_bytes, default=0)]
    return out


@contextlib.contextmanager
def step_gc(*, collect_first: bool = True) -> Iterator[None]:
    """The cyclic GC inside a recorded step: off, except where the step collects explicitly
    (:meth:`StepProgram.train_step`), and those collections walk only the step's own objects.

    Everything alive when the step starts (the interpreter's modules, torch and transformers, the
    model, a long test session's objects) is moved to the permanent generation (``gc.freeze``) and
    given back after the step: a full collection walks every tracked object, about 0.4 s of CPU with
    torch and transformers loaded (more in a long process), and a training step collects once per
    micro-batch. The garbage those collections must free (checkpointing's reference cycles) is made
    inside the step, so it is found all the same. ``collect_first``: collect everything once before
    (a real run's allocator counts garbage left by the model's build; a fake one records none of it)."""
    if collect_first:
        gc.collect()
    frozen_before = gc.get_freeze_count()
    gc.freeze()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        if frozen_before == 0:  # a caller's own frozen objects stay frozen
            gc.unfreeze()


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """transformers and torch warn about things irrelevant under fake tensors."""
    tf_logger = logging.getLogger("transformers")
    old = tf_logger.level
    tf_logger.setLevel(logging.ERROR)
    # a failing meta kernel logs its whole traceback (ERROR) before raising; the failure itself
    # reaches the user as one TraceError line
    fake_logger = logging.getLogger("torch._subclasses.fake_tensor")
    old_fake = fake_logger.level
    fake_logger.setLevel(logging.CRITICAL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            tf_logger.setLevel(old)
            fake_logger.setLevel(old_fake)


@contextlib.contextmanager
def transformers_on_fake_tensors(uses_transformers: bool) -> Iterator[None]:
    """transformers treats FakeTensors as graph tracing (``is_tracing``) and then never detects
    that position ids hold one sequence per row: it materialises a causal mask, which rules out
    flash attention and forces ``repeat_kv`` for GQA — not what a real GPU run does. gpuplan's
    inputs are one unpadded sequence per row, the answer real tensors give."""
    masking = sys.modules.get("transformers.masking_utils")
    if masking is None and uses_transformers:
        import importlib

        masking = importlib.import_module("transformers.masking_utils")
    original = getattr(masking, "find_packed_sequence_indices", None)
    if masking is None or original is None:
        yield
        return
    setattr(masking, "find_packed_sequence_indices", lambda position_ids: None)  # noqa: B010
    try:
        yield
    finally:
        setattr(masking, "find_packed_sequence_indices", original)  # noqa: B010


@contextlib.contextmanager
def no_weight_init() -> Iterator[None]:
    """Weight values mean nothing on fake tensors, and some initialisers read them
    (``trunc_normal_`` rejection-samples with ``.item()`` since torch 2.14): skip them all."""
    init = torch.nn.init
    names = [n for n in dir(init) if n.endswith("_") and not n.startswith("__") and callable(getattr(init, n))]
    saved = {n: getattr(init, n) for n in names}

    def keep(tensor: Any, *args: Any, **kwargs: Any) -> Any:
        return tensor

    for n in names:
        setattr(init, n, keep)
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(init, n, fn)


def find_containers(module: nn.Module, counts: Mapping[str, int]) -> dict[str, str]:
    """Map each layer-count config key to the path of the ModuleList holding that many blocks."""
    lists = [(name, m) for name, m in module.named_modules()
             if isinstance(m, (nn.ModuleList, nn.Sequential)) and len(m) >= 1 and name
             and len({type(c) for c in m}) == 1]
    found: dict[str, str] = {}
    for key, n in counts.items():
        hits = [name for name, m in lists if len(m) == n and name not in found.values()]
        if "decoder" in key:
            hits = [h for h in hits if "decoder" in h] or hits
        elif len(counts) > 1:
            hits = [h for h in hits if "decoder" not in h] or hits
        if not hits:
            raise TraceError(f"cannot find the {n} repeated blocks counted by {key!r} in {type(module).__name__}")
        found[key] = min(hits, key=lambda h: (h.count("."), h))
    return found


def block_modules(module: nn.Module, containers: Mapping[str, str]) -> list[tuple[str, nn.Module]]:
    """Blocks to checkpoint: those of the layer containers, else of every uniform container."""
    if containers:
        paths = set(containers.values())
    else:
        paths = {name for name, m in module.named_modules()
                 if isinstance(m, (nn.ModuleList, nn.Sequential)) and name and len(m) >= 2
                 and len({type(c) for c in m}) == 1}
        # keep outermost containers only: nested ones are covered by their parent's blocks
        paths = {p for p in paths if not any(p != q and p.startswith(q + ".") for q in paths)}
    blocks: list[tuple[str, nn.Module]] = []
    for path in sorted(paths):
        container = module.get_submodule(path)
        blocks.extend((f"{path}.{i}", child) for i, child in enumerate(container.children()))
    return blocks


_SAVE_IN_SELECTIVE = {"mm", "addmm", "bmm", "baddbmm", "convolution", "_scaled_dot_product_flash_attention",
                      "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"}


def _selective_policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    """Op-level selective recompute: keep matmul/conv/attention outputs, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy

    if func._overloadpacket.__name__ in _SAVE_IN_SELECTIVE:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


# torchtitan's op-level selective AC (activation_checkpoint.mode "selective", selective_ac_option "op"):
# pytorch/torchtitan torchtitan/parallelisms/parallelize_llama.py @ 004b3148a92b565ef0ce7a7bcc61e0159c7ec930,
# ``_save_list`` and ``_custom_policy``: these ops' outputs are saved, except every second ``aten.mm``
# (counted per checkpointed call, forward and recompute apart); everything else is recomputed.
TORCHTITAN_OP_SAVE_LIST = frozenset({
    "aten.mm.default",
    "aten._scaled_dot_product_efficient_attention.default",
    "aten._scaled_dot_product_flash_attention.default",
    "_c10d_functional.reduce_scatter_tensor.default",
})


def torchtitan_op_policy() -> Callable[..., Any]:
    """A fresh policy for one checkpointed call (torchtitan makes one ``meta`` counter per call)."""
    from torch.utils.checkpoint import CheckpointPolicy

    mm_count = {"forward": 0, "recompute": 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        name = str(func)
        phase = "recompute" if ctx.is_recompute else "forward"
        if name == "aten.mm.default":
            mm_count[phase] += 1
        save = name in TORCHTITAN_OP_SAVE_LIST and not (name == "aten.mm.default" and mm_count[phase] % 2 == 0)
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _torchtitan_op_contexts() -> Any:
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(torchtitan_op_policy())


def apply_checkpointing(blocks: list[tuple[str, nn.Module]], mode: str,
                        recompute: Callable[[], AbstractContextManager[None]], *, offload: bool = False) -> None:
    """Wrap each block in non-reentrant checkpointing; ``recompute()`` (``Semantics.recompute``)
    re-enters the step's semantics for the recompute, as torch.utils.checkpoint re-enters
    torch.autocast. ``offload``: the checkpointed input (the block's hidden state) is kept on the host
    (:func:`_offloaded_checkpoint`)."""
    from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts

    context_fn: Callable[[], Any] | None = None
    if mode == "selective":
        context_fn = functools.partial(create_selective_checkpoint_contexts, _selective_policy)
    elif mode == "selective-op":
        context_fn = _torchtitan_op_contexts
    for _, block in blocks:
        original = block.forward

        def run(*args: Any, __orig: Any = original, **kwargs: Any) -> Any:
            with recompute():
                return __orig(*args, **kwargs)

        def forward(*args: Any, __run: Any = run, **kwargs: Any) -> Any:
            extra = {"context_fn": context_fn} if context_fn is not None else {}
            if offload and args and isinstance(args[0], torch.Tensor):
                return _offloaded_checkpoint(__run, args, {**extra, **kwargs})
            return checkpoint(__run, *args, use_reentrant=False, **extra, **kwargs)  # type: ignore[call-overload]

        block.forward = forward  # type: ignore[method-assign]


def _offloaded_checkpoint(run: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Activation-checkpoint CPU offload as Arctic Long Sequence Training runs it (its patch of
    torch.utils.checkpoint moves each checkpointed ``hidden_states`` to the host; ``torch.autograd.graph.
    save_on_cpu`` semantics): the block's input is copied to a host buffer and only that copy is kept for
    backward; the forward computes on the device tensor it was given (then dropped), and the recompute
    first copies the host buffer back to the device. What the host holds and the bytes each way are the
    recorder's (``tracker.on_host``); the time over the host link is memory/offload.py's."""
    from torch.utils.checkpoint import checkpoint

    x = args[0]
    with on_host():
        host = torch.empty_like(x)
        host.copy_(x.detach())
    given = [x]
    requires_grad = x.requires_grad

    def offloaded(first: torch.Tensor, *rest: Any, **kw: Any) -> Any:
        if given:  # the forward: the device tensor itself (the graph reaches the previous block through it)
            device = given.pop()
        else:  # the recompute: back from the host, requiring grad as the original input did
            device = torch.empty_like(first)
            device.copy_(first)
            device.requires_grad_(requires_grad)
        return run(device, *rest, **kw)

    return checkpoint(offloaded, host, *args[1:], use_reentrant=False, **kwargs)  # type: ignore[call-overload]


class Semantics(Protocol):
    """Whose behaviour the step's forward follows: the kernels chosen and what autocast casts."""

    def forward(self) -> AbstractContextManager[None]:
        """Entered around each forward and its loss."""
        ...

    def recompute(self) -> AbstractContextManager[None]:
        """Re-entered around a checkpointed block's recompute during backward."""
        ...


class CudaEmulation:
    """CUDA's behaviour on fake CPU tensors: its attention kernel choice and autocast lists
    (the estimate; trace/cuda_semantics.py)."""

    def __init__(self, attention: CudaAttention, amp_dtype: torch.dtype | None) -> None:
        self.attention = attention
        self.amp_dtype = amp_dtype

    @contextlib.contextmanager
    def forward(self) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            stack.enter_context(self.attention)
            if self.amp_dtype is not None:
                stack.enter_context(CudaAutocast(self.amp_dtype))
            yield

    @contextlib.contextmanager
    def recompute(self) -> Iterator[None]:
        with self.attention.resume(), CudaAutocast.resume(self.amp_dtype):
            yield


class DeviceSemantics:
    """The device's own behaviour: real ``torch.autocast`` of ``device_type`` (the host-semantics
    trace on the CPU, and every real run of ``gpuplan.measure``)."""

    def __init__(self, device_type: str, amp_dtype: torch.dtype | None) -> None:
        self.device_type = device_type
        self.amp_dtype = amp_dtype

    def forward(self) -> AbstractContextManager[None]:
        if self.amp_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.amp_dtype)

    def recompute(self) -> AbstractContextManager[None]:
        return contextlib.nullcontext()  # torch.utils.checkpoint re-enters torch.autocast itself


class StepRunner:
    """Builds the model and runs the recorded step; one instance per traced configuration."""

    def __init__(self, source: ModelSource, workload: Workload, target: Target, *, fake: bool = True,
                 layers: Mapping[str, int] | None = None) -> None:
        self.source = source
        self.workload = workload
        self.target = target
        self.fake = fake
        self.layers = dict(layers or {})

    def run(self) -> RunResult:
        with quiet(), torch.device("cpu"):
            fake_mode: Any = FakeTensorMode(allow_non_fake_inputs=False) if self.fake else contextlib.nullcontext()
            patches: Any = (transformers_on_fake_tensors(self.source.kind in ("catalog", "hf-config"))
                            if self.fake else contextlib.nullcontext())
            with fake_mode, patches:
                return self._run()

    # -- building ---------------------------------------------------------------------------
    def build_model(self) -> nn.Module:
        """The model in the workload's parameter dtype and train/eval mode (fake weights when ``fake``)."""
        dtype = DTYPES[self.workload.param_dtype]
        previous = torch.get_default_dtype()
        # Build in the parameter dtype: converting afterwards (module.to) must swap fake
        # parameters, which fails while the fake mode holds weak references to them.
        torch.set_default_dtype(dtype)
        try:
            with no_weight_init() if self.fake else contextlib.nullcontext():
                model = self.source.build(self.workload, self.layers or None)
        except TraceError:
            raise
        except Exception as exc:
            if isinstance(exc, (TypeError, ValueError, RuntimeError, KeyError, AttributeError)):
                from gpuplan.errors import GpuplanError

                if isinstance(exc, GpuplanError):
                    raise
                raise TraceError(f"building {self.source.name} failed: {type(exc).__name__}: {exc}") from exc
            raise
        finally:
            torch.set_default_dtype(previous)
        model = adapt_model(model, self.source, self.workload)
        model.train(self.workload.trains)
        return model

    def make_inputs(self, model: nn.Module) -> Inputs:
        """The step's inputs, floating ones (images, pixel values) made in the parameter dtype: pure fp16 / bf16
        training feeds ``x.half()`` as a user's loop must (a float32 image into fp16 convolutions fails:
        ``estimate resnet18 --precision fp16`` did); integer ids are unchanged."""
        previous = torch.get_default_dtype()
        torch.set_default_dtype(DTYPES[self.workload.param_dtype])
        try:
            return self.source.inputs(model, self.workload)
        finally:
            torch.set_default_dtype(previous)

    # -- the step ---------------------------------------------------------------------------
    def _run(self) -> RunResult:
        w = self.workload
        model = self.build_model()
        counts = self.layers or self.source.layer_counts()
        known = self.source.block_paths()
        containers = ({k: known[k] for k in counts} if counts and all(k in known for k in counts)
                      else find_containers(model, counts) if counts else {})
        recorder = Recorder(block_containers=containers.values())
        amp_dtype = DTYPES[w.autocast_dtype] if w.autocast_dtype else None
        attention = CudaAttention(AttentionPolicy(w.attention, self.target.compute_capability))
        semantics: Semantics = (CudaEmulation(attention, amp_dtype) if self.target.cuda
                                else DeviceSemantics("cpu", amp_dtype))
        if w.trains and w.checkpointing != "none":
            apply_checkpointing(block_modules(model, containers), w.checkpointing, semantics.recompute,
                                offload=w.offloads("activations"))
        params = [p for p in model.parameters() if p.requires_grad]
        optimizer = build_optimizer(w.optimizer, w.optimizer_impl, params, cuda=self.target.cuda) if w.trains else None
        inputs = self.make_inputs(model)
        # on fake tensors a few decode steps are traced and the rest extrapolated (trace/decode.py)
        step = StepProgram(self.source, w, model, optimizer, inputs, semantics,
                           decode_steps_limit=DECODE_STEPS_TRACED if self.fake else None,
                           accum_steps_limit=ACCUM_STEPS_TRACED if self.fake else None)
        if w.trains:
            step.warm_up()
        self._register_existing(recorder, model, optimizer, inputs)
        recorder.module_scope = ModuleScope(model)
        with step_gc(collect_first=not self.fake), RecordingMode(recorder), recorder.module_scope:
            try:
                step.run(recorder)
            finally:
                recorder.close()
        unique = {id(p.untyped_storage()): p for p in model.parameters()}
        params_count = logical_params_count(model)  # a quantized layer counts the weights it packs
        module_params, module_param_sizes = own_parameters(model)
        trainable, trainable_bytes, frozen_float, frozen_float_bytes = trainable_split(model)
        children = child_weights(model) if self.source.kind == "pipeline" else {}
        return RunResult(
            trace=recorder.trace,
            params_count=params_count,
            param_bytes=sum(p.untyped_storage().nbytes() for p in unique.values()),
            containers=containers,
            block_counts=dict(counts),
            attention_backends=dict(attention.choices),
            decode_steps_traced=step.decode_steps_traced,
            decode_steps_full=max(0, w.new_tokens - 1) if w.mode == "generate" else 0,
            accum_steps_traced=step.accum_steps_traced,
            accum_steps_full=w.grad_accum if w.trains else 0,
            accum_last_ops=step.accum_last_ops,
            module_params=module_params,
            module_param_sizes=module_param_sizes,
            trainable_params=trainable,
            frozen_float_params=frozen_float,
            frozen_float_param_bytes=frozen_float_bytes,
            trainable_param_bytes=trainable_bytes,
            child_weights=children,
        )

    def _register_existing(self, recorder: Recorder, model: nn.Module, optimizer: Any, inputs: Inputs) -> None:
        for name, p in model.named_parameters():
            sid = recorder.register(p, category="parameters")
            recorder.set_storage_block(sid, recorder.block_of(name))
            if p.grad is not None:
                gid = recorder.register(p.grad, category="gradients")
                recorder.set_storage_block(gid, recorder.block_of(name))
        for _, b in model.named_buffers():
            recorder.register(b, category="parameters")
        if optimizer is not None:
            names = {id(q): n for n, q in model.named_parameters()}
            for p, state in optimizer.state.items():
                block = recorder.block_of(names.get(id(p), ""))
                for key, v in state.items():
                    if key == "step" and self.target.cuda and not _on_device_step(optimizer):
                        recorder.tag_untracked(v, block)  # torch keeps step counters on the host
                        continue
                    if isinstance(v, torch.Tensor):
                        sid = recorder.register(v, category="optimizer_state")
                        recorder.set_storage_block(sid, block)
        for t in inputs.tensors():
            recorder.register(t, category="activations")


def _on_device_step(optimizer: Any) -> bool:
    group = optimizer.param_groups[0] if optimizer.param_groups else {}
    return bool(group.get("fused") or group.get("capturable"))


class StepProgram:
    """The user-visible program of one steady-state step, written as people write it, built once:
    ``grad_accum`` × (forward, loss, backward), optimizer step, zero_grad; or one forward under
    ``no_grad``; or a prefill and decode steps. The estimator runs it on fake tensors with
    :class:`CudaEmulation`; ``gpuplan.measure`` runs it on a real device with
    :class:`DeviceSemantics` (so the two compare one program, not two).

    Each run takes the recorder that watches it (None: an unrecorded run, e.g. a timed step); the
    program moves it through the step's phases (``Recorder.enter``). ``model`` is what the step
    calls; ``unwrapped`` is the model inside it when a parallel layout wrapped it (DDP, a DeepSpeed
    engine): what kind of model it is (a transformers LM or not) is read from that one.
    """

    def __init__(self, source: ModelSource, workload: Workload, model: nn.Module, optimizer: Any, inputs: Inputs,
                 semantics: Semantics, *, unwrapped: nn.Module | None = None,
                 decode_steps_limit: int | None = None, accum_steps_limit: int | None = None) -> None:
        self.source = source
        self.w = workload
        self.model = model
        self.optimizer = optimizer
        self.inputs = inputs
        self.semantics = semantics
        self.decode_steps_limit = decode_steps_limit
        """Decode steps to run at most (None: all ``new_tokens - 1``)."""
        inner = unwrapped if unwrapped is not None else model
        self.is_hf_lm = hasattr(inner, "config") and hasattr(inner, "get_output_embeddings")
        self.decode_steps_traced = 0
        self.accum_steps_limit = accum_steps_limit
        """Micro-batches to run at most (None: all ``grad_accum``; trace/accumulation.py)."""
        self.accum_steps_traced = 0
        self.accum_last_ops: tuple[int, int] = (0, 0)

    def warm_up(self) -> None:
        """Bring the optimizer to its steady state (state tensors exist, as in every step after
        the first) without running a forward and backward: zero gradients stand in for real ones."""
        if self.optimizer is None:
            return
        for p in self.model.parameters():
            if p.requires_grad:
                p.grad = torch.zeros_like(p)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=self.w.zero_grad == "set-to-none")

    def run(self, rec: Recorder | None = None) -> None:
        """One step of the workload's mode (a whole generation in generate mode)."""
        if self.w.mode == "train":
            self.train_step(rec)
        elif self.w.mode == "infer":
            self.infer_step(rec)
        else:
            self.generate(rec)

    def _forward(self, rec: Recorder, **extra: Any) -> Any:
        try:
            return self.model(*self.inputs.args, **{**self.inputs.kwargs, **extra})
        except TraceError:
            raise
        except Exception as exc:
            module = rec.current_module() or type(self.model).__name__
            first = str(exc).splitlines()[0] if str(exc) else ""
            if "DataDependent" in type(exc).__name__ or "data-dependent" in first.lower():
                advice = ("it reads tensor values (`if tensor:`, `.item()`), which fake tensors cannot answer; "
                          "make that branch depend on shapes only")
            else:
                advice = "check the inputs its forward expects, or give an inputs factory (file.py:model,inputs)"
            raise TraceError(
                f"forward of {self.source.name} failed under fake tensors in module {module!r}: "
                f"{type(exc).__name__}: {first} — {advice}"
            ) from exc

    def _share_phases(self, rec: Recorder) -> None:
        """A model that runs several stages in one forward (a diffusion pipeline) names them itself."""
        setter = getattr(self.model, "set_phase_sink", None)
        if callable(setter):
            setter(rec.enter)

    def train_step(self, recorder: Recorder | None = None) -> None:
        record = recorder is not None
        rec = _phase_sink(recorder)
        self._share_phases(rec)
        steps = self.w.grad_accum
        if self.accum_steps_limit is not None:
            steps = min(steps, self.accum_steps_limit)
        for index in range(steps):
            first_op = len(rec.trace.ops)
            rec.enter("forward")
            with self.semantics.forward():
                # Training keeps no KV cache (transformers turns it off under checkpointing; a cache
                # built in a checkpointed forward would pin the K/V the checkpoint meant to drop).
                out = self._forward(rec, **({"use_cache": False} if self.is_hf_lm else {}))
                rec.enter("loss")
                loss = self.source.loss(self.model, out, self.inputs, self.w)
            live_with_output = rec.live_bytes
            del out  # a trainer-style loop: what only the output held is freed before backward
            rec.trace.released_output_bytes = live_with_output - rec.live_bytes
            if self.w.grad_accum > 1:
                loss = loss / self.w.grad_accum
            if self.w.precision == "amp-fp16":
                loss = loss * _GRAD_SCALE
            rec.enter("backward")
            loss.backward()
            del loss
            # Checkpointing's recompute leaves reference cycles whose tensors only the cyclic GC
            # frees, at a moment that depends on allocation counts, not on the program. Collect
            # here so real and traced runs agree (a real GPU run frees them at its next GC).
            gc.collect()
            if record:
                for name, p in self.model.named_parameters():
                    if p.grad is not None:
                        sid = rec.register(p.grad, category="gradients")
                        rec.set_storage_block(sid, rec.block_of(name))
            if index == steps - 1:
                self.accum_last_ops = (first_op, len(rec.trace.ops))
        self.accum_steps_traced = steps
        if self.optimizer is not None:
            rec.enter("optimizer")
            self.optimizer.step()
            if record:
                for t in state_tensors(self.optimizer):
                    if rec.storage_id(t) is not None:
                        rec.register(t, category="optimizer_state")
            rec.enter("zero_grad")
            self.optimizer.zero_grad(set_to_none=self.w.zero_grad == "set-to-none")
        else:
            rec.enter("zero_grad")
            self.model.zero_grad(set_to_none=self.w.zero_grad == "set-to-none")

    def infer_step(self, recorder: Recorder | None = None) -> None:
        rec = _phase_sink(recorder)
        self._share_phases(rec)
        extra = {"use_cache": False} if self.is_hf_lm else {}
        rec.enter("forward")
        with torch.no_grad(), self.semantics.forward():
            out = self._forward(rec, **extra)
        del out

    def generate(self, recorder: Recorder | None = None) -> None:
        if not self.source.generates:
            from gpuplan.errors import ConfigError

            raise ConfigError(f"--mode generate needs a causal language model; {self.source.name} is a "
                              f"{self.source.task} model (use --mode infer)")
        import inspect

        from transformers import DynamicCache

        rec = _phase_sink(recorder)
        cache = DynamicCache(config=self.model.config)  # type: ignore[arg-type]
        keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(self.model.forward).parameters else {}
        ids = self.inputs.kwargs["input_ids"]
        rec.enter("prefill")
        with torch.no_grad(), self.semantics.forward():
            out = self.model(input_ids=ids, past_key_values=cache, use_cache=True, **keep)
            token = out.logits[:, -1:].argmax(-1)
            del out
            self._mark_cache(recorder, cache)
            rec.enter("decode")
            # Decode steps differ only by the cache length, so live bytes are affine in the step
            # index: a few steps are traced and the rest extrapolated (gpuplan.trace.decode).
            steps = self.w.new_tokens - 1
            if self.decode_steps_limit is not None:
                steps = min(steps, self.decode_steps_limit)
            for index in range(steps):
                rec.repeat = index
                out = self.model(input_ids=token, past_key_values=cache, use_cache=True, **keep)
                token = out.logits[:, -1:].argmax(-1)
                del out
                self._mark_cache(recorder, cache)
            rec.repeat = -1
            self.decode_steps_traced = steps

    def _mark_cache(self, recorder: Recorder | None, cache: Any) -> None:
        if recorder is None:
            return
        for layer in getattr(cache, "layers", []):
            for name in ("keys", "values"):
                t = getattr(layer, name, None)
                if isinstance(t, torch.Tensor):
                    recorder.register(t, category="kv_cache")


def _phase_sink(recorder: Recorder | None) -> Recorder:
    """The recorder whose phase the step sets: a detached one when nothing records (it sees no op)."""
    return recorder if recorder is not None else Recorder(record_ops=False)
