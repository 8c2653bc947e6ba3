"""``gpuplan calibrate``: medians per (GPU, torch, CUDA) from the store; the command line loads the
matching entry and ``estimate(..., calibration=...)`` applies it inside the computation and says so.
The library never reads the calibration file by itself."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from gpuplan.cli.main import main
from gpuplan.errors import ConfigError
from gpuplan.estimate import estimate
from gpuplan.hardware import resolve_gpu
from gpuplan.measure.calibration import (
    MAX_FILE_BYTES,
    PLAN_PREDICTION,
    CalibrationEntry,
    calibration_for,
    fit,
    load,
    write,
)
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


def _swept_run(gpu: str, rank_step_s: tuple[float, ...], planned_s: float, plan_gpu: str | None = None
               ) -> list[dict[str, object]]:
    """The rows ``gpuplan sweep`` stores for one multi-process run: one per rank, each with the 900 MiB context of
    a process that also holds NCCL's buffers, the single-process estimate of the micro-batch (0.5 s: no
    collectives, not the step) and the plan's prediction for the layout."""
    world = len(rank_step_s)
    rows = []
    for rank, t in enumerate(rank_step_s):
        row = _row(gpu, 900, t, 0.5, world=world)
        row["measured"] = {**row["measured"], "rank": rank}  # type: ignore[dict-item]
        row["estimated"] = {"step_time_s": 0.5,
                            PLAN_PREDICTION: {"gpu": plan_gpu or gpu, "layout": "dp=2 tp=1 pp=1 ddp mbs=8 ga=1",
                                              "step_time_s": planned_s}}
        row["layout"] = "ddp"
        rows.append(row)
    return rows


def _factor(tmp_path: Path, name: str, *runs: list[dict[str, object]]) -> CalibrationEntry:
    """The H100 entry fitted from two single-process runs (ratios 1.1 and 1.2, contexts 500 and 520 MiB) plus
    ``runs``."""
    with Store(tmp_path / f"{name}.sqlite3") as s:
        for ctx, t in ((500, 1.1), (520, 1.2)):
            s.add([_row("H100-SXM", ctx, t, 1.0)])
        for run in runs:
            s.add(run)
        (entry,) = fit(s.records())
    return entry


def test_a_swept_run_moves_the_factor_as_a_single_process_run_would(tmp_path: Path) -> None:
    """A run stored by ``gpuplan sweep`` takes the same path as a single-process one: measured / predicted
    (the slowest rank against the plan's step) into the one median. A single-process run measured at 1.5 s
    against 1.0 s estimated and a 2-rank swept run whose slowest rank took 1.5 s against the plan's 1.0 s give
    the same entry; the swept run's context (NCCL's buffers in it) is not a context sample."""
    single = _factor(tmp_path, "single", [_row("H100-SXM", 510, 1.5, 1.0)])
    swept = _factor(tmp_path, "swept", _swept_run("H100-SXM", (1.4, 1.5), 1.0))
    assert single.step_time_factor == swept.step_time_factor == pytest.approx(1.2)  # median of 1.1, 1.2, 1.5
    assert single.step_time_samples == swept.step_time_samples == 3
    assert swept.cuda_context_bytes == 510 * MIB and swept.context_samples == 2  # 500, 520: not the 900 MiB ranks
    # a slower swept run moves it the same way a slower single-process run does
    assert (_factor(tmp_path, "s3", [_row("H100-SXM", None, 3.0, 1.0)]).step_time_factor
            == _factor(tmp_path, "w3", _swept_run("H100-SXM", (3.0, 2.0), 1.0)).step_time_factor == pytest.approx(1.2))
    assert _factor(tmp_path, "w09", _swept_run("H100-SXM", (0.9, 0.8), 1.0),
                   _swept_run("H100-SXM", (0.8, 0.9), 1.0)).step_time_factor == pytest.approx(1.0)  # of 0.9 0.9 1.1 1.2
    # no ratio: a plan for another GPU, a run with a rank missing from the store, or no plan (measure --nproc)
    for name, run in (("other-gpu", _swept_run("H100-SXM", (1.5, 1.5), 1.0, plan_gpu="A100-80GB-SXM")),
                      ("missing-rank", _swept_run("H100-SXM", (1.5, 1.5), 1.0)[:1]),
                      ("no-plan", [_row("H100-SXM", 900, 9.0, 1.0, world=2)])):
        entry = _factor(tmp_path, name, run)
        assert (entry.step_time_factor, entry.step_time_samples) == (pytest.approx(1.15), 2), name


