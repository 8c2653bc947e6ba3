"""Text and JSON of a serving-capacity result (``gpuplan serve``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.units import GIB, format_seconds

if TYPE_CHECKING:
    from gpuplan.advise.recommend import ServeRecommendation
    from gpuplan.perf.workload_family import TimeInterval
    from gpuplan.serve.capacity import ServeResult
    from gpuplan.serve.disaggregate import Disaggregation
    from gpuplan.serve.layouts import LayoutSearch
    from gpuplan.serve.pipeline import PipelineServe


def serve_to_dict(r: ServeResult) -> dict[str, Any]:
    b = r.budget
    out: dict[str, Any] = {
        "model": r.model,
        "gpu": r.gpu.id,
        "ok": r.ok,
        "reason": r.reason,
        "params_count": r.params_count,
        "total_memory_bytes": b.total_bytes,
        "requested_memory_bytes": b.requested_bytes,
        "weights_bytes": b.weights_bytes,
        "activation_peak_bytes": b.activation_peak_bytes,
        "non_torch_bytes": b.non_torch_bytes,
        "cuda_graph_bytes": b.cuda_graph_bytes,
        "cuda_context_bytes": b.context_bytes,
        "kv_cache_bytes": b.kv_cache_bytes,
        "kv_bytes_per_token": r.kv.bytes_per_token,
        "kv_bytes_per_sequence": r.kv.sequence_bytes(r.context),
        "kv_cache_tokens": r.kv_cache_tokens,
        "context": r.context,
        "concurrency": r.concurrency,
        "concurrency_fits": r.concurrency_fits,
        "max_concurrency": r.max_concurrency,
        "max_concurrency_at_max_model_len": r.max_concurrency_at_max_model_len,
        "max_model_len_fits": r.max_model_len_fits,
        "attention": {"kind": r.layout.kind, "full_layers": r.layout.full_layers,
                      "sliding_layers": r.layout.sliding_layers, "sliding_window": r.layout.sliding_window,
                      "state_layers": r.layout.state_layers,
                      "state_bytes_per_sequence": r.kv.state_bytes_per_sequence},
        "prefill": {"tokens": r.prefill_tokens, "ttft_s": r.prefill.seconds,
                    "ttft_interval_s": _span(r.ttft_interval), **r.prefill.to_dict()},
        "decode": {"batch": r.decode_batch, "context": r.decode_context, "step_s": r.decode.seconds,
                   "step_interval_s": _span(r.step_interval),
                   "tokens_per_s": r.decode_tokens_per_s,
                   "tokens_per_s_per_sequence": 1 / r.decode.seconds if r.decode.seconds > 0 else 0.0,
                   "compute_bound_batch": r.compute_bound_batch, **r.decode.to_dict()},
        "slo": None if r.slo_met is None else {
            "ttft_slo_s": r.ttft_slo_s, "itl_slo_s": r.itl_slo_s, "concurrency": r.slo_concurrency, "met": r.slo_met},
        "engine": r.settings.to_dict(),
        "command": r.command,
        "assumptions": list(r.assumptions),
        "time_unknown": r.time_unknown,
    }
    if r.time_unknown is not None:  # no rate for the dtype: every time is left out (null), the memory stands
        for phase in ("prefill", "decode"):
            for key in ("ttft_s", "step_s", "tokens_per_s", "tokens_per_s_per_sequence", "seconds", "compute_s",
                        "memory_s", "communication_s"):
                if key in out[phase]:
                    out[phase][key] = None
    if r.lora is not None:
        lo = r.lora
        out["lora"] = {"max_loras": lo.max_loras, "max_lora_rank": lo.max_lora_rank, "slot_bytes": lo.slot_bytes,
                       "punica_bytes": lo.punica_bytes, "shrink_buffer_bytes": lo.shrink_buffer_bytes,
                       "params_per_adapter": lo.params_per_adapter}
    if r.drafter is not None:
        d = r.drafter
        out["speculative"] = {"method": d.spec.method, "model": d.spec.model, "num_speculative_tokens": d.spec.tokens,
                              "acceptance": d.spec.acceptance, "accepted_tokens_per_step": d.spec.accepted_per_step,
                              "weights_bytes": d.weights_bytes, "kv_bytes_per_token": d.kv_token_bytes}
    if r.rate is not None:
        q = r.rate
        out["rate"] = {"requests_per_s": q.rate_per_s, "input_len": q.input_len, "output_len": q.output_len,
                       "concurrency_per_replica": q.concurrency_per_replica,
                       "requests_per_s_per_replica": q.requests_per_s_per_replica, "replicas": q.replicas,
                       "gpus": q.gpus, "gpu": q.gpu, "usd_per_million_output_tokens": q.usd_per_million_output_tokens,
                       "itl_s": q.itl_s, "ttft_s": q.ttft_s, "utilization": q.utilization,
                       "ttft_p50_s": q.ttft_p50_s, "ttft_p99_s": q.ttft_p99_s, "e2e_p50_s": q.e2e_p50_s,
                       "e2e_p99_s": q.e2e_p99_s, "queue_model": "M/D/c, Allen-Cunneen (serve/latency.py)"}
    return out


def _span(iv: TimeInterval | None) -> list[float] | None:
    return iv.to_list() if iv is not None else None


def _gib(n: int) -> str:
    return f"{n / GIB:8.2f} GiB"


def render_serve(r: ServeResult) -> str:
    s, b = r.settings, r.budget
    layout = f"tp {s.tp}, pp {s.pp}" + (f", dp {s.dp}" if s.dp > 1 else "") + (f", ep {s.ep}" if s.ep > 1 else "")
    lines = [f"{r.model} on {s.tp * s.pp * s.dp}× {r.gpu.id} ({layout}) with {s.engine} {s.version}: "
             + ("OK" if r.ok else "WOULD NOT START"),
             f"  {r.reason}",
             f"memory per GPU ({b.total_bytes / GIB:.2f} GiB; the engine may use {b.requested_bytes / GIB:.2f} GiB):"]
    for name, value in (("weights", b.weights_bytes), ("activation peak", b.activation_peak_bytes),
                        ("non-torch", b.non_torch_bytes), ("CUDA graphs", b.cuda_graph_bytes),
                        ("CUDA context", b.context_bytes), ("KV cache", b.kv_cache_bytes)):
        if value or name == "KV cache":
            lines.append(f"  {name:<16}{_gib(value)}")
    if r.lora is not None:
        lines.append(f"  of the weights, LoRA: {r.lora.max_loras} slot(s) at rank {r.lora.max_lora_rank} "
                     f"{_gib(r.lora.slot_bytes)} + punica buffers {r.lora.punica_bytes / 2**20:.2f} MiB")
    if r.drafter is not None:
        d = r.drafter
        what = f"draft model {d.spec.model}" if d.spec.method == "draft" else f"{d.spec.mtp_layers} MTP layer(s)"
        lines.append(f"  of the weights, speculative drafter ({what}): {_gib(d.weights_bytes)}; "
                     f"{d.kv_token_bytes:,} of the KV bytes per token; {d.spec.tokens} draft token(s) at acceptance "
                     f"{d.spec.acceptance:g}: {d.spec.accepted_per_step:.2f} tokens per step")
    lines += [f"KV: {r.kv.bytes_per_token:,} bytes per token per GPU ({r.layout.kind.upper()}), "
              f"{r.kv_cache_tokens:,} tokens in the cache",
              f"  max concurrency at {r.context:,} tokens: {r.max_concurrency:,} sequences"
              + ("" if r.concurrency is None else
                 f" ({r.concurrency:,} asked: {'fits' if r.concurrency_fits else 'does NOT fit'})"),
              f"  worst case, every sequence at --max-model-len {s.max_model_len:,}: "
              f"{r.max_concurrency_at_max_model_len:,} sequences (pages are allocated as tokens arrive)",
              f"  longest max_model_len that fits: {r.max_model_len_fits:,}"]
    if r.time_unknown is not None:
        lines.append(f"time: unknown ({r.time_unknown})")
    else:
        tt, st = r.ttft_interval, r.step_interval
        lines.append(f"time: TTFT {format_seconds(r.prefill.seconds)}" + (f" (80%: {tt.span()})" if tt else "")
                     + f" for {r.prefill_tokens:,} tokens; decode step {format_seconds(r.decode.seconds)}"
                     + (f" (80%: {st.span()})" if st else "")
                     + f" at batch {r.decode_batch:,} and {r.decode_context:,} tokens "
                     f"({r.decode_tokens_per_s:,.0f} tokens/s)")
        if st is not None:
            lines.append(f"  80% intervals from {st.basis}")
    if r.compute_bound_batch is not None:
        lines.append(f"  decode turns compute-bound above a batch of ~{r.compute_bound_batch:,}")
    if r.slo_met is not None and r.rate is None:
        targets = ", ".join(f"{name} {format_seconds(v)}" for name, v in (("TTFT", r.ttft_slo_s), ("ITL", r.itl_slo_s))
                            if v is not None)
        lines.append(f"latency targets ({targets}): at most {r.slo_concurrency or 0:,} concurrent sequences meet them"
                     + ("" if r.concurrency is None else f" ({r.concurrency:,} asked: "
                        f"{'met' if r.slo_met else 'NOT met'})"))
    if r.rate is not None:
        q = r.rate
        line = (f"for {q.rate_per_s:g} req/s of {q.input_len:,} in / {q.output_len:,} out: {q.replicas:,} replica(s) "
                f"= {q.gpus:,}× {q.gpu} ({q.requests_per_s_per_replica:.2f} req/s per replica at "
                f"{q.concurrency_per_replica:,} concurrent)")
        if q.usd_per_million_output_tokens is not None:
            line += f", ${q.usd_per_million_output_tokens:.3f} per million output tokens"
        lines.append(line)
        if q.replicas:
            lines.append(f"  latency at {q.utilization:.0%} load (M/D/c queue): TTFT p50 "
                         f"{format_seconds(q.ttft_p50_s)}, p99 {format_seconds(q.ttft_p99_s)}; ITL "
                         f"{format_seconds(q.itl_s)}; request p50 {format_seconds(q.e2e_p50_s)}, p99 "
                         f"{format_seconds(q.e2e_p99_s)}")
        elif r.slo_met is False:
            lines.append("  no replica count meets the latency targets (the prefill or one decode step alone misses "
                         "them)")
    lines += ["launch:", f"  {r.command}", "assumptions:"] + [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)


def layout_search_to_dict(r: LayoutSearch) -> dict[str, Any]:
    """The shown layout's whole serve answer, plus every layout tried (best first) and the chosen one."""
    shown = r.shown
    out: dict[str, Any] = serve_to_dict(shown) if shown is not None else {"model": r.model, "gpu": r.gpu.id}
    chosen = r.chosen
    out["ok"] = r.ok and bool(out.get("ok", True))
    out["search"] = {"gpus": r.gpus, "ranking": r.ranking, "assumptions": list(r.assumptions)}
    out["chosen"] = None if chosen is None else {"tp": chosen.tp, "pp": chosen.pp, "dp": chosen.dp, "ep": chosen.ep}
    out["layouts"] = [o.to_dict() for o in r.outcomes]
    return out


