"""The trace record of one step (``TracedStep``) and how it is made: the model traced whole, or with
3 and 2 repeated blocks scaled to the full depth, decode steps extrapolated, the allocations
replayed through the caching-allocator model.

Everything downstream (memory on a GPU, the cost model, the planner, fit, recommend, measure) reads
a ``TracedStep``; none of them traces again with other constants.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpuplan.hardware import DEFAULT_COMPUTE_CAPABILITY
from gpuplan.trace.records import TracedStep
from gpuplan.workload import Workload

__all__ = ["TracedStep", "peak_point", "trace_source", "trace_step"]

if TYPE_CHECKING:
    from gpuplan.memory.allocator import AllocatorStats
    from gpuplan.models.sources import ModelSource
    from gpuplan.trace.records import OpRecord, RawTrace, RunResult



def trace_step(model: str | ModelSource, workload: Workload, *, cuda: bool = True, fake: bool = True,
               compute_capability: tuple[int, int] = DEFAULT_COMPUTE_CAPABILITY, scale: bool = True) -> TracedStep:
    """The traced (and scaled) step alone, for tests and the planner. ``cuda=False`` follows
    the host's semantics (CPU autocast lists, CPU attention kernels, default optimizer loop);
    ``fake=False`` runs the step for real on the CPU (small models only); ``scale=False`` traces
    every block instead of 3 and 2 scaled to the full depth."""
    from gpuplan.models.sources import ModelSource, resolve_model

    source = model if isinstance(model, ModelSource) else resolve_model(model)
    return trace_source(source, workload, compute_capability, fake=fake, cuda=cuda, scale=scale)


def _category_total(run: RunResult, category: str) -> int:
    return sum(s.size_bytes for s in run.trace.storages.values() if s.category == category)


def trace_source(source: ModelSource, workload: Workload, cc: tuple[int, int], *, fake: bool, cuda: bool,
                scale: bool = True) -> TracedStep:
    """The step of ``source`` under ``workload`` on a GPU of compute capability ``cc``: read from the
    active trace cache (trace/cache.py) when it holds it, else traced (and stored there)."""
    from gpuplan.trace.cache import active_trace_cache, trace_key

    if workload.decoder_seq_len is not None and not hasattr(source, "decoder_seq_len"):
        from gpuplan.errors import ConfigError

        raise ConfigError(f"--decoder-seq-len {workload.decoder_seq_len} applies to encoder-decoder models (T5, BART) "
                          f"given by a Hugging Face config; {source.name} is not one — drop it")
    cache = active_trace_cache() if fake and cuda and scale else None
    key = trace_key(source, workload, cc) if cache is not None else None
    note = None
    if cache is not None and key is not None:
        found = cache.load(key)
        if found.step is not None:
            return found.step
        note = found.note
    from gpuplan.extras import require_workload

    require_workload(workload)  # a missing optional package is one line before the model is built
    step = _with_repeats(_trace_source(source, workload, cc, fake=fake, cuda=cuda, scale=scale),
                         source.op_repeats(workload))
    if cache is not None and key is not None:
        cache.store(key, step)
    if note is not None:
        from dataclasses import replace

        step = replace(step, notes=(*step.notes, note))
    return step


def _trace_source(source: ModelSource, workload: Workload, cc: tuple[int, int], *, fake: bool, cuda: bool,
                  scale: bool = True) -> TracedStep:
    from gpuplan.memory.allocator import min_capacity, replay
    from gpuplan.models.sources import WeightsOnlySource
    from gpuplan.trace.cache import layer_counts_of
    from gpuplan.trace.decode import extend_decode, scale_decode_ops
    from gpuplan.trace.runner import StepRunner, Target
    from gpuplan.trace.scaling import TRACED_BLOCKS, Scaler, ScalingMismatch

    if isinstance(source, WeightsOnlySource):
        return _weights_only_step(source, workload)
    target = Target(cuda=cuda, compute_capability=cc)
    counts = layer_counts_of(source) if fake and scale else {}
    notes: list[str] = list(source.workload_notes(workload))
    if counts and all(n > TRACED_BLOCKS for n in counts.values()):
        reduced = dict.fromkeys(counts, TRACED_BLOCKS)
        run_a = StepRunner(source, workload, target, fake=fake, layers=reduced).run()
        runs_b = {k: StepRunner(source, workload, target, fake=fake, layers={**reduced, k: TRACED_BLOCKS - 1}).run()
                  for k in counts}
        try:
            scaler = Scaler(run_a.trace, {k: r.trace for k, r in runs_b.items()}, run_a.containers, counts)
        except ScalingMismatch as exc:
            notes.append(f"traced whole: {exc}")
        else:
            return _scaled_step(run_a, runs_b, scaler, counts, notes + trace_notes(run_a, workload))
    run = StepRunner(source, workload, target, fake=fake).run()
    stats = replay(run.trace.events)
    needed = min_capacity(run.trace.events, stats.peak_allocated_bytes, stats.peak_reserved_bytes)
    from gpuplan.trace.scaling import category_vectors

    point = peak_point(run.trace)
    components = category_vectors(run.trace, [point])[point] if point >= 0 else {}
    peak_bytes, peak_phase = run.trace.peak_bytes, run.trace.peak_phase
    decode = extend_decode(run.trace.points, run.decode_steps_traced, run.decode_steps_full,
                           lambda i: run.trace.points[i].peak_bytes,
                           lambda i: category_vectors(run.trace, [i])[i])
    if decode is not None and decode.peak_bytes > peak_bytes:
        # what the untraced decode steps add on top of the traced ones raises every allocator figure
        extra = decode.peak_bytes - peak_bytes
        peak_bytes, peak_phase, components = decode.peak_bytes, "decode", decode.components
        point = decode.point_index
        stats = _with_extra_peak(stats, extra)
        needed += extra
    notes.extend(trace_notes(run, workload))
    step = TracedStep(
        ops=tuple(_accumulated(scale_decode_ops(run.trace.ops, run.decode_steps_traced, run.decode_steps_full), run)),
        tensor_peak_bytes=peak_bytes, tensor_components=components, peak_phase=peak_phase,
        params_count=run.params_count, param_bytes=run.param_bytes,
        block_counts={}, traced_blocks=dict(run.block_counts), rounded_peak_bytes=stats.peak_allocated_bytes,
        reserved_peak_bytes=stats.peak_reserved_bytes, min_reserved_bytes=needed,
        top_activation_modules=_top_modules(run, point, components.get("activations", 0), ()),
        attention_backends=run.attention_backends, gradient_bytes=_category_total(run, "gradients"),
        optimizer_state_bytes=_category_total(run, "optimizer_state"), trainable_params_count=run.trainable_params,
        trainable_param_bytes=run.trainable_param_bytes, frozen_float_params_count=run.frozen_float_params,
        frozen_float_param_bytes=run.frozen_float_param_bytes, notes=tuple(notes),
        phase_peaks=_phase_peaks(run.trace, lambda i: run.trace.points[i].peak_bytes),
        child_param_bytes={k: v[0] for k, v in run.child_weights.items()}, run=run,
        host_peak_bytes=run.trace.host_peak_bytes, host_copy_bytes=_all_micro_batches(run.trace.host_copy_bytes, run))
    return step


def _all_micro_batches(traced_bytes: float, run: RunResult) -> int:
    """Bytes moved by the traced micro-batches, for all ``--grad-accum`` of them (trace/accumulation.py traces 2)."""
    if run.accum_steps_traced <= 1 or run.accum_steps_full <= run.accum_steps_traced:
        return int(traced_bytes)
    return int(traced_bytes * run.accum_steps_full / run.accum_steps_traced)


def _phase_peaks(trace: RawTrace, value: Any) -> dict[str, int]:
    """Most live bytes per phase, ``value(i)`` being point i's (at full depth when scaled)."""
    peaks: dict[str, int] = {}
    for i, p in enumerate(trace.points):
        v = int(value(i))
        if v > peaks.get(p.phase, -1):
            peaks[p.phase] = v
    return peaks


