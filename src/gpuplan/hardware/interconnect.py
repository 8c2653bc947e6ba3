"""Host-link facts for multi-GPU planning.

PCIe per-direction bandwidth of an x16 link, from the signalling rate and line coding of each
generation (PCI-SIG base specifications): Gen3 8 GT/s and Gen4 16 GT/s and Gen5 32 GT/s use
128b/130b encoding; Gen6 runs 64 GT/s PAM4 with 256-byte FLITs carrying 242 bytes of payload.
These are link ceilings; measured NCCL bus bandwidth over PCIe is lower (switches, P2P off).
"""

from __future__ import annotations

from gpuplan.errors import ConfigError

# GB/s (decimal) per direction, x16: GT/s * 16 lanes / 8 bits * coding efficiency.
_X16_GB_PER_S: dict[int, float] = {
    3: 8 * 16 / 8 * 128 / 130,  # 15.75
    4: 16 * 16 / 8 * 128 / 130,  # 31.5
    5: 32 * 16 / 8 * 128 / 130,  # 63.0
    6: 64 * 16 / 8 * 242 / 256,  # 121.0
}

LINK_TYPES: tuple[str, ...] = ("nvlink", "infinity-fabric", "roce", "pcie", "none")


def pcie_gb_per_s_per_direction(gen: int, lanes: int = 16) -> float:
    """Per-direction PCIe bandwidth in GB/s for a link of ``lanes`` lanes of generation ``gen``."""
    if gen not in _X16_GB_PER_S:
        raise ConfigError(f"unknown PCIe generation {gen} (known: {', '.join(map(str, _X16_GB_PER_S))})")
    if lanes not in (1, 2, 4, 8, 16):
        raise ConfigError(f"PCIe link width must be 1, 2, 4, 8 or 16 lanes, got {lanes}")
    return _X16_GB_PER_S[gen] * lanes / 16