def render_layout_search(r: LayoutSearch) -> str:
    lines = [f"layouts of {r.gpus}× {r.gpu.id} for {r.model} (ranked by {r.ranking}):",
             f"  {'tp':>3}{'pp':>4}{'dp':>4}{'ep':>4}  {'weights/GPU':>12}{'KV/GPU':>11}{'max seqs':>10}{'ITL':>10}"
             f"{'tok/s/GPU':>11}  verdict"]
    for o in r.outcomes:
        res = o.result
        if res is None:
            lines.append(f"  {o.tp:>3}{o.pp:>4}{o.dp:>4}{o.ep:>4}  {'-':>12}{'-':>11}{'-':>10}{'-':>10}{'-':>11}"
                         f"  {o.reason}")
            continue
        itl = "-" if res.time_unknown else format_seconds(res.decode.seconds)
        lines.append(f"  {o.tp:>3}{o.pp:>4}{o.dp:>4}{o.ep:>4}  {_gib(res.budget.weights_bytes):>12}"
                     f"{_gib(res.budget.kv_cache_bytes):>11}{res.max_concurrency * o.dp:>10,}{itl:>10}"
                     f"{o.goodput_tokens_per_s_per_gpu:>11,.0f}  {'meets' if o.meets else o.reason[:60]}")
    chosen = r.chosen
    lines.append(f"chosen: tp {chosen.tp}, pp {chosen.pp}, dp {chosen.dp}, ep {chosen.ep}" if chosen is not None
                 else "chosen: none (no layout starts and meets the target; the best one tried follows)")
    shown = r.shown
    if shown is not None:
        lines += ["", render_serve(shown)]
    lines += [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)