def _with_repeats(step: TracedStep, repeats: Mapping[str, int]) -> TracedStep:
    """Ops under each module prefix counted as many times as the program runs them (a pipeline's denoiser
    and scheduler once per sampling step): time and FLOPs scale, memory does not (every step's peak is one
    step's)."""
    if not repeats:
        return step
    from dataclasses import replace

    def times(module: str) -> int:
        for prefix, n in repeats.items():
            if module == prefix or module.startswith(prefix + "."):
                return n
        return 1

    return replace(step, ops=tuple(op if times(op.module) == 1 else replace(op, count=op.count * times(op.module))
                                   for op in step.ops))


def _weights_only_step(source: Any, workload: Workload) -> TracedStep:
    """A checkpoint with no config.json: its tensors loaded for inference, from headers alone."""
    from gpuplan.errors import ModelSourceError
    from gpuplan.memory.allocator import replay
    from gpuplan.trace.records import MemEvent

    summary = source.summary
    if workload.mode != "infer":
        raise ModelSourceError(
            f"{source.name} has no config.json beside it: only the weights are known "
            f"({summary.params_count:,} parameters, {summary.weight_bytes / 2**30:.2f} GiB), which answers "
            f"--mode infer as weights memory; put the model's config.json next to it for --mode {workload.mode}")
    stats = replay(MemEvent(i, size) for i, size in enumerate(summary.tensor_bytes))
    return TracedStep(
        ops=(), tensor_peak_bytes=summary.weight_bytes, tensor_components={"parameters": summary.weight_bytes},
        peak_phase="setup", params_count=summary.params_count, param_bytes=summary.weight_bytes, block_counts={},
        traced_blocks={}, rounded_peak_bytes=stats.peak_allocated_bytes, reserved_peak_bytes=stats.peak_reserved_bytes,
        min_reserved_bytes=stats.peak_allocated_bytes, top_activation_modules=(), attention_backends={},
        notes=(f"weights only, from {summary.format} headers "
               f"({', '.join(f'{k} {v:,}' for k, v in summary.dtypes.items())}"
               " parameters): no config.json, so activations are not estimated",))


