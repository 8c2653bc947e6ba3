"""Text and JSON of a local-inference answer (``gpuplan serve MODEL --engine llama.cpp|ollama``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.units import GIB

if TYPE_CHECKING:
    from gpuplan.serve.llamacpp import LocalServeResult


def local_serve_to_dict(r: LocalServeResult) -> dict[str, Any]:
    p, m, s = r.placement, r.model, r.settings
    gpus = [
        {
            "device": f"GPU{g}",
            "weights_bytes": p.weights_bytes[g],
            "kv_cache_bytes": p.kv_bytes[g],
            "compute_buffer_bytes": p.compute_bytes[g],
            "context_bytes": r.context_bytes,
            "total_bytes": p.gpu_total_bytes[g] + r.context_bytes,
            "layers": sum(1 for d in p.layer_device[: m.n_layer] if d == g),
            "output_layer": p.layer_device[m.n_layer] == g,
        }
        for g in range(s.gpus)
    ]
    return {
        "model": m.name,
        "gpu": r.gpu_name,
        "ok": r.fits,
        "fits": r.fits,
        "reason": r.reason,
        "weights": {
            "origin": m.origin,
            "bytes": m.weight_bytes,
            "params_count": sum(t.elements for t in m.tensors),
            "n_layer": m.n_layer,
            "n_expert": m.n_expert,
            "n_expert_used": m.n_expert_used,
        },
        "n_gpu_layers": s.n_gpu_layers,
        "layers_on_gpu": p.layers_on_gpu,
        "max_gpu_layers": r.max_gpu_layers,
        "context": s.context,
        "concurrency": s.parallel,
        "gpu_memory_limit_bytes": r.gpu_memory_bytes,
        "unified_memory": r.unified,
        "gpus": gpus,
        "host": {
            "weights_bytes": p.host_weights_bytes,
            "kv_cache_bytes": p.host_kv_bytes,
            "compute_buffer_bytes": p.host_compute_bytes,
            "output_buffer_bytes": p.output_buffer_bytes,
            "ram_bytes": r.host_ram_bytes,
        },
        "kv_cache_bytes": sum(p.kv_bytes) + p.host_kv_bytes,
        "decode": {
            "tokens_per_s": r.tokens_per_s,
            "gpu_read_per_token_bytes": list(p.read_per_token_bytes),
            "host_read_per_token_bytes": p.host_read_per_token_bytes,
            "gpu_bandwidth_bytes_per_s": r.gpu_bandwidth_bytes_per_s,
            "host_bandwidth_bytes_per_s": r.host_bandwidth_bytes_per_s,
            "tokens_per_s_interval": _pair(r.speed.decode_interval) if r.speed else None,
            "interval_basis": r.speed.decode_basis if r.speed else None,
        },
        "prefill": None if r.speed is None else {
            "tokens": r.speed.prefill_tokens,
            "tokens_per_s": r.speed.prefill_tokens_per_s,
            "tokens_per_s_interval": _pair(r.speed.prefill_interval),
            "seconds": r.speed.prefill_tokens / r.speed.prefill_tokens_per_s if r.speed.prefill_tokens_per_s else None,
            "interval_basis": r.speed.prefill_basis,
            "backend": r.speed.backend,
        },
        "engine": s.to_dict(),
        "command": r.command,
        "modelfile": r.modelfile,
        "assumptions": list(r.assumptions),
    }


def _pair(iv: tuple[float, float] | None) -> list[float] | None:
    return None if iv is None else [iv[0], iv[1]]


def render_local_serve(r: LocalServeResult) -> str:
    p, m, s = r.placement, r.model, r.settings
    verdict = "fits" if r.fits else "does NOT fit"
    lines = [
        f"{m.name} on {r.gpu_name}{f' ×{s.gpus}' if s.gpus > 1 else ''} with {r.engine_version}: {verdict}",
        f"  {r.reason}",
        f"  weights {m.weight_bytes / GIB:.2f} GiB ({m.origin}); -ngl {s.n_gpu_layers}: "
        f"{p.layers_on_gpu}/{m.n_layer + 1} layers on the GPU; context {s.context:,} × {s.parallel} slot(s), "
        f"KV {s.cache_type_k}/{s.cache_type_v}, flash attention {'on' if s.flash_attn else 'off'}",
    ]
    for g in range(s.gpus):
        lines.append(
            f"  GPU{g}: weights {p.weights_bytes[g] / GIB:.2f} + KV {p.kv_bytes[g] / GIB:.2f} + compute "
            f"{p.compute_bytes[g] / GIB:.2f} + context {r.context_bytes / GIB:.2f} = "
            f"{(p.gpu_total_bytes[g] + r.context_bytes) / GIB:.2f} GiB of {r.gpu_memory_bytes / GIB:.2f} GiB"
        )
    lines.append(
        f"  host RAM: weights {p.host_weights_bytes / GIB:.2f} + KV {p.host_kv_bytes / GIB:.2f} + buffers "
        f"{(p.host_compute_bytes + p.output_buffer_bytes) / GIB:.2f} GiB"
        + (f"; {r.host_ram_bytes / GIB:.2f} GiB of unified memory in all" if r.unified else "")
    )
    lines.append(
        f"  decode: {r.tokens_per_s:,.1f} tokens/s per sequence (memory-bandwidth bound: "
        f"{sum(p.read_per_token_bytes) / GIB:.2f} GiB from the GPU at {r.gpu_bandwidth_bytes_per_s / 1e9:,.0f} "
        f"GB/s, {p.host_read_per_token_bytes / GIB:.2f} GiB from the host at "
        f"{r.host_bandwidth_bytes_per_s / 1e9:,.0f} GB/s per token)"
    )
    sp = r.speed
    if sp is not None and sp.decode_interval is not None:
        lo, hi = sp.decode_interval
        lines.append(f"    80%: {lo:,.1f}–{hi:,.1f} tokens/s ({sp.decode_basis})")
    if sp is not None:
        if sp.prefill_tokens_per_s is not None and sp.prefill_interval is not None:
            lo, hi = sp.prefill_interval
            lines.append(
                f"  prefill: {sp.prefill_tokens_per_s:,.0f} tokens/s in {sp.prefill_tokens}-token micro-batches "
                f"(80%: {lo:,.0f}–{hi:,.0f}, {sp.prefill_basis})"
            )
        else:
            lines.append(f"  prefill: {sp.prefill_basis}")
    lines.append(f"  command: {r.command}")
    if r.modelfile:
        lines.append("  Modelfile:")
        lines += [f"    {line}" for line in r.modelfile.splitlines()]
    lines.append("assumptions:")
    lines += [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)
