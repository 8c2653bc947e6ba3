"""``gpuplan plan`` results → JSON (the DESIGN.md contract) and → text. The planner never imports this
module: it registers nothing and calls nothing here; report/registry.py ties the result type to it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from gpuplan.parallel.evaluate import Evaluation, RankMemory
    from gpuplan.parallel.layout import Layout
    from gpuplan.parallel.plan import Plan


def parallelism(lay: Layout) -> dict[str, Any]:
    # the sharding sum type flattened to the DESIGN.md keys (None where its variant has no such field)
    s = lay.sharding
    return {
        "dp": lay.dp,
        "tp": lay.tp,
        "pp": lay.pp,
        "ep": lay.ep,
        "cp": lay.cp,
        "cp_comm": lay.cp_comm if lay.cp > 1 else None,
        "first_stage_layers": lay.first_stage_layers or None,
        "last_stage_layers": lay.last_stage_layers or None,
        "zero": lay.zero,
        "fsdp": lay.fsdp,
        "sharding": s.name,
        "hsdp_shard": getattr(s, "hsdp_shard", None),
        "reshard_after_forward": getattr(s, "reshard_after_forward", None),
        "fsdp_sharded_dtype": _sharded_dtype(getattr(s, "sharded_fp32", None)),
        "sequence_parallel": lay.sequence_parallel and lay.tp > 1,
        "schedule": lay.schedule if lay.pp > 1 else None,
        "virtual_stages": lay.virtual_stages if lay.pp > 1 else None,
        "micro_batch_size": lay.micro_batch_size,
        "grad_accum": lay.grad_accum,
        "global_batch_size": lay.global_batch,
        "checkpointing": lay.checkpointing,
        "offload_optimizer": lay.offload_optimizer,
        "offload_params": lay.offload_params,
        "engine": lay.engine,
    }


def _sharded_dtype(sharded_fp32: bool | None) -> str | None:
    """--fsdp-sharded-dtype as the user types it; None for a sharding that has no such setting."""
    if sharded_fp32 is None:
        return None
    return "fp32" if sharded_fp32 else "compute"


def _eval_dict(e: Evaluation, p: Plan) -> dict[str, Any]:
    iv = p.interval(e)
    return {
        "layout": e.layout.describe(),
        "parallelism": parallelism(e.layout),
        "per_gpu_peak_bytes": e.per_gpu_peak_bytes,
        "step_time_s": e.step_time_s,
        "step_time_interval_s": iv.to_list() if iv is not None else None,
        "time_parts_s": dict(e.time_parts_s),
        "ranks": [r.to_dict() for r in e.ranks],
    }


def plan_to_dict(p: Plan) -> dict[str, Any]:
    lm = _is_lm(p)
    best_iv = p.interval()
    out: dict[str, Any] = {
        "model": p.model,
        "gpu": p.gpu.id,
        "gpus": p.gpus,
        "nodes": p.topology.nodes,
        "gpus_per_node": p.topology.gpus_per_node,
        "workload": p.workload.to_dict(),
        "params_count": p.profile.params_count,
        "per_gpu_peak_bytes": p.per_gpu_peak_bytes,
        "usable_bytes_per_gpu": p.usable_bytes,
        "fits": p.fits,
        "step_time_s": p.step_time_s,
        "step_time_interval_s": best_iv.to_list() if best_iv is not None else None,
        "step_time_interval_basis": best_iv.basis if best_iv is not None else None,
        "tflops_per_gpu": p.tflops_per_gpu,
        "mfu": p.mfu,
        "parallelism": parallelism(p.best.layout),
        "layout": p.best.layout.describe(),
        "ranks": [r.to_dict() for r in p.best.ranks],
        "time_parts_s": dict(p.best.time_parts_s),
        "alternatives": [
            {**_eval_dict(e, p), "fits": e.per_gpu_peak_bytes <= p.usable_bytes, "why_not": why}
            for e, why in p.alternatives
        ],
        "layouts_considered": p.layouts_considered,
        "search_s": p.search_s,
        "trace_s": p.trace_s,
        "assumptions": list(p.assumptions),
    }
    if lm:
        out["tokens_per_s_per_gpu"] = p.tokens_per_s_per_gpu
    out["samples_per_s"] = p.samples_per_s
    out.update(p.extra.get("json", {}))
    return out


def _is_lm(p: Plan) -> bool:
    return p.profile.vocab > 0 and p.profile.seq_len > 1


def _rate(p: Plan) -> str:
    if _is_lm(p):
        return f"{p.tokens_per_s_per_gpu:,.0f} tokens/s per GPU"
    return f"{p.samples_per_s:,.1f} samples/s"


def _span(p: Plan) -> str:
    iv = p.interval()
    return f" ({iv.describe()})" if iv is not None else ""


def render_plan(p: Plan) -> str:
    from gpuplan.parallel.evaluate import time_part_name
    from gpuplan.report.text import table

    lay = p.best.layout
    lines = [
        f"{p.model} on {p.gpus} × {p.gpu.id} ({p.topology.nodes} node(s) × {p.topology.gpus_per_node})",
        f"best layout: {lay.describe()}  [{lay.engine}]",
        f"  per-GPU peak {format_bytes(p.per_gpu_peak_bytes)} of {format_bytes(p.usable_bytes)} usable: "
        f"{'fits' if p.fits else 'DOES NOT FIT'}",
        f"  step {format_seconds(p.step_time_s)}{_span(p)}, {_rate(p)}, "
        f"{p.tflops_per_gpu:.1f} TFLOP/s per GPU, MFU {p.mfu * 100:.1f}%",
        "",
    ]
    lines.append(rank_table(p.best.ranks))
    lines.append("")
    lines.append("time: " + ", ".join(f"{time_part_name(k)} {format_seconds(v)}"
                                      for k, v in p.best.time_parts_s.items() if v > 0))
    if p.alternatives:
        lines.append("")
        alt_rows = [
            [e.layout.describe(), format_seconds(e.step_time_s), format_bytes(e.per_gpu_peak_bytes), why]
            for e, why in p.alternatives
        ]
        lines.append(table(alt_rows, ["alternative", "step", "per GPU", "why not"], "lrrl"))
    lines.append("")
    plural = "layout" if p.layouts_considered == 1 else "layouts"
    lines.append(f"{p.layouts_considered} {plural} in {p.search_s:.3f} s (trace {p.trace_s:.1f} s)")
    lines.append("assumptions:")
    lines.extend(f"  - {a}" for a in p.assumptions)
    return "\n".join(lines)


def rank_table(ranks: tuple[RankMemory, ...]) -> str:
    """One row per rank kind whose columns sum to its total: the GPU-side terms (CUDA context, library
    workspaces, allocator slack) and the peak window's activation term get columns of their own."""
    from gpuplan.report.text import table

    rows = []
    for r in ranks:
        # what allocated_bytes adds beyond the state and buffers: activations (+ autocast weight copies)
        # or the optimizer step's temporaries, whichever is larger; derived from the one rule, not re-derived
        window = r.allocated_bytes - (r.params_bytes + r.grads_bytes + r.optimizer_bytes + r.buffers_bytes
                                      + r.overhead_bytes)
        rows.append([
            r.kind,
            format_bytes(r.params_bytes),
            format_bytes(r.grads_bytes),
            format_bytes(r.optimizer_bytes),
            format_bytes(window),
            format_bytes(r.buffers_bytes),
            format_bytes(r.overhead_bytes),
            format_bytes(r.allocator_slack_bytes),
            format_bytes(r.total_bytes),
        ])
    text = table(rows, ["rank", "params", "grads", "optimizer", "activations", "buffers", "CUDA+cuBLAS",
                        "alloc slack", "total"])
    if any(r.weight_cast_bytes or r.optimizer_temp_bytes > r.activations_bytes for r in ranks):
        text += ("\n(activations: the larger of activations + autocast weight copies and the optimizer "
                 "step's temporaries, which never coexist)")
    return text