def _with_extra_peak(stats: AllocatorStats, extra_bytes: int) -> AllocatorStats:
    """Allocator figures raised by what the untraced decode steps add on top of the traced ones."""
    from dataclasses import replace

    return replace(stats, peak_allocated_bytes=stats.peak_allocated_bytes + extra_bytes,
                   peak_reserved_bytes=stats.peak_reserved_bytes + extra_bytes)


def peak_point(trace: RawTrace) -> int:
    """Index of the trace point with the most live bytes (the first such), -1 for an empty trace."""
    return max(range(len(trace.points)), key=lambda i: trace.points[i].peak_bytes, default=-1)


def _scaled_step(run_a: RunResult, runs_b: Mapping[str, RunResult], scaler: Any, counts: Mapping[str, int],
                 notes: list[str]) -> TracedStep:
    from gpuplan.memory.allocator import min_capacity, replay
    from gpuplan.trace.decode import extend_decode, scale_decode_ops

    peak = scaler.peak()
    peak_bytes, peak_phase, components = peak.peak_bytes, peak.peak_phase, peak.components
    point = peak.point_index
    decode = extend_decode(run_a.trace.points, run_a.decode_steps_traced, run_a.decode_steps_full,
                           scaler.value, scaler.components_at)
    if decode is not None and decode.peak_bytes > peak_bytes:
        peak_bytes, peak_phase, components = decode.peak_bytes, "decode", decode.components
        point = decode.point_index
    stats_a = replay(run_a.trace.events)
    stats_b = {k: replay(r.trace.events) for k, r in runs_b.items()}
    rounding = scaler.scale_scalar(stats_a.peak_allocated_bytes - run_a.trace.peak_bytes,
                                   {k: s.peak_allocated_bytes - runs_b[k].trace.peak_bytes for k, s in stats_b.items()})
    # Allocator slack does not grow affinely with depth at 2–3 blocks (it is dominated by which
    # segments happen to be free), so it is carried over as a ratio of the allocated peak. Measured
    # on llama-3.1-8b AMP training traced whole at 3/6/12/32 blocks: the ratio needed to run (with
    # cached blocks released under pressure) stayed 2.3–2.5%; the reserved-on-a-large-device ratio
    # grew from 7.7% to 13.4%, so ``reserved_peak_bytes`` of deep models is a lower bound.
    slack_ratio = (stats_a.peak_reserved_bytes - stats_a.peak_allocated_bytes) / max(1, stats_a.peak_allocated_bytes)
    needed_a = min_capacity(run_a.trace.events, stats_a.peak_allocated_bytes, stats_a.peak_reserved_bytes)
    needed_ratio = (needed_a - stats_a.peak_allocated_bytes) / max(1, stats_a.peak_allocated_bytes)
    params = scaler.scale_scalar(run_a.params_count, {k: r.params_count for k, r in runs_b.items()})
    param_bytes = scaler.scale_scalar(run_a.param_bytes, {k: r.param_bytes for k, r in runs_b.items()})
    rounded = peak_bytes + max(0, int(rounding))
    notes.append("repeated blocks traced at " + ", ".join(f"{k}=3 and 2" for k in counts)
                 + " and scaled to " + ", ".join(f"{k}={n}" for k, n in counts.items()))
    return TracedStep(
        ops=tuple(_accumulated(scale_decode_ops(scaler.scaled_ops(), run_a.decode_steps_traced,
                                                run_a.decode_steps_full), run_a)),
        tensor_peak_bytes=peak_bytes, tensor_components=components, peak_phase=peak_phase,
        params_count=int(params), param_bytes=int(param_bytes),
        block_counts=dict(counts), traced_blocks=dict(run_a.block_counts), rounded_peak_bytes=rounded,
        reserved_peak_bytes=rounded + int(rounded * slack_ratio),
        min_reserved_bytes=rounded + int(rounded * needed_ratio),
        top_activation_modules=_top_modules(run_a, point, components.get("activations", 0),
                                            list(run_a.containers.values())),
        attention_backends=run_a.attention_backends,
        gradient_bytes=int(scaler.scale_scalar(_category_total(run_a, "gradients"),
                                               {k: _category_total(r, "gradients") for k, r in runs_b.items()})),
        optimizer_state_bytes=int(scaler.scale_scalar(
            _category_total(run_a, "optimizer_state"),
            {k: _category_total(r, "optimizer_state") for k, r in runs_b.items()})),
        trainable_params_count=_scaled_trainable(scaler, run_a, runs_b),
        trainable_param_bytes=_scaled_count(scaler, run_a, runs_b, "trainable_param_bytes"),
        frozen_float_params_count=_scaled_count(scaler, run_a, runs_b, "frozen_float_params"),
        frozen_float_param_bytes=_scaled_count(scaler, run_a, runs_b, "frozen_float_param_bytes"),
        notes=tuple(notes), phase_peaks=_phase_peaks(run_a.trace, scaler.value),
        child_param_bytes={k: int(scaler.scale_scalar(v[0], {key: r.child_weights[k][0] for key, r in runs_b.items()}))
                           for k, v in run_a.child_weights.items()}, run=run_a,
        host_peak_bytes=int(scaler.scale_scalar(run_a.trace.host_peak_bytes,
                                                {k: r.trace.host_peak_bytes for k, r in runs_b.items()})),
        host_copy_bytes=_all_micro_batches(scaler.scale_scalar(
            run_a.trace.host_copy_bytes, {k: r.trace.host_copy_bytes for k, r in runs_b.items()}), run_a))


