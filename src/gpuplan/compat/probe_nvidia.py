"""NVIDIA GPUs and driver from a facts source: NVML first, then nvidia-smi (-q, table, --query-gpu, -L)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpuplan.compat import parsers
from gpuplan.compat.coerce import as_bool, as_int, first_line
from gpuplan.compat.drivers import driver_max_cuda
from gpuplan.compat.environment import GpuInfo, NvidiaInfo, PlatformInfo
from gpuplan.compat.facts import FactsSource
from gpuplan.compat.gpunames import cc_from_name
from gpuplan.compat.versions import cuda_from_driver_int, major_minor

_CSV_CC = ["--query-gpu=index,compute_cap", "--format=csv,noheader"]


def _gpu_from_mapping(raw: Mapping[str, Any], index: int) -> GpuInfo:
    name = raw.get("name") if isinstance(raw.get("name"), str) else None
    cc = raw.get("cc") if isinstance(raw.get("cc"), str) else None
    return _with_cc(
        GpuInfo(
            index=_index if (_index := as_int(raw.get("index"))) is not None else index,
            vendor="nvidia",
            name=name,
            cc=major_minor(cc) if cc else None,
            cc_source="driver" if cc and major_minor(cc) else None,
            memory_total_bytes=as_int(raw.get("memory_total_bytes")),
            memory_used_bytes=as_int(raw.get("memory_used_bytes")),
            mig_mode=as_bool(raw.get("mig_mode")),
            mig_devices=as_int(raw.get("mig_devices")),
            ecc=as_bool(raw.get("ecc")),
            processes=as_int(raw.get("processes")),
        )
    )


def _with_cc(gpu: GpuInfo) -> GpuInfo:
    """Fill a missing compute capability from the product-name table."""
    if gpu.cc is not None:
        return gpu
    cc = cc_from_name(gpu.name)
    if cc is None:
        return gpu
    return GpuInfo(**{**gpu.__dict__, "cc": cc, "cc_source": "name table"})


def _from_smi(report: parsers.SmiReport, ccs: dict[int, str]) -> tuple[GpuInfo, ...]:
    gpus = []
    for g in report.gpus:
        cc = g.cc or ccs.get(g.index)
        gpus.append(
            _with_cc(
                GpuInfo(
                    index=g.index,
                    vendor="nvidia",
                    name=g.name,
                    cc=cc,
                    cc_source="driver" if cc else None,
                    memory_total_bytes=g.memory_total_bytes,
                    memory_used_bytes=g.memory_used_bytes,
                    mig_mode=g.mig_mode,
                    mig_devices=g.mig_devices,
                    ecc=g.ecc,
                    processes=g.processes,
                )
            )
        )
    return tuple(gpus)


def _smi_ccs(source: FactsSource) -> dict[int, str]:
    """Compute capabilities from ``nvidia-smi --query-gpu=index,compute_cap`` (drivers >= ~510)."""
    out = source.run(["nvidia-smi", *_CSV_CC])
    if out is None or out.returncode != 0:
        return {}
    ccs = {}
    for row in parsers.parse_smi_csv(out.stdout, ["index", "compute_cap"]):
        index, cc = as_int(row.get("index")), major_minor(row.get("compute_cap"))
        if index is not None and cc is not None:
            ccs[index] = cc
    return ccs


def probe_nvidia(source: FactsSource, plat: PlatformInfo) -> NvidiaInfo:
    windows = plat.system == "Windows"
    nvml = source.nvml()
    nvml_problem = None
    if nvml is not None and "error" not in nvml and isinstance(nvml.get("gpus"), list):
        driver = nvml.get("driver_version") if isinstance(nvml.get("driver_version"), str) else None
        reported = cuda_from_driver_int(as_int(nvml.get("cuda_driver_version")))
        gpus = tuple(
            _gpu_from_mapping(g, i) for i, g in enumerate(nvml["gpus"]) if isinstance(g, Mapping)
        )
        return _nvidia_info("nvml", driver, reported, gpus, True, None, windows)
    if nvml is not None and "error" in nvml:
        nvml_problem = f"NVML: {nvml['error']}"

    # `nvidia-smi -q` says the most; the plain table is the fallback (and what people paste in issues)
    query = source.run(["nvidia-smi", "-q"])
    report, label = parsers.SmiReport(), "nvidia-smi -q"
    if query is not None and query.returncode == 0:
        report = parsers.parse_smi_query(query.stdout)
    if not report.gpus and report.driver_version is None:
        table = source.run(["nvidia-smi"])
        if table is not None and table.returncode == 0:
            report, label = parsers.parse_smi_table(table.stdout), "nvidia-smi"
        failed = next((o for o in (query, table) if o is not None and o.returncode != 0), None)
        if query is None and table is None:
            return NvidiaInfo("none", None, None, None, (), False, nvml_problem)
        if failed is not None and not report.gpus and report.driver_version is None:
            code = failed.returncode
            problem = first_line(failed.stdout, failed.stderr) or f"nvidia-smi exited with {code}"
            return NvidiaInfo("nvidia-smi", None, None, None, (), True, problem)
    gpus = _from_smi(report, _smi_ccs(source) if any(g.cc is None for g in report.gpus) else {})
    gpus = _mig_from_list(source, gpus)
    return _nvidia_info(label, report.driver_version, report.cuda_version, gpus, True, None, windows)


def _mig_from_list(source: FactsSource, gpus: tuple[GpuInfo, ...]) -> tuple[GpuInfo, ...]:
    """Count MIG devices with ``nvidia-smi -L`` where MIG is on and the count is not known yet."""
    if not any(g.mig_mode and g.mig_devices is None for g in gpus):
        return gpus
    out = source.run(["nvidia-smi", "-L"])
    if out is None or out.returncode != 0:
        return gpus
    counts = parsers.parse_smi_list(out.stdout)
    return tuple(
        GpuInfo(**{**g.__dict__, "mig_devices": counts.get(g.index)})
        if g.mig_mode and g.mig_devices is None
        else g
        for g in gpus
    )


def _nvidia_info(
    label: str,
    driver: str | None,
    reported_cuda: str | None,
    gpus: tuple[GpuInfo, ...],
    smi_present: bool,
    problem: str | None,
    windows: bool,
) -> NvidiaInfo:
    derived = None if reported_cuda else driver_max_cuda(driver, windows)
    return NvidiaInfo(
        source=label,
        driver_version=driver,
        driver_cuda=reported_cuda or derived,
        driver_cuda_source="driver" if reported_cuda else ("toolkit table" if derived else None),
        gpus=gpus,
        smi_present=smi_present,
        problem=problem,
    )
