"""The typed GPU record and its MIG profiles.

Conventions (the same as ``shared/reference/gpus-notes.md``, promoted to code):

* Every tensor rate is **dense** (no 2:4 sparsity) and **with FP32 accumulate** where the format
  has a choice: that is what a PyTorch ``half``/``bfloat16`` matmul gets (cuBLAS compute type 32F).
  GeForce cards run FP16/BF16 (and on Ada/Blackwell FP8) with FP32 accumulate at half the
  FP16-accumulate rate; ``fp32_accumulate_half_rate`` flags them and ``fp16_fp16acc_tflops`` keeps
  the faster figure that PyTorch does not get.
* ``tf32_tflops`` is a tensor-core rate that PyTorch uses only when TF32 is enabled
  (``torch.backends.cuda.matmul.allow_tf32`` is False by default); plain FP32 matmuls are bounded
  by ``fp32_tflops``. The cost model decides; the catalog only states both.
* Rows are per GPU (per device PyTorch sees), except MI250/MI250X whose two GCDs are two devices
  (see their notes).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gpuplan.errors import ConfigError, UnknownGPUError
from gpuplan.hardware.interconnect import pcie_gb_per_s_per_direction
from gpuplan.units import GIB

# The dtypes the cost model asks about, mapped to the field that holds their dense peak.
DTYPE_FIELDS: dict[str, str] = {
    "fp32": "fp32_tflops",
    "tf32": "tf32_tflops",
    "fp16": "fp16_tflops",
    "bf16": "bf16_tflops",
    "fp8": "fp8_tflops",
    "int8": "int8_tops",
    "fp4": "fp4_tflops",
}
DTYPES: tuple[str, ...] = tuple(DTYPE_FIELDS)

TIERS: tuple[str, ...] = ("entry", "research", "enterprise")
# NB: thresholds of the tier rule (see GPU.tier); labelled vendor GB, as buyers compare them.
RESEARCH_MIN_GB = 24.0
ENTERPRISE_MIN_GB = 40.0


DEFAULT_COMPUTE_CAPABILITY = (9, 0)
"""Kernels are chosen as on an sm_90 GPU when no GPU is given (flash attention available)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MIGProfile:
    """One NVIDIA MIG GPU-instance profile, e.g. ``3g.40gb`` on an A100 80GB.

    Compute and memory fractions are NVIDIA's MIG user guide columns "Fraction of SMs" and
    "Fraction of Memory"; ``memory_bytes`` is what ``nvidia-smi mig -lgip`` lists where a printout
    was found, else derived (``memory_source`` says which).
    """

    name: str
    compute_slices: int
    max_compute_slices: int
    memory_slices: int
    max_memory_slices: int
    max_instances: int
    memory_bytes: int
    memory_source: str
    sm_count: int | None = None

    @property
    def compute_fraction(self) -> float:
        return self.compute_slices / self.max_compute_slices

    @property
    def memory_fraction(self) -> float:
        return self.memory_slices / self.max_memory_slices

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["compute_fraction"] = self.compute_fraction
        out["memory_fraction"] = self.memory_fraction
        return out


