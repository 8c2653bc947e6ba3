"""The live readers: NVML through a stand-in `pynvml` module (no GPU here), and the real torch."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from gpuplan.compat.facts import RecordedFacts
from gpuplan.compat.nvml_reader import read_nvml
from gpuplan.compat.probe import probe
from gpuplan.compat.rules import diagnose


class _NVMLError(Exception):
    pass


def _fake_pynvml(init_error: str | None = None) -> types.ModuleType:
    """Answers like NVML on a 2-GPU A100 box with MIG on GPU 1 (one instance) and ECC unsupported on GPU 0."""
    m = types.ModuleType("pynvml")

    def init() -> None:
        if init_error:
            raise _NVMLError(init_error)

    def not_supported(*_: Any) -> Any:
        raise _NVMLError("Not Supported")

    memory = types.SimpleNamespace(total=85899345920, used=1048576)
    m.nvmlInit = init  # type: ignore[attr-defined]
    m.nvmlShutdown = lambda: None  # type: ignore[attr-defined]
    m.nvmlSystemGetDriverVersion = lambda: "580.95.05"  # type: ignore[attr-defined]
    m.nvmlSystemGetCudaDriverVersion = lambda: 13000  # type: ignore[attr-defined]
    m.nvmlDeviceGetCount = lambda: 2  # type: ignore[attr-defined]
    m.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    m.nvmlDeviceGetName = lambda h: b"NVIDIA A100-SXM4-80GB"  # type: ignore[attr-defined]
    m.nvmlDeviceGetCudaComputeCapability = lambda h: (8, 0)  # type: ignore[attr-defined]
    m.nvmlDeviceGetMemoryInfo = lambda h: memory  # type: ignore[attr-defined]
    m.nvmlDeviceGetMigMode = lambda h: (h, h)  # type: ignore[attr-defined]
    m.nvmlDeviceGetMaxMigDeviceCount = lambda h: 7  # type: ignore[attr-defined]
    m.nvmlDeviceGetMigDeviceHandleByIndex = (  # type: ignore[attr-defined]
        lambda h, i: "mig0" if i == 0 else not_supported())
    m.nvmlDeviceGetEccMode = lambda h: not_supported() if h == 0 else (1, 1)  # type: ignore[attr-defined]
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: []  # type: ignore[attr-defined]
    return m


def test_nvml_readings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    data = read_nvml()
    assert data is not None
    assert data["driver_version"] == "580.95.05" and data["cuda_driver_version"] == 13000
    first, second = data["gpus"]
    assert first == {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "cc": "8.0",
                     "memory_total_bytes": 85899345920, "memory_used_bytes": 1048576, "mig_mode": False,
                     "mig_devices": None, "ecc": None, "processes": 0}
    assert second["mig_mode"] is True and second["mig_devices"] == 1 and second["ecc"] is True
    # the readings go through the probe exactly like a recorded `nvml:` section
    env = probe(RecordedFacts({"platform": {"system": "Linux"}, "nvml": data}))
    assert env.nvidia.source == "nvml" and env.nvidia.driver_cuda == "13.0"
    assert [g.cc_source for g in env.nvidia.gpus] == ["driver", "driver"]
    assert [f.code for f in diagnose(env)] == ["MIG_ENABLED", "TORCH_NOT_INSTALLED"]


def test_nvml_init_failure_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(init_error="Driver Not Loaded"))
    assert read_nvml() == {"error": "Driver Not Loaded"}


def test_real_torch_runtime_matches_the_data() -> None:
    """Imports the venv's torch (seconds): its arch list must equal the data's list for that build."""
    pytest.importorskip("torch")
    from gpuplan.compat import dataload
    from gpuplan.compat.torch_reader import read_torch_runtime

    runtime = read_torch_runtime()
    assert runtime is not None and "import_error" not in runtime
    rel = dataload.release(runtime["version"])
    if rel is None or runtime["cuda"] is None:
        pytest.skip(f"torch {runtime['version']} is not a CUDA build in the data")
    variant = next(v for v in rel.variants if v.cuda == runtime["cuda"])
    if variant.arch_confidence == "inferred":
        pytest.skip("the data's arch list for this build is inferred")
    assert tuple(runtime["arch_list"]) == variant.arch_linux
