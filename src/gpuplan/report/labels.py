"""Words for the JSON keys people read in tables, legends and the web page (the JSON keeps its keys).

One table, so a term has one name everywhere: the caching allocator's reserved-beyond-allocated bytes are
"allocator slack" in the text report, every picture's legend and the HTML report, whether the JSON key is
``allocator_overhead`` (estimate's components) or ``allocator_slack`` (plan's per-rank memory).
"""

from __future__ import annotations

from typing import Final

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


__all__ = ["LABELS", "label"]
