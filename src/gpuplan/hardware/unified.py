"""Apple silicon's unified memory: the share macOS lets the GPU wire.

Metal reports it as ``MTLDevice.recommendedMaxWorkingSetSize``, and llama.cpp's Metal backend prints it at
start (``ggml_metal_init: recommendedMaxWorkingSetSize = … MB``, MB meaning MiB there). Public logs give
2/3 of the RAM below 64 GiB and 3/4 from 64 GiB:

* 16 GiB → 10922.67 MB (abetlen/llama-cpp-python issue #687), 32 GiB → 21845.34 MB (ggml-org/llama.cpp
  PR #2011; ollama/ollama issue #434): ×2/3;
* 96 GiB → 73728.00 MB (ggml-org/llama.cpp issue #3213): ×3/4.

Newer macOS releases may grant more (a 128 GiB M5 Max on macOS 26 reports 107.52 GiB, antirez/ds4 issue
#890); ``sudo sysctl iogpu.wired_limit_mb=N`` raises it (gpustack/gpustack issue #1375).
"""

from __future__ import annotations

from typing import Final

from gpuplan.units import GIB

LARGE_MAC_BYTES: Final = 64 * GIB
"""From this much RAM macOS recommends 3/4 of it to the GPU, below it 2/3."""


def metal_working_set_bytes(ram_bytes: int) -> int:
    """``recommendedMaxWorkingSetSize`` of a Mac with ``ram_bytes`` of unified memory (module docstring)."""
    return ram_bytes * 3 // 4 if ram_bytes >= LARGE_MAC_BYTES else ram_bytes * 2 // 3


def is_unified(vendor: str) -> bool:
    """The GPU shares the host's memory (Apple silicon)."""
    return vendor.lower() == "apple"
