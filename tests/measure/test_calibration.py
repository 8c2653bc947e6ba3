"""``gpuplan calibrate``: medians per (GPU, torch, CUDA) from the store; ``estimate`` applies a
matching calibration and says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from gpuplan.cli.main import main
from gpuplan.measure.calibration import CalibrationEntry, apply_calibration, calibration_for, fit, load, write
from gpuplan.measure.store import Store
from gpuplan.units import MIB


def _row(gpu: str, context_mib: float | None, measured_s: float, estimated_s: float | None,
         device: str = "cuda", world: int = 1, torch_version: str = torch.__version__) -> dict[str, object]:
    return {"model": "gpt2", "layout": None,
            "workload": {"mode": "train", "precision": "amp-bf16", "batch_size": 8},
            "environment": {"device": device, "gpu_id": gpu, "device_name": gpu, "driver_version": "570.86",
                            "torch_version": torch_version, "cuda_version": torch.version.cuda},
            "measured": {"rank": 0, "world_size": world, "step_time_s": measured_s,
                         "cuda_context_bytes": None if context_mib is None else int(context_mib * MIB)},
            "estimated": {"step_time_s": estimated_s}}


@pytest.fixture()
def store_path(tmp_path: Path) -> Path:
    path = tmp_path / "m.sqlite3"
    with Store(path) as s:
        for ctx, t in ((500, 1.2), (520, 1.1), (510, 1.3)):
            s.add([_row("H100-SXM", ctx, t, 1.0)])
        s.add([_row("H100-SXM", 900, 9.0, 1.0, world=2)])  # multi-process: NCCL buffers, not counted
        s.add([_row("H100-SXM", None, 1.0, None)])  # no context reading, no step estimate
        s.add([_row("A100-80GB-SXM", 300, 2.0, 1.0, torch_version="2.0.0")])
        s.add([_row("cpu", None, 0.5, None, device="cpu")])
    return path


def test_fit_takes_medians_per_gpu_and_software(store_path: Path) -> None:
    with Store(store_path) as s:
        entries = {e.gpu: e for e in fit(s.records())}
    h100 = entries["H100-SXM"]
    assert h100.cuda_context_bytes == 510 * MIB and h100.context_samples == 3
    assert h100.step_time_factor == pytest.approx(1.2) and h100.step_time_samples == 3
    assert h100.driver_versions == ("570.86",)
    assert entries["A100-80GB-SXM"].torch_version == "2.0.0"
    assert "cpu" not in entries


def test_calibrate_cli_writes_the_file_and_estimate_applies_it(store_path: Path, tmp_path: Path,
                                                               tiny_gpt2: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--store", str(store_path), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["measurements"] == 7 and report["calibration_file"] == str(out)
    assert calibration_for("H100-SXM", path=out) is not None
    assert calibration_for("A100-80GB-SXM", path=out) is None  # fitted on torch 2.0.0, not this torch
    from gpuplan.estimate import estimate

    base = estimate(tiny_gpt2, batch_size=1, seq_len=16, gpu="H100-SXM")
    cal = apply_calibration(base, path=out)
    assert cal.components["cuda_context"] == 510 * MIB
    assert cal.total_required_bytes - base.total_required_bytes == 510 * MIB - base.components["cuda_context"]
    assert cal.assumptions[-1].startswith("calibration applied for H100-SXM")
    assert not any(a.startswith("CUDA context ") for a in cal.assumptions)  # the assumed figure is gone
    assert cal.to_dict()["calibration"]["cuda_context_bytes"] == 510 * MIB
    if base.step_time_s is not None:
        assert cal.step_time_s == pytest.approx(base.step_time_s * 1.2)


def test_estimate_uses_the_default_calibration_file(store_path: Path, isolated_dirs: Path, tiny_gpt2: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["calibrate", "--store", str(store_path)]) == 0
    assert (isolated_dirs / "config" / "gpuplan" / "calibration.json").exists()
    capsys.readouterr()
    argv = ["estimate", tiny_gpt2, "--batch-size", "1", "--seq-len", "16", "--gpu", "H100-SXM", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["components"]["cuda_context"] == 510 * MIB
    assert any(a.startswith("calibration applied") for a in out["assumptions"])


def test_off_switch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    write([CalibrationEntry("H100-SXM", torch.__version__, torch.version.cuda or "none", 1, 1.0, 1, 1)], path,
          store="x")
    monkeypatch.setenv("GPUPLAN_CALIBRATION", "off")
    assert calibration_for("H100-SXM") is None
    monkeypatch.setenv("GPUPLAN_CALIBRATION", str(path))
    assert calibration_for("H100-SXM") == load(path)[0]


def test_write_keeps_other_entries(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    a = CalibrationEntry("A", "t", "c", 1, None, 1, 0)
    b = CalibrationEntry("B", "t", "c", 2, None, 1, 0)
    write([a], path, store="s")
    write([b, CalibrationEntry("A", "t", "c", 3, None, 1, 0)], path, store="s")
    assert {(e.gpu, e.cuda_context_bytes) for e in load(path)} == {("A", 3), ("B", 2)}


def test_calibrate_without_a_store_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["calibrate", "--store", str(tmp_path / "none.sqlite3")])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "no measurements store" in err


def test_calibrate_with_only_cpu_runs_says_nothing_to_do(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.sqlite3"
    with Store(path) as s:
        s.add([_row("cpu", None, 0.5, None, device="cpu")])
    assert main(["calibrate", "--store", str(path), "--out", str(tmp_path / "c.json")]) == 1
    assert "nothing to calibrate" in capsys.readouterr().out
    assert not (tmp_path / "c.json").exists()


def test_corrupt_calibration_file_is_one_line(tmp_path: Path) -> None:
    from gpuplan.errors import ConfigError

    path = tmp_path / "c.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="is not a gpuplan calibration"):
        load(path)
