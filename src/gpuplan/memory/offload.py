"""CPU offload of the optimizer (DeepSpeed ZeRO-Offload style): the time the host adds to a step.

The one copy of this arithmetic: ``fit``'s CPU-offload rung (advise/fit.py) and the planner's
DeepSpeed ``offload_optimizer`` layouts (parallel/evaluate.py) both call :func:`optimizer_offload_time`.
Which bytes stay on the GPU is the caller's: fit traces the step without an optimizer (its
parameters and gradients stay as traced), the planner applies DeepSpeed's ZeRO partitioning.

Model (priors, printed with the result; not measured here):

* gradients go to the host and updated parameters come back over the GPU's host link (PCIe),
  at ``PCIE_EFFICIENCY`` of its per-direction rate, not overlapped with compute (an upper bound:
  DeepSpeed overlaps part of the gradient copy with backward);
* the CPU Adam update is bandwidth-bound (DeepSpeed's CPU Adam is vectorised): it streams
  ``CPU_ADAM_BYTES_PER_PARAM`` — the fp32 parameter, gradient and two moments, each read and
  written — at ``HOST_MEMORY_BANDWIDTH_BYTES_PER_S`` (a server socket's DDR sustains 40-100 GB/s).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.hardware.interconnect import pcie_gb_per_s_per_direction

PCIE_EFFICIENCY = 0.8
"""Achieved fraction of the host link's per-direction rate for large pinned copies."""
CPU_ADAM_BYTES_PER_PARAM = 32
"""fp32 parameter, gradient, first and second moment: 16 bytes read and 16 written per parameter."""
HOST_MEMORY_BANDWIDTH_BYTES_PER_S = 40e9
"""Host memory bandwidth the CPU Adam update streams at (low end of a server socket)."""
DEFAULT_HOST_LINK_GB_PER_S = pcie_gb_per_s_per_direction(4, 16)
"""Host link when the GPU's is not in the catalog: PCIe Gen4 x16, the common server slot."""


@dataclass(frozen=True, slots=True)
class OffloadTime:
    """Seconds an optimizer step offloaded to the CPU adds, split by where they are spent."""

    transfer_s: float
    """Gradients to the host and updated parameters back over the host link."""
    cpu_update_s: float
    """The optimizer update on the CPU."""

    @property
    def total_s(self) -> float:
        return self.transfer_s + self.cpu_update_s

    def describe(self) -> str:
        return f"host link {self.transfer_s:.3g} s + CPU Adam {self.cpu_update_s:.3g} s per step"


def optimizer_offload_time(
    params_updated: float,
    *,
    grad_bytes_per_param: float,
    param_bytes_per_param: float,
    host_link_gb_per_s: float | None,
) -> OffloadTime:
    """Time of one offloaded optimizer step over ``params_updated`` parameters.

    ``grad_bytes_per_param`` go to the host and ``param_bytes_per_param`` come back (the dtypes the
    GPU holds them in); ``host_link_gb_per_s`` is the GPU's host link per direction (GB/s, decimal),
    None when unknown (then :data:`DEFAULT_HOST_LINK_GB_PER_S`)."""
    transfer_s = host_link_time_s(params_updated * (grad_bytes_per_param + param_bytes_per_param), host_link_gb_per_s)
    cpu_s = params_updated * CPU_ADAM_BYTES_PER_PARAM / HOST_MEMORY_BANDWIDTH_BYTES_PER_S
    return OffloadTime(transfer_s, cpu_s)


def host_link_time_s(copy_bytes: float, host_link_gb_per_s: float | None) -> float:
    """Seconds ``copy_bytes`` take over the GPU's host link in one direction (large pinned copies at
    ``PCIE_EFFICIENCY`` of the per-direction rate; None: :data:`DEFAULT_HOST_LINK_GB_PER_S`)."""
    return copy_bytes / ((host_link_gb_per_s or DEFAULT_HOST_LINK_GB_PER_S) * 1e9 * PCIE_EFFICIENCY)


def activation_offload_time_s(copy_bytes: float, host_link_gb_per_s: float | None) -> float:
    """``--offload activations``: the checkpointed inputs go to the host in the forward and come back before
    each block's recompute — ``copy_bytes`` each way, not overlapped with compute (an upper bound: ALST issues
    the copies beside the compute stream)."""
    return 2 * host_link_time_s(copy_bytes, host_link_gb_per_s)


def describe_model() -> str:
    """One assumption line for results that used :func:`optimizer_offload_time`."""
    return (
        f"CPU offload: optimizer state and step on the host; gradients and parameters over PCIe at "
        f"{PCIE_EFFICIENCY:.0%} of the link (not overlapped), CPU Adam streaming {CPU_ADAM_BYTES_PER_PARAM} bytes "
        f"per parameter at {HOST_MEMORY_BANDWIDTH_BYTES_PER_S / 1e9:.0f} GB/s host memory bandwidth"
    )