def _accumulated(ops: Sequence[OpRecord], run: RunResult) -> list[OpRecord]:
    """``ops`` (index for index those of ``run``) with the untraced micro-batches counted
    (trace/accumulation.py)."""
    from gpuplan.trace.accumulation import scale_accumulation_ops

    return scale_accumulation_ops(ops, run.accum_last_ops, run.accum_steps_traced, run.accum_steps_full)


def _scaled_trainable(scaler: Any, run_a: RunResult, runs_b: Mapping[str, RunResult]) -> int | None:
    """Trainable parameters at full depth: affine in the block count like every parameter (exact for
    identical blocks: what is outside them, e.g. ``--train-modules lm_head``, counts once)."""
    if run_a.trainable_params is None or any(r.trainable_params is None for r in runs_b.values()):
        return None
    return int(scaler.scale_scalar(run_a.trainable_params, {k: r.trainable_params or 0 for k, r in runs_b.items()}))


def _scaled_count(scaler: Any, run_a: RunResult, runs_b: Mapping[str, RunResult], name: str) -> int:
    """A whole-run count of the trace record (``RunResult.<name>``) at full depth, affine in the
    block count like ``params_count``."""
    return int(scaler.scale_scalar(getattr(run_a, name), {k: getattr(r, name) for k, r in runs_b.items()}))


