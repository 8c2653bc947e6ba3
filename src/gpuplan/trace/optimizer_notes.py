"""The assumption line a bitsandbytes optimizer adds to an estimate, without importing torch (an answer
read from the trace cache states it too); the optimizers themselves are in trace/optimizers.py."""

from __future__ import annotations


def optimizer_notes(name: str) -> list[str]:
    """The assumption line for a bitsandbytes optimizer (none for torch's)."""
    if name not in ("adamw-8bit", "paged-adamw", "paged-adamw-8bit"):
        return []
    layout = ("fp32 moments" if name == "paged-adamw"
              else "uint8 moments + fp32 absmax per 256 (fp32 moments under 4096 elements)")
    paged = ("; paged: the state of tensors of 1e5+ elements lives in CUDA unified memory, counted as resident "
             "(under memory pressure the driver pages it to host memory: slower, not out of memory)"
             if name.startswith("paged") else "")
    return [f"--optimizer {name}: bitsandbytes state as it lays it out ({layout}){paged}"]
