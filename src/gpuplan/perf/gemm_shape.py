"""GEMM efficiency as a function of shape: tile and wave quantization over the GPU's SMs, and the
fixed cost of a short K loop.

The model follows NVIDIA's "Matrix Multiplication Background User's Guide" (docs.nvidia.com/
deeplearning/performance/dl-performance-matrix-multiplication, sections "Tile Quantization" and
"Wave Quantization"): a GEMM's M×N output is cut into tiles, each tile runs on one SM, and the
tiles run in waves of ``sm_count``; a partial last tile or a partial last wave does full-tile work.
cuBLAS picks among tile sizes (smaller tiles fill more SMs but run slower per FLOP), so the
efficiency is the best of a few candidate tiles. A K loop of ``k`` elements pays a prologue and
epilogue worth about ``k_half`` elements of main loop: ``k / (k + k_half)``.

The trace records FLOPs and bytes, not shapes: the shape is recovered from them
(:func:`matmul_shape`, :func:`conv_shape`), exact for ``mm`` and close for ``addmm``/``bmm``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpuplan.dtypes import DTYPE_BYTES

if TYPE_CHECKING:
    from gpuplan.trace.records import OpRecord


Tile = tuple[int, int, float]
"""(tile rows, tile columns, per-FLOP speed of that tile relative to the largest)."""


@dataclass(frozen=True, slots=True)
class GemmShape:
    """``batch`` independent ``m×k @ k×n`` products (a convolution as its implicit GEMM)."""

    m: float
    n: float
    k: float
    batch: float = 1.0


def matmul_shape(op: OpRecord) -> GemmShape | None:
    """Shape of a traced matmul from its FLOPs (2·M·N·K), output bytes (M·N) and input bytes
    (M·K + K·N); None when the record cannot be a GEMM (no FLOPs or no output)."""
    elem = DTYPE_BYTES.get(op.dtype, 4)
    out = op.bytes_written / elem
    if op.flops <= 0 or out <= 0:
        return None
    k = op.flops / (2.0 * out)
    mn_sum = op.bytes_read / elem / k if k > 0 else 0.0  # M + N (bias and batch make it a little larger)
    disc = mn_sum * mn_sum - 4.0 * out
    if disc < 0:  # batched or with a bias: a square output is the neutral guess
        side = math.sqrt(out)
        return GemmShape(side, side, k)
    root = math.sqrt(disc)
    return GemmShape((mn_sum + root) / 2.0, max((mn_sum - root) / 2.0, 1.0), k)


def conv_shape(op: OpRecord) -> GemmShape | None:
    """Implicit GEMM of a convolution: the output elements (N·Ho·Wo × C_out) as the M×N, and
    K = C_in·kh·kw / groups from FLOPs = 2·outputs·K. C_out cannot be told from the input bytes,
    so the output is taken as square in tiles (only the tile count matters here)."""
    elem = DTYPE_BYTES.get(op.dtype, 4)
    out = op.bytes_written / elem
    if op.flops <= 0 or out <= 0:
        return None
    side = math.sqrt(out)
    return GemmShape(side, side, op.flops / (2.0 * out))


SPLIT_K: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""K splits a GEMM with too few output tiles may use (cuBLAS split-K / stream-K) to fill the SMs.
Up to 256: a convolution's weight gradient is a GEMM of a few output tiles (C_out × C_in·kh·kw)
over a K of N·Ho·Wo (often 10^5+), which cuDNN's wgrad kernels split across every SM; capping
the split at 16 charged it a 16-CTA kernel (2 ms for a 0.1 GFLOP wgrad on an A100)."""


def shape_efficiency(
    shape: GemmShape, sm_count: int | None, tiles: tuple[Tile, ...], k_half: float, *, split_k: bool = True
) -> float:
    """Fraction of the large-GEMM rate a GEMM of ``shape`` reaches (1.0: a large square GEMM).

    The best over the candidate tiles (either orientation: cuBLAS transposes freely) and K splits
    (a fixed set, so the time stays monotone in M, N and batch; slices shorter than 128 are not
    split further). ``split_k=False`` restricts it to unsplit kernels. Without an SM count only
    the K-loop term applies: perf/roofline.py never calls it so (a GPU without a count is
    charged the widest counted GPU's waves)."""
    big = 1 + k_half / 4096.0  # a 4096-deep K loop is what "large" is calibrated on
    if not sm_count or not tiles:
        k_term = shape.k / (shape.k + k_half) if shape.k > 0 else 0.0
        return min(1.0, k_term * big)
    batch = max(shape.batch, 1.0)
    best = 0.0
    for tm, tn, speed in tiles + tuple((b, a, v) for a, b, v in tiles):
        count = math.ceil(shape.m / tm) * math.ceil(shape.n / tn) * batch
        useful = shape.m * shape.n * batch / (count * tm * tn)  # tile quantization
        for split in SPLIT_K if split_k else (1,):
            k = shape.k / split
            if split > 1 and k < 128:
                break  # slices too short to pay for their partial-sum reduction
            waves = count * split / sm_count
            wave_fill = waves / math.ceil(waves)  # wave quantization
            k_term = k / (k + k_half) if k > 0 else 0.0
            best = max(best, speed * useful * wave_fill * k_term)
    return min(1.0, best * big)