@dataclass(frozen=True, kw_only=True, slots=True)
class GPU:
    """One catalog GPU (or a MIG slice of one, see :meth:`mig`). Built by the loader, validated."""

    id: str
    name: str
    vendor: str
    segment: str
    arch: str
    chip: str | None
    compute_capability: tuple[int, int] | None
    memory_labelled_gb: float
    memory_type: str | None
    memory_total_bytes: int
    memory_total_source: str
    cuda_total_memory_bytes: int | None
    cuda_total_memory_source: str | None
    memory_bandwidth_gb_per_s: float
    boost_clock_mhz: float | None
    fp32_tflops: float | None
    tf32_tflops: float | None
    fp16_tflops: float | None
    bf16_tflops: float | None
    fp16_fp16acc_tflops: float | None
    fp8_tflops: float | None
    fp8_fp16acc_tflops: float | None
    int8_tops: float | None
    fp4_tflops: float | None
    dense: bool
    fp32_accumulate_half_rate: bool
    tensor_dtypes: str | None
    interconnect: str | None
    interconnect_gb_per_s_bidirectional: float | None
    intra_node_link: str
    pcie_gen: int | None
    pcie_lanes: int | None
    tdp_w: int | None
    sm_count: int | None
    devices_per_package: int
    mig_max_instances: int | None
    mig_profiles: tuple[MIGProfile, ...]
    mig_source: str | None
    form_factor: str | None
    release_year: int | None
    launch_price_usd: int | None
    derived_fields: str | None
    source: str
    verification: str | None
    notes: str | None
    reference: str
    retrieved: str
    aliases: tuple[str, ...]
    shorthands: tuple[str, ...]
    mig_parent: str | None = None
    mig_profile: str | None = None

    # ---- memory -------------------------------------------------------------------------------
    @property
    def memory_gib(self) -> float:
        """``memory_total_bytes`` in GiB (what nvidia-smi's "Total" column shows, divided by 1024)."""
        return self.memory_total_bytes / GIB

    @property
    def usable_memory_bytes(self) -> int:
        """Memory the CUDA allocator can hand out: ``torch.cuda.get_device_properties().total_memory``
        where a printout was found, else nvidia-smi's total (an upper bound: the driver keeps a few
        hundred MiB, e.g. A100-SXM4-40GB reports 40339 of 40960 MiB)."""
        return self.cuda_total_memory_bytes or self.memory_total_bytes

    @property
    def memory_bandwidth_bytes_per_s(self) -> float:
        return self.memory_bandwidth_gb_per_s * 1e9

    # ---- compute ------------------------------------------------------------------------------
    def peak_tflops(self, dtype: str) -> float | None:
        """Dense peak for ``dtype`` (fp32/tf32/fp16/bf16/fp8/int8/fp4) with FP32 accumulate, the rate
        PyTorch matmuls can reach; ``None`` when the GPU has no such rate or none is documented."""
        field = DTYPE_FIELDS.get(dtype)
        if field is None:
            raise ConfigError(f"unknown dtype {dtype!r} (allowed: {', '.join(DTYPES)})")
        value: float | None = getattr(self, field)
        return value

    def peak_flops_per_s(self, dtype: str) -> float | None:
        tflops = self.peak_tflops(dtype)
        return None if tflops is None else tflops * 1e12

    def supports(self, dtype: str) -> bool:
        """True if the hardware runs ``dtype`` natively (a documented rate, or listed among the
        accelerated dtypes even where the vendor prints no rate, e.g. RX 7900 XTX bf16)."""
        if self.peak_tflops(dtype) is not None:
            return True
        return dtype in self._tensor_dtype_tokens()

    def _tensor_dtype_tokens(self) -> set[str]:
        text = (self.tensor_dtypes or "").lower()
        return {tok.strip().split(" ")[0] for tok in text.split(",") if tok.strip()}

    @property
    def has_bf16(self) -> bool:
        return self.supports("bf16")

    @property
    def half_precision(self) -> str | None:
        """The 16-bit type people compute in on this GPU: 'bf16' where it has bf16, else 'fp16' where fp16 runs
        at least as fast as fp32 (Volta/Turing tensor cores, P100), else None (fp32: e.g. GTX 1080 Ti, whose
        fp16 rate is 1/64 of fp32)."""
        if self.has_bf16:
            return "bf16"
        fp16, fp32 = self.peak_tflops("fp16"), self.peak_tflops("fp32")
        if self.supports("fp16") and (fp16 is None or fp32 is None or fp16 >= fp32):
            return "fp16"
        return None

    @property
    def has_tf32(self) -> bool:
        return self.supports("tf32")

    @property
    def has_fp8(self) -> bool:
        return self.supports("fp8")

    # ---- identity and classification -----------------------------------------------------------
    @property
    def compute_capability_label(self) -> str:
        """'8.0', or for a GPU without one what it is instead ('none: Apple, not a CUDA GPU'):
        every message and table shows this, never an empty '()'."""
        if self.compute_capability is None:
            return f"none: {self.vendor}, not a CUDA GPU"
        major, minor = self.compute_capability
        return f"{major}.{minor}"

    @property
    def vendor_key(self) -> str:
        """``nvidia`` / ``amd`` / ``intel`` / ``apple``: the first word of ``vendor``, lowercased."""
        return self.vendor.split()[0].lower()

    @property
    def is_mig(self) -> bool:
        return self.mig_parent is not None

    @property
    def tier(self) -> str:
        """entry / research / enterprise, derived from segment and labelled memory:

        * enterprise: a datacenter part (segment starts with "datacenter") with >= 40 GB;
        * entry: anything with < 24 GB (GeForce up to the 4080, T4, V100-16GB, A4000, ...);
        * research: the rest: 24-39 GB datacenter parts (A10, L4, A30, V100-32GB) and every
          workstation, consumer or Apple part with >= 24 GB (RTX 4090, A6000, M3 Max).

        A MIG slice is classified by its own memory.
        """
        gb = self.memory_total_bytes / 1e9 if self.is_mig else self.memory_labelled_gb
        if self.segment.startswith("datacenter") and gb >= ENTERPRISE_MIN_GB:
            return "enterprise"
        if gb < RESEARCH_MIN_GB:
            return "entry"
        return "research"

    # ---- interconnect -------------------------------------------------------------------------
    @property
    def nvlink_gb_per_s_per_direction(self) -> float | None:
        """NVLink bandwidth per GPU, one direction (half the bidirectional datasheet total);
        ``None`` when the GPU has no NVLink to other GPUs."""
        if self.intra_node_link != "nvlink" or not self.interconnect_gb_per_s_bidirectional:
            return None
        return self.interconnect_gb_per_s_bidirectional / 2

    @property
    def pcie_gb_per_s_per_direction(self) -> float | None:
        if self.pcie_gen is None:
            return None
        return pcie_gb_per_s_per_direction(self.pcie_gen, self.pcie_lanes or 16)

    @property
    def intra_node_gb_per_s_per_direction(self) -> float | None:
        """GPU-to-GPU bandwidth inside a node, one direction: the scale-up link (NVLink, Infinity
        Fabric, Gaudi RoCE) where there is one, else PCIe; ``None`` for devices that cannot talk
        to a peer GPU at all (MIG slices, Apple SoCs)."""
        if self.intra_node_link == "none":
            return None
        scale_up = self.intra_node_link in ("nvlink", "infinity-fabric", "roce")
        if scale_up and self.interconnect_gb_per_s_bidirectional:
            return self.interconnect_gb_per_s_bidirectional / 2
        return self.pcie_gb_per_s_per_direction

    # ---- MIG ----------------------------------------------------------------------------------
    def mig(self, profile: str) -> GPU:
        """This GPU cut to one MIG instance: its memory, memory bandwidth scaled by the memory
        fraction (memory controllers and L2 are partitioned with the memory slices), every compute
        rate scaled by the SM fraction, and no peer-to-peer link (MIG instances have no P2P)."""
        found = next((p for p in self.mig_profiles if p.name == profile.lower()), None)
        if found is None:
            if not self.mig_profiles:
                raise UnknownGPUError(f"{self.id} does not support MIG (no MIG profiles in the catalog)")
            names = ", ".join(p.name for p in self.mig_profiles)
            raise UnknownGPUError(f"{self.id} has no MIG profile {profile!r}; its profiles: {names}")
        c = found.compute_fraction
        scaled: dict[str, Any] = {}
        for field in DTYPE_FIELDS.values():
            rate = getattr(self, field)
            scaled[field] = None if rate is None else rate * c
        fp16acc = None if self.fp16_fp16acc_tflops is None else self.fp16_fp16acc_tflops * c
        fp8acc = None if self.fp8_fp16acc_tflops is None else self.fp8_fp16acc_tflops * c
        return dataclasses.replace(
            self,
            id=f"{self.id}:{found.name}",
            name=f"{self.name} MIG {found.name}",
            memory_total_bytes=found.memory_bytes,
            memory_total_source=found.memory_source,
            cuda_total_memory_bytes=None,
            cuda_total_memory_source=None,
            memory_bandwidth_gb_per_s=self.memory_bandwidth_gb_per_s * found.memory_fraction,
            fp16_fp16acc_tflops=fp16acc,
            fp8_fp16acc_tflops=fp8acc,
            interconnect="none (MIG instances have no peer-to-peer)",
            interconnect_gb_per_s_bidirectional=0.0,
            intra_node_link="none",
            sm_count=found.sm_count,
            mig_max_instances=0,
            mig_profiles=(),
            tdp_w=None,
            launch_price_usd=None,
            aliases=(),
            shorthands=(),
            mig_parent=self.id,
            mig_profile=found.name,
            **scaled,
        )

    # ---- serialisation ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Every field plus the derived values, JSON-ready (units in the key names)."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "compute_capability":
                value = None if value is None else f"{value[0]}.{value[1]}"
            elif field.name == "mig_profiles":
                value = [p.to_dict() for p in value]
            elif isinstance(value, tuple):
                value = list(value)
            out[field.name] = value
        out["tier"] = self.tier
        out["memory_gib"] = round(self.memory_gib, 3)
        out["usable_memory_bytes"] = self.usable_memory_bytes
        out["memory_bandwidth_bytes_per_s"] = self.memory_bandwidth_bytes_per_s
        out["nvlink_gb_per_s_per_direction"] = self.nvlink_gb_per_s_per_direction
        out["pcie_gb_per_s_per_direction"] = self.pcie_gb_per_s_per_direction
        out["intra_node_gb_per_s_per_direction"] = self.intra_node_gb_per_s_per_direction
        out["has_bf16"] = self.has_bf16
        out["has_tf32"] = self.has_tf32
        out["has_fp8"] = self.has_fp8
        return out
