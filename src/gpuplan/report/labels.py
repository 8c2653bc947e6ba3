"""Words for the JSON keys people read in tables, legends and the web page (the JSON keeps its keys).

One table, so a term has one name everywhere: the caching allocator's reserved-beyond-allocated bytes are
"allocator slack" in the text report, every picture's legend and the HTML report, whether the JSON key is
``allocator_overhead`` (estimate's components) or ``allocator_slack`` (plan's per-rank memory).
"""

from __future__ import annotations

from typing import Any, Final

from gpuplan.units import format_bytes, format_count, format_flops, format_seconds

LABELS: Final[dict[str, str]] = {
    "parameters": "parameters",
    "gradients": "gradients",
    "optimizer_state": "optimizer state",
    "activations": "activations",
    "temporaries": "temporaries",
    "kv_cache": "KV cache",
    "workspaces": "cuBLAS workspaces",
    "allocator_overhead": "allocator slack",
    "allocator_slack": "allocator slack",
    "cuda_context": "CUDA context",
    "cuda_context_and_workspaces": "CUDA context and workspaces",
    "communication_buffers": "communication buffers",
    "weights": "weights",
    "activation_peak": "activation peak",
    "non_torch": "non-torch memory",
    "cuda_graph": "CUDA graphs",
    "compute": "compute",
    "memory": "memory traffic",
    "communication": "communication",
}


def label(key: str) -> str:
    """The words for a JSON key (``kv_cache_bytes`` → "KV cache"; an unknown key with spaces for '_')."""
    bare = key.removesuffix("_bytes").removesuffix("_s")
    return LABELS.get(bare, bare.replace("_", " "))


FIELD_LABELS: Final[dict[str, str]] = {
    "mfu": "MFU (model FLOPs utilisation)",
    "hfu": "HFU (hardware FLOPs utilisation)",
    "params_count": "parameters",
    "peak_allocated_bytes": "peak allocated",
    "peak_reserved_bytes": "peak reserved",
    "total_required_bytes": "GPU memory needed",
    "min_required_bytes": "least GPU memory that fits",
    "per_gpu_peak_bytes": "peak per GPU",
    "headroom_bytes": "headroom",
    "max_batch_size": "largest batch that fits",
    "target_fits": "target batch fits",
    "flops_per_step": "FLOPs per step",
    "tokens_per_s": "tokens per second",
    "samples_per_s": "samples per second",
    "kv_cache_bytes": "KV cache",
    "seq_len": "sequence length",
    "ok": "answer",
}
"""Result fields whose name alone would read wrong on the web page and the HTML report's tables; the
rest read as :func:`label` gives them."""


def field_label(key: str) -> str:
    """The words for a result field in a table (``step_time_s`` → "step time", ``mfu`` → "MFU ...",
    ``tokens_per_s`` → "tokens per second"); its unit goes with the value (:func:`value_text`)."""
    if key in FIELD_LABELS:
        return FIELD_LABELS[key]
    if key.endswith("_per_s") and len(key) > len("_per_s"):
        return label(key.removesuffix("_per_s")) + " per second"
    return label(key)


def _number(value: float) -> str:
    """Grouped digits, never exponent notation: 47,870 not 4.787e+04; 0.0123 stays readable."""
    if isinstance(value, int):
        return f"{value:,}"
    if value == 0 or abs(value) >= 100:
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.1f}"
    if abs(value) >= 0.001:
        return f"{value:.4g}"
    return f"{value:.2e}"


def value_text(key: str, value: Any) -> tuple[str, bool]:
    """(text, is_number) of one JSON value, in the unit its key names."""
    if isinstance(value, bool):
        return ("yes" if value else "no"), False
    if value is None:
        return "—", False
    if isinstance(value, (int, float)):
        if key.endswith("_per_s"):
            return f"{_number(value)} /s", True
        if key.endswith("_bytes") or key in ("bytes", "components"):
            return format_bytes(value), True
        if key.endswith("_s") or key == "seconds":
            return format_seconds(float(value)), True
        if "flops" in key and not key.startswith("tflops"):
            return format_flops(value), True
        if key.endswith("_count") or key == "params":
            return format_count(value), True
        if key in ("mfu", "hfu"):
            return f"{100 * value:.1f} %", True
        return _number(value), True
    if isinstance(value, dict) and set(value) == {"value", "unit"}:
        return f"{_number(value['value'])} {value['unit']}", True
    if isinstance(value, (list, tuple)) and all(isinstance(v, (str, int, float)) for v in value):
        return ", ".join(str(v) for v in value), False
    return str(value), False


__all__ = ["FIELD_LABELS", "LABELS", "field_label", "label", "value_text"]
