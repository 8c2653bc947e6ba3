"""GPU memory one NCCL communicator holds on each rank: its protocol buffers, and NVLink SHARP's.

NCCL allocates, per channel and per connected peer, one receive buffer per protocol (NVIDIA/nccl
``src/init.cc`` at 80f6bda4378b, ``computeBuffSizes``)::

    Simple  NCCL_BUFFSIZE default 1 << 22                                        = 4,194,304 B
    LL128   NCCL_LL128_ELEMS_PER_THREAD 120 × NCCL_LL128_MAX_NTHREADS 640
            × NCCL_STEPS 8 × sizeof(uint64_t)                                    = 4,915,200 B
    LL      NCCL_LL_LINES_PER_THREAD 8 × NCCL_LL_MAX_NTHREADS 512 × NCCL_STEPS 8
            × sizeof(union ncclLLFifoLine) 16                                    =   524,288 B

(constants in ``src/include/device.h``). A ring all-reduce connects each rank to one receiving peer per
channel. Channels: 16 on an NVLink node (NCCL issue #892's log on 8 H800: "16 coll channels, 0 nvls
channels, 16 p2p channels"). On NVSwitch systems of compute capability ≥ 9.0 with more than two ranks
NCCL adds NVLink SHARP (NVLS) buffers: vLLM issue #9699 logs ``nvlsPerRankSize 301989888`` (288 MiB)
per rank on 8 H200 and finds NVLS only for more than 2 GPUs.
"""

from __future__ import annotations

from typing import Final

NCCL_STEPS: Final = 8
SIMPLE_BUFFER_BYTES: Final = 1 << 22
LL128_BUFFER_BYTES: Final = 120 * 640 * NCCL_STEPS * 8
LL_BUFFER_BYTES: Final = 8 * 512 * NCCL_STEPS * 16
CHANNELS: Final = 16
NVLS_PER_RANK_BYTES: Final = 301_989_888
NVLS_MIN_RANKS: Final = 3
NVLS_MIN_COMPUTE_CAPABILITY: Final = (9, 0)


def nccl_buffer_bytes(ranks: int, *, nvswitch: bool, compute_capability: tuple[int, int] | None,
                      channels: int = CHANNELS) -> int:
    """Bytes one communicator of ``ranks`` ranks holds on each GPU (0 for a single rank)."""
    if ranks <= 1:
        return 0
    ring = channels * (SIMPLE_BUFFER_BYTES + LL128_BUFFER_BYTES + LL_BUFFER_BYTES)
    nvls = nvswitch and ranks >= NVLS_MIN_RANKS and compute_capability is not None \
        and compute_capability >= NVLS_MIN_COMPUTE_CAPABILITY
    return ring + (NVLS_PER_RANK_BYTES if nvls else 0)