@pytest.mark.slow
def test_calibrate_cli_writes_the_file_and_estimate_applies_it(store_path: Path, tmp_path: Path,
                                                               tiny_gpt2: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--store", str(store_path), "--out", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["measurements"] == 7 and report["calibration_file"] == str(out)
    entry = calibration_for("H100-SXM", path=out)
    assert entry is not None
    assert calibration_for("A100-80GB-SXM", path=out) is None  # fitted on torch 2.0.0, not this torch

    base = estimate(tiny_gpt2, batch_size=1, seq_len=16, gpu="H100-SXM")
    cal = estimate(tiny_gpt2, batch_size=1, seq_len=16, gpu="H100-SXM", calibration=entry)
    assert cal.components["cuda_context"] == 510 * MIB
    delta = 510 * MIB - base.components["cuda_context"]
    assert cal.total_required_bytes - base.total_required_bytes == delta
    assert cal.min_required_bytes - base.min_required_bytes == delta
    assert cal.assumptions[-1].startswith("calibration applied for H100-SXM")
    assert not any(a.startswith("CUDA context 426") for a in cal.assumptions)  # the assumed figure is gone
    assert cal.to_dict()["calibration"]["cuda_context_bytes"] == 510 * MIB
    assert base.step_time_s is not None and cal.step_time_s == pytest.approx(base.step_time_s * 1.2)


def _entry(context_bytes: int | None, factor: float | None, gpu: str = "H100-SXM") -> CalibrationEntry:
    return CalibrationEntry(gpu, torch.__version__, torch.version.cuda or "none", context_bytes, factor, 3, 3)


def test_a_calibration_that_changes_nothing_changes_nothing(tiny_gpt2: str) -> None:
    """Issue #9 item 2: old main recomputed ``fits`` from total_required_bytes after a calibration,
    while the fit is decided on min_required_bytes: on a GPU between the two, a calibration equal
    to the assumed figures flipped "fits" to "does not fit"."""
    h100 = resolve_gpu("H100-SXM")
    assert h100 is not None
    workload = {"mode": "infer", "batch_size": 64, "seq_len": 128}
    probe = estimate(tiny_gpt2, gpu=h100, **workload)  # type: ignore[arg-type]
    assert probe.min_required_bytes < probe.total_required_bytes  # the cache released under pressure
    between = replace(h100, cuda_total_memory_bytes=(probe.min_required_bytes + probe.total_required_bytes) // 2)
    base = estimate(tiny_gpt2, gpu=between, **workload)  # type: ignore[arg-type]
    same = _entry(base.components["cuda_context"], 1.0)
    cal = estimate(tiny_gpt2, gpu=between, calibration=same, **workload)  # type: ignore[arg-type]
    assert base.fits is True and cal.fits is True
    for name in ("total_required_bytes", "min_required_bytes", "headroom_bytes", "components", "step_time_s",
                 "throughput", "mfu"):
        assert getattr(cal, name) == getattr(base, name), name


def test_step_time_calibration_moves_every_time_figure(tiny_gpt2: str) -> None:
    """Issue #9 item 3: old main scaled step_time_s but left the JSON's time split and tokens/s at the
    uncalibrated values. Every time figure is one calculation: the kernel times scaled by the factor."""
    base = estimate(tiny_gpt2, batch_size=2, seq_len=32, gpu="H100-SXM")
    cal = estimate(tiny_gpt2, batch_size=2, seq_len=32, gpu="H100-SXM", calibration=_entry(None, 2.0))
    b, c = base.to_dict(), cal.to_dict()
    assert c["step_time_s"] == pytest.approx(2 * b["step_time_s"])
    assert sum(c["time"]["by_phase_s"].values()) == pytest.approx(c["step_time_s"])
    for key in ("compute_s", "memory_s", "overhead_s"):
        assert c["time"][key] == pytest.approx(2 * b["time"][key])
    assert c["time"]["kernels"] == b["time"]["kernels"]
    assert c["tokens_per_s"] == pytest.approx(b["tokens_per_s"] / 2)
    assert c["tokens_per_s"] == pytest.approx(c["throughput"]["value"])  # one figure, one answer
    assert c["samples_per_s"] == pytest.approx(2 / c["step_time_s"])
    assert c["mfu"] == pytest.approx(b["mfu"] / 2)
    assert c["components"] == b["components"]  # no context in the entry: memory untouched


def test_the_library_never_reads_the_calibration_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      tiny_gpt2: str) -> None:
    """Issue #9 item 2: old main applied the user's calibration file inside every estimate(gpu=...)."""
    path = tmp_path / "c.json"
    write([_entry(510 * MIB, 3.0)], path, store="x")
    monkeypatch.setenv("GPUPLAN_CALIBRATION", str(path))
    est = estimate(tiny_gpt2, batch_size=1, seq_len=16, gpu="H100-SXM")
    assert est.components["cuda_context"] != 510 * MIB and est.calibration is None
    assert not any("calibration applied" in a for a in est.assumptions)


def test_a_calibration_for_another_gpu_is_refused(tiny_gpt2: str) -> None:
    with pytest.raises(ConfigError, match="calibration is for A100-80GB-SXM, not H100-SXM"):
        estimate(tiny_gpt2, batch_size=1, seq_len=16, gpu="H100-SXM", calibration=_entry(None, 1.1, "A100-80GB-SXM"))


_GOOD = {"gpu": "H100-SXM", "torch_version": "2.4.0", "cuda_version": "12.4", "cuda_context_bytes": 500 * MIB,
         "step_time_factor": 1.1, "context_samples": 3, "step_time_samples": 3, "driver_versions": ["570.86"]}


@pytest.mark.parametrize(("change", "needle"), [
    ({"step_time_factor": -1.0}, "step_time_factor"),
    ({"step_time_factor": float("nan")}, "step_time_factor"),
    ({"step_time_factor": "fast"}, "step_time_factor"),
    ({"cuda_context_bytes": -5}, "cuda_context_bytes"),
    ({"cuda_context_bytes": 1.5}, "cuda_context_bytes"),
    ({"context_samples": True}, "context_samples"),
    ({"gpu": 7}, ".gpu"),
    ({"driver_versions": "570"}, "driver_versions"),
    ({"colour": "blue"}, "unknown field 'colour'"),
])
def test_bad_calibration_values_are_one_line_errors(tmp_path: Path, change: dict[str, object], needle: str,
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, tiny_gpt2: str) -> None:
    """Issue #9 item 20: a calibration file with bad values was an internal error (or silently used)."""
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"version": 1, "entries": [{**_GOOD, **change}]}))
    with pytest.raises(ConfigError, match="entries\\[0\\]") as info:
        load(path)
    message = str(info.value)
    assert str(path) in message and needle in message and "\n" not in message
    monkeypatch.setenv("GPUPLAN_CALIBRATION", str(path))
    assert main(["estimate", tiny_gpt2, "--batch-size", "1", "--seq-len", "16", "--gpu", "H100-SXM", "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.strip().splitlines()) == 1 and needle in captured.err


@pytest.mark.parametrize("content", ["[]", '{"entries": 3}', "x" * (MAX_FILE_BYTES + 1), "[" * 100000])
def test_calibration_files_that_are_not_one_are_one_line_errors(tmp_path: Path, content: str) -> None:
    path = tmp_path / "c.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match="is not a gpuplan calibration") as info:
        load(path)
    assert "\n" not in str(info.value)


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