def disaggregation_to_dict(d: Disaggregation) -> dict[str, Any]:
    """The aggregated engine's answer, plus the prefill and decode pools against it."""
    out = serve_to_dict(d.aggregated)
    out["ok"] = d.ok
    out["disaggregation"] = {
        "prefill_instances": d.prefill_instances, "decode_instances": d.decode_instances, "searched": d.searched,
        "gpus_per_instance": d.gpus_per_instance, "gpus": d.gpus,
        "prefill_requests_per_s_per_instance": d.prefill_requests_per_s_per_instance,
        "decode_requests_per_s_per_instance": d.decode_requests_per_s_per_instance,
        "decode_concurrency_per_dp_rank": d.decode_concurrency, "decode_itl_s": d.decode.decode.seconds,
        "kv_cache_bytes_per_decode_gpu": d.decode.budget.kv_cache_bytes,
        "kv_cache_bytes_per_gpu_aggregated": d.aggregated.budget.kv_cache_bytes,
        "decode_max_num_batched_tokens": d.decode.settings.max_num_batched_tokens,
        "kv_transfer_bytes_per_request": d.kv_transfer_bytes_per_request, "kv_transfer_s": d.kv_transfer_s,
        "link": d.link, "ttft_s": d.ttft_s, "ttft_p99_s": d.ttft_p99_s, "requests_per_s": d.requests_per_s,
        "meets_rate": d.meets_rate, "goodput_tokens_per_s_per_gpu": d.goodput_tokens_per_s_per_gpu,
        "goodput_interval_tokens_per_s_per_gpu": None if d.goodput_interval is None else list(d.goodput_interval),
        "aggregated_goodput_tokens_per_s_per_gpu": d.aggregated_goodput_tokens_per_s_per_gpu,
        "prefill_command": d.prefill_command, "decode_command": d.decode_command}
    return out


