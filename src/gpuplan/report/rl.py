"""Text and JSON of an RL post-training step (``gpuplan rl``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gpuplan.units import format_bytes, format_seconds

if TYPE_CHECKING:
    from gpuplan.rl.fit import Rung
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


def fit_to_dict(rungs: tuple[Rung, ...], max_response_len: int | None, step: int) -> dict[str, Any]:
    """``--fit``: the ladder's rungs (cheapest first, each on top of the last) and the longest response that fits."""
    answer = next((r.name for r in rungs if r.fits), None)
    return {
        "answer": answer,
        "ladder": [
            {
                "rung": r.name,
                "fits": r.fits,
                "refused": r.refused,
                "peak_bytes_per_gpu": r.result.peak_bytes_per_gpu if r.result else None,
                "step_time_s": r.result.step_time_s if r.result else None,
                "limiting_phase": r.result.limiting_phase if r.result else None,
            }
            for r in rungs
        ],
        "max_response_len": max_response_len,
        "response_len_step": step,
        "max_prompts_per_step": None,
        "prompts_per_step_note": "the memory does not depend on the prompts per step (the engine decodes them in "
        "waves, the trainer in micro-batches); only the step time grows",
    }


def render_fit(data: dict[str, Any]) -> str:
    lines = ["fit:"]
    if data["max_response_len"] is None:
        lines.append("  no response length fits (not even " + f"{data['response_len_step']} tokens)")
    else:
        lines.append(
            f"  longest response that fits: {data['max_response_len']:,} tokens (steps of {data['response_len_step']})"
        )
    for rung in data["ladder"]:
        if rung["refused"]:
            lines.append(f"  {rung['rung']:<44}refused: {rung['refused']}")
            continue
        verdict = "fits" if rung["fits"] else "does not fit"
        lines.append(
            f"  {rung['rung']:<44}{format_bytes(rung['peak_bytes_per_gpu']):>12} per GPU, "
            f"step {format_seconds(rung['step_time_s'])}: {verdict}"
        )
    if data["ladder"]:
        lines.append(f"  cheapest change that fits: {data['answer'] or 'none of these'}")
    lines.append(f"  prompts per step: {data['prompts_per_step_note']}")
    return "\n".join(lines)
