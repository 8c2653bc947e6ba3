"""Results as JSON-ready dicts, following the contract in DESIGN.md (add fields, never rename)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate


def estimate_to_dict(est: Estimate) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": est.model,
        "workload": est.workload.to_dict(),
        "params_count": est.params_count,
        "peak_allocated_bytes": est.peak_allocated_bytes,
        "peak_reserved_bytes": est.peak_reserved_bytes,
        "total_required_bytes": est.total_required_bytes,
        "min_required_bytes": est.min_required_bytes,
        "tensor_peak_bytes": est.tensor_peak_bytes,
        "components": dict(est.components),
        "peak_phase": est.peak_phase,
        "flops_per_step": est.flops_per_step,
        "top_activation_modules": [{"module": m, "bytes": b} for m, b in est.step.top_activation_modules],
        "attention_backends": dict(est.step.attention_backends),
        "scaling": {"full_blocks": est.step.block_counts, "traced_blocks": est.step.traced_blocks},
        "assumptions": list(est.assumptions),
    }
    if est.gpu is not None:
        out["gpu"] = est.gpu.id
        out["gpu_usable_memory_bytes"] = est.gpu.usable_memory_bytes
        out["fits"] = est.fits
        out["headroom_bytes"] = est.headroom_bytes
        out["step_time_s"] = est.step_time_s
        out["throughput"] = est.throughput
        out["mfu"] = est.mfu
    out.update(est.extra.get("json", {}))
    return out