def _top_modules(run: RunResult, point: int, activation_bytes: int, containers: Sequence[str], n: int = 10
                 ) -> tuple[tuple[str, int], ...]:
    """Activation bytes by module at the op where the activation component is taken (the peak,
    or the traced decode op the decode peak is extrapolated from), block indices of the scaled
    ``containers`` folded to '*'. The table apportions ``activation_bytes`` exactly: whatever
    scaling added to the traced bytes (deeper models, untraced decode steps) belongs to the
    repeated blocks, so their rows are scaled by (component − other rows) / traced block bytes.
    A fixed blocks/traced factor is right only where every block holds activations (end of a
    training forward); during inference one block's working set is live at a time, and that
    factor made the table 2.6× the component (issue 9, item 12: llama-3.1-8b generate)."""
    if point < 0:
        return ()
    trace = run.trace
    live: dict[int, int] = {}
    for ev in trace.events[: trace.points[point].event_count]:
        if ev.size_bytes > 0:
            live[ev.storage_id] = ev.size_bytes
        else:
            live.pop(ev.storage_id, None)
    folds = [(re.compile(rf"^{re.escape(container)}\.\d+"), f"{container}.*") for container in containers]
    in_blocks: dict[str, int] = {}
    others: dict[str, int] = {}
    for sid, size in live.items():
        info = trace.storages[sid]
        if info.category != "activations":
            continue
        name = info.module or "(inputs and top level)"
        for pattern, folded_name in folds:
            folded = pattern.sub(folded_name, name)
            if folded != name:
                in_blocks[folded] = in_blocks.get(folded, 0) + size
                break
        else:
            others[name] = others.get(name, 0) + size
    traced_blocks, traced_others = sum(in_blocks.values()), sum(others.values())
    if traced_blocks and activation_bytes >= traced_others:
        block_factor, other_factor = (activation_bytes - traced_others) / traced_blocks, 1.0
    else:  # nothing to scale in blocks, or the component is below the traced rows: shrink all alike
        block_factor = other_factor = min(1.0, activation_bytes / max(1, traced_blocks + traced_others))
    rows = {**{k: v * block_factor for k, v in in_blocks.items()}, **{k: v * other_factor for k, v in others.items()}}
    ranked = sorted(rows.items(), key=lambda kv: -kv[1])[:n]
    return tuple((k, int(v)) for k, v in ranked)


def trace_notes(run: RunResult, workload: Workload) -> list[str]:
    """Assumptions a traced run makes that the user should read with the figures."""
    notes: list[str] = []
    if run.accum_steps_full > run.accum_steps_traced > 0:
        notes.append(f"gradient accumulation: {run.accum_steps_traced} of {run.accum_steps_full} micro-batches "
                     "traced; each other one runs the ops of the last traced one and needs the same memory "
                     "(the accumulated gradients are alive from the second on)")
    bounded = run.trace.worst_case_ops
    if bounded:
        ops = ", ".join(f"aten.{name} ×{count}" for name, count in sorted(bounded.items()))
        notes.append(f"data-dependent shapes ({ops}) traced at their worst case, every element selected: "
                     "the memory of what they select is an upper bound")
    if workload.trains and run.trace.released_output_bytes > 0:
        notes.append(
            f"training loop modelled: the model's output is released before backward (loss = loss_fn(model(x)); "
            f"loss.backward(), as transformers' Trainer does); a loop that keeps the output alive through backward "
            f"holds {run.trace.released_output_bytes:,} bytes more at a backward peak (the output, e.g. logits) — "
            "trace your own loop as written with gpuplan.simulate")
    return notes