def render_disaggregation(d: Disaggregation) -> str:
    how = "sized for the rate" if d.searched else "as asked"
    lines = [render_serve(d.aggregated), "",
             f"disaggregated ({how}): {d.prefill_instances} prefill + {d.decode_instances} decode instance(s) of "
             f"{d.gpus_per_instance} GPU(s) = {d.gpus} GPUs: " + ("OK" if d.ok else "does NOT meet the target"),
             f"  prefill: {d.prefill_requests_per_s_per_instance:.2f} req/s per instance; KV transfer "
             f"{d.kv_transfer_bytes_per_request / 2**20:,.1f} MiB per request in {format_seconds(d.kv_transfer_s)} "
             f"over {d.link}; TTFT {format_seconds(d.ttft_s)}"
             + (f" (p99 with the queue {format_seconds(d.ttft_p99_s)})" if d.ttft_p99_s is not None else ""),
             f"  decode: --max-num-batched-tokens {d.decode.settings.max_num_batched_tokens:,}, KV cache "
             f"{_gib(d.decode.budget.kv_cache_bytes).strip()} per GPU (aggregated "
             f"{_gib(d.aggregated.budget.kv_cache_bytes).strip()}), "
             f"{d.decode_concurrency:,} sequences per DP rank at ITL {format_seconds(d.decode.decode.seconds)}: "
             f"{d.decode_requests_per_s_per_instance:.2f} req/s per instance",
             f"  goodput {d.goodput_tokens_per_s_per_gpu:,.0f} output tokens/s per GPU"
             + ("" if d.goodput_interval is None else
                f" (80%: {d.goodput_interval[0]:,.0f}–{d.goodput_interval[1]:,.0f})")
             + f" at {d.requests_per_s:.2f} req/s (aggregated engine: "
               f"{d.aggregated_goodput_tokens_per_s_per_gpu:,.0f})",
             "launch (prefill):", f"  {d.prefill_command}", "launch (decode):", f"  {d.decode_command}"]
    return "\n".join(lines)


