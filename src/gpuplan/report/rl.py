"""Text and JSON of an RL post-training step (``gpuplan rl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from gpuplan.rl.result import RLResult

PHASE_WORDS = {
    "generate": "generation (rollout)",
    "old_log_prob": "old-policy log-probs",
    "ref_log_prob": "reference log-probs",
    "reward": "reward model",
    "critic": "critic (values + update)",
    "train": "policy update (fwd/bwd/optimizer)",
    "weight_sync": "weight sync to the engine",
}


def rl_to_dict(r: RLResult) -> dict[str, Any]:
    iv = r.step_time_interval_s
    g = r.rollout
    return {
        "model": r.model,
        "gpu": r.gpu.id,
        "fits": r.fits,
        "reason": r.reason,
        "step_time_s": r.step_time_s,
        "step_time_interval_s": list(iv) if iv is not None else None,
        "tokens_per_s_per_gpu": r.tokens_per_s_per_gpu,
        "peak_bytes_per_gpu": r.peak_bytes_per_gpu,
        "usable_bytes_per_gpu": r.usable_bytes,
        "limiting_phase": r.limiting_phase,
        "phases": {
            p.name: {
                "seconds": p.seconds,
                "peak_bytes_per_gpu": p.peak_bytes_per_gpu,
                "gpus": p.where,
                "interval_s": list(p.interval_s) if p.interval_s else None,
                "parts_bytes": p.parts_bytes,
            }
            for p in r.phases
        },
        "rollout": None
        if g is None
        else {
            "engine": g.engine.settings.to_dict(),
            "replicas": g.replicas,
            "sequences_per_replica": g.sequences_per_replica,
            "batch": g.batch,
            "waves": g.waves,
            "max_concurrency": g.engine.max_concurrency,
            "kv_cache_bytes": g.engine.budget.kv_cache_bytes,
            "prefill_s": g.prefill_s,
            "decode_s": g.decode_s,
            "tail_s": g.tail_s,
            "engine_command": g.engine.command,
        },
        "settings": r.settings.to_dict(),
        "command": r.command,
        "assumptions": list(r.assumptions),
    }


def render_rl(r: RLResult) -> str:
    s = r.settings
    place = (
        f"colocated on {s.gpus}× {r.gpu.id}"
        if s.placement == "colocate"
        else f"split: {s.trainer_gpus} trainer + {s.engine_gpus} rollout × {r.gpu.id}"
    )
    verdict = "FITS" if r.fits else "DOES NOT FIT"
    lines = [f"{s.algorithm.upper()} on {r.model}, {place}: {verdict}"]
    if r.reason:
        lines.append(f"  {r.reason}")
    lines.append(
        f"step: {s.prompts_per_step:,} prompts × {s.samples} samples, {s.prompt_len:,} + {s.response_len:,} "
        f"tokens (longest response {s.longest_response:,})"
    )
    lines.append(f"{'phase':<36}{'GPUs':<9}{'peak per GPU':>16}{'time':>12}")
    for p in r.phases:
        lines.append(
            f"  {PHASE_WORDS.get(p.name, p.name):<34}{p.where:<9}{format_bytes(p.peak_bytes_per_gpu):>16}"
            f"{format_seconds(p.seconds):>12}"
        )
    iv = r.step_time_interval_s
    span = f" (80%: {format_seconds(iv[0])}–{format_seconds(iv[1])})" if iv else ""
    lines.append(
        f"step time {format_seconds(r.step_time_s)}{span}, {r.tokens_per_s_per_gpu:,.0f} tokens/s per GPU; "
        f"limiting phase: {PHASE_WORDS.get(r.limiting_phase, r.limiting_phase)} "
        f"({format_bytes(r.peak_bytes_per_gpu)} of {format_bytes(r.usable_bytes)} usable per GPU)"
    )
    if r.command:
        lines += ["config:", r.command.rstrip("\n")]
    lines += ["assumptions:"] + [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)
