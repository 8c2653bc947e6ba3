"""Results as JSON-ready dicts, following the contract in DESIGN.md (add fields, never rename)."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuplan.estimate import Estimate
    from gpuplan.perf.summary import Timing


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
        iv = est.timing.interval if est.timing is not None else None
        out["step_time_interval_s"] = iv.to_list() if iv is not None else None
        out["step_time_interval_basis"] = iv.basis if iv is not None else None
        out["time_unknown"] = est.time_unknown
        out["throughput"] = dict(est.throughput) if est.throughput is not None else None
        out["mfu"] = est.mfu
    if est.timing is not None:
        out.update(timing_to_dict(est.timing))
    if est.quantized_weights is not None:
        q = est.quantized_weights
        out["weight_quant"] = {"scheme": q.scheme, "weight_bytes": q.weight_bytes,
                               "traced_weight_bytes": q.traced_weight_bytes, "memory_saved_bytes": q.memory_saved_bytes}
    if est.pipeline is not None:
        out["pipeline"] = pipeline_to_dict(est)
        out["host_memory_bytes"] = est.pipeline.host_memory_bytes
    elif est.step.host_copy_bytes:  # --offload activations: the checkpointed inputs on the host, both ways per step
        out["host_memory_bytes"] = est.step.host_peak_bytes
        out["activation_offload"] = {"host_memory_bytes": est.step.host_peak_bytes,
                                     "copy_bytes_each_way": est.step.host_copy_bytes,
                                     "offload_transfer_s": est.offload_transfer_s}
    if est.calibration is not None:
        out["calibration"] = {**asdict(est.calibration), "driver_versions": list(est.calibration.driver_versions)}
    return out


def pipeline_to_dict(est: Estimate) -> dict[str, Any]:
    """A diffusion pipeline's generation: its sizes, offload, host RAM and each component."""
    p = est.pipeline
    assert p is not None
    w = est.workload
    params = est.component_params or {}
    return {
        "offload": p.offload, "host_memory_bytes": p.host_memory_bytes, "transfer_bytes": p.transfer_bytes,
        "offload_transfer_s": est.offload_transfer_s, "peak_phase": p.peak_phase,
        **(est.pipeline_shape or {"steps": w.steps, "frames": w.frames}),
        "components": [{"name": c.name, "parameters": params.get(c.name, 0), "bytes": c.weight_bytes,
                        "gpu_bytes": c.gpu_bytes, "where": c.where, "phase_peak_bytes": c.phase_peak_bytes}
                       for c in p.components],
        "phase_peak_bytes": dict(est.step.phase_peaks),
    }


def timing_to_dict(timing: Timing) -> dict[str, Any]:
    """``time`` (the split of the step), ``samples_per_s``, ``tokens_per_s`` and ``generation``."""
    st = timing.time
    out: dict[str, Any] = {
        "time": {
            "compute_s": st.compute_s,
            "memory_s": st.memory_s,
            "overhead_s": st.overhead_s,
            "by_phase_s": dict(st.by_phase_s),
            "by_op_class_s": dict(st.by_op_class_s),
            "breakdown_s": dict(st.breakdown_s),
            "efficiency_arch": st.arch,
            "kernels": st.kernels,
            "model_flops": st.model_flops,
            "tflops_achieved": st.tflops_achieved,
            "peak_tflops": st.peak_tflops,
            "compute_dtype": st.compute_dtype,
        },
        "samples_per_s": timing.samples_per_s,
    }
    if timing.tokens_per_s is not None:
        out["tokens_per_s"] = timing.tokens_per_s
    inf = st.inference
    if inf is not None:
        out["generation"] = {
            "ttft_s": inf.ttft_s,
            "ttft_interval_s": timing.ttft_interval.to_list() if timing.ttft_interval is not None else None,
            "prefill_s": inf.prefill_s,
            "decode_per_token_s": inf.decode_per_token_s,
            "decode_tokens_per_s": inf.decode_tokens_per_s,
            "new_tokens_per_s": inf.new_tokens_per_s,
            "bytes_per_decode_step": inf.bytes_per_decode_step,
            "bandwidth_bound_tokens_per_s": inf.bandwidth_bound_tokens_per_s,
            "fraction_of_bandwidth_bound": inf.fraction_of_bound,
            "weight_quant": timing.weight_quant,
        }
    return out