def render_serve_recommendation(r: ServeRecommendation) -> str:
    t = r.target
    what = (f"{t['rate']:g} req/s of {t['input_len']:,} in / {t['output_len']:,} out" if t["rate"] is not None
            else f"{t['concurrency'] or 1:,} sequence(s) of {t['context'] or 0:,} tokens" if t["context"]
            else f"{t['concurrency'] or 1:,} sequence(s) at the model's context")
    lines = [f"serving {r.model} with {r.engine}: {what}", "",
             f"{'GPU':<22}{'tp':>4}{'pp':>4}{'dp':>4}{'ep':>4}{'GPUs':>7}{'max seqs':>10}{'decode tok/s':>14}"
             f"{'TTFT':>10}{'$/hour':>10}"]
    for c in r.candidates_in:
        cost = f"{c.cost_per_hour_usd:,.2f}" if c.cost_per_hour_usd is not None else "-"
        lines.append(f"{c.gpu.id:<22}{c.tp:>4}{c.pp:>4}{c.dp:>4}{c.ep:>4}{c.gpus:>7}{c.max_concurrency:>10,}"
                     f"{c.decode_tokens_per_s:>14,.0f}"
                     f"{format_seconds(c.ttft_s):>10}{cost:>10}")
    if not r.candidates_in:
        lines.append("  (no GPU type meets the target)")
    lines += ["", f"out: {len(r.candidates_out)} GPU type(s) that cannot (--json lists why)", "assumptions:"]
    lines += [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)


def render_pipeline_serve(r: PipelineServe) -> str:
    """``gpuplan serve PIPELINE``: seconds and outputs per hour on one GPU, the memory verdict, the components."""
    from gpuplan.report.text import generation_size, pipeline_lines, verdict_line

    est = r.estimate
    unit = r.unit
    lines = [f"{est.model} on 1× {est.gpu.id if est.gpu else '?'}: {generation_size(est)}, "
             f"{r.outputs_per_generation} {unit}(s) per generation, {est.workload.precision}"
             + (f", --offload {est.workload.offload}" if est.workload.offload != "none" else ""),
             verdict_line(est)]
    per = r.seconds_per_output
    if per is None:
        lines.append(f"time: unknown ({est.time_unknown or 'no timing'}); the memory above stands")
    else:
        span = r.seconds_per_output_interval()
        rate = r.outputs_per_hour_interval()
        iv = r.interval
        lines.append(f"{format_seconds(per)} per {unit}" + (f" (80%: {format_seconds(span[0])}–"
                                                           f"{format_seconds(span[1])})" if span else "")
                     + f"   {r.outputs_per_hour or 0:,.0f} {unit}s per hour"
                     + (f" (80%: {rate[0]:,.0f}–{rate[1]:,.0f})" if rate else ""))
        if r.usd_per_outputs is not None:
            lines.append(f"${r.usd_per_outputs:,.2f} per 1,000 {unit}s at ${r.price_per_hour_usd:,.2f}/hour")
        if iv is not None:
            lines.append(f"  80% intervals from {iv.basis}")
    lines += ["", *pipeline_lines(est), "", "assumptions:", *(f"  - {a}" for a in est.assumptions)]
    return "\n".join(lines)
