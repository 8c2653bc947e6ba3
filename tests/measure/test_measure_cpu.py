"""``gpuplan measure`` on the CPU: the real step, its tracked bytes next to the estimate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuplan.cli.main import main
from gpuplan.measure.local import Options, measure
from gpuplan.measure.store import Store
from gpuplan.workload import Workload

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tiny_run(tiny_gpt2: str) -> object:
    return measure(tiny_gpt2, workload=Workload(mode="train", batch_size=2, seq_len=32),
                   options=Options(steps=2, warmup=1))


def test_tracked_bytes_match_host_trace(tiny_run: object) -> None:
    m = tiny_run
    measured = m.measured  # type: ignore[attr-defined]
    assert measured.device == "cpu" and measured.steps == 2 and len(measured.step_times_s) == 2
    assert measured.step_time_s > 0
    row = m.comparisons[0]  # type: ignore[attr-defined]
    assert row.quantity.startswith("tracked peak")
    # The estimate traces the step on fake tensors; the measurement runs it for real. The storage
    # accounting is the same, so they agree to the byte on this model.
    assert row.measured == measured.tracked_peak_bytes
    assert abs(row.error) < 0.01
    assert m.estimated["host"]["tensor_peak_bytes"] == row.estimated  # type: ignore[attr-defined]


def test_components_add_up(tiny_run: object) -> None:
    measured = tiny_run.measured  # type: ignore[attr-defined]
    assert sum(measured.tracked_components.values()) == measured.tracked_peak_bytes
    assert measured.tracked_components["parameters"] > 0


def test_cli_json_has_measured_and_estimated(tiny_gpt2: str, capsys: pytest.CaptureFixture[str],
                                              tmp_path: Path) -> None:
    store = tmp_path / "m.sqlite3"
    code = main(["measure", tiny_gpt2, "--mode", "infer", "--batch-size", "2", "--seq-len", "16",
                 "--steps", "1", "--warmup", "0", "--store", str(store), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["measured"]["device"] == "cpu"
    assert out["measured"]["tracked_peak_bytes"] == out["estimated"]["host"]["tensor_peak_bytes"]
    assert out["estimated"]["peak_allocated_bytes"] > 0  # the GPU estimate itself is there too
    assert out["store"]["path"] == str(store)
    with Store(store) as s:
        (row,) = list(s.records())
    assert row.id == out["store"]["id"] and row.workload["mode"] == "infer"
    assert row.environment["device"] == "cpu" and row.torch_version == out["environment"]["torch_version"]


def test_cli_text_prints_both_columns(tiny_gpt2: str, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["measure", tiny_gpt2, "--mode", "generate", "--batch-size", "1", "--seq-len", "8",
                 "--new-tokens", "3", "--steps", "1", "--warmup", "0", "--no-store"])
    text = capsys.readouterr().out
    assert code == 0
    header = next(line for line in text.splitlines() if line.startswith("quantity"))
    assert header.split() == ["quantity", "estimated", "measured", "error"]
    assert "tracked peak (host semantics)" in text and "stored as" not in text


@pytest.mark.parametrize(("argv", "needle"), [
    (["--steps", "0"], "--steps 0 is out of range"),
    (["--warmup", "0"], "--warmup 0 is out of range: allowed 1..1000"),
    (["--layout", "dpp", "--nproc", "2"], "unknown layout 'dpp'; did you mean ddp"),
    (["--nproc", "2"], "--nproc 2 needs --layout (allowed: ddp, fsdp, zero1, zero2, zero3)"),
    (["--layout", "ddp"], "--nproc 1 is out of range for --layout ddp"),
    (["--layout", "ddp", "--nproc", "4096"], "--nproc 4096 is more than the"),
    (["--layout", "ddp", "--nproc", "2", "--mode", "infer"], "use --mode train"),
    (["--layout", "zero1", "--nproc", "2", "--optimizer", "adafactor"], "--optimizer adafactor is not one"),
])
def test_bad_input_is_one_line(tiny_gpt2: str, capsys: pytest.CaptureFixture[str], argv: list[str],
                               needle: str) -> None:
    code = main(["measure", tiny_gpt2, "--no-store", *argv])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert needle in err


def test_nproc_above_cpu_count_names_the_limit(tiny_gpt2: str, capsys: pytest.CaptureFixture[str]) -> None:
    import os

    n = (os.cpu_count() or 1) + 1
    code = main(["measure", tiny_gpt2, "--no-store", "--layout", "fsdp", "--nproc", str(n)])
    err = capsys.readouterr().err
    assert code == 2
    assert f"--nproc {n} is more than the {n - 1} CPU cores" in err


def test_zero3_without_deepspeed_refuses(tiny_gpt2: str, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "deepspeed" else real(name, *a))
    code = main(["measure", tiny_gpt2, "--no-store", "--layout", "zero3", "--nproc", "2"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "DeepSpeed is not installed" in err


def test_refuses_what_would_not_fit_the_host(tiny_gpt2: str, capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuplan.measure.local as local

    monkeypatch.setattr(local, "host_available_bytes", lambda: 1024)  # a host with 1 KiB to spare
    code = main(["measure", tiny_gpt2, "--no-store", "--batch-size", "2", "--seq-len", "16"])
    err = capsys.readouterr().err
    assert code == 1
    assert "use a smaller workload or --force" in err and len(err.strip().splitlines()) == 1


_DATA_DEPENDENT = '''
import torch
from torch import nn


class Branchy(nn.Module):
    """Reads a tensor value in forward: fine for real, untraceable on fake tensors."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        if x.abs().sum().item() > 1e9:
            x = x * 2
        return self.lin(x)


def make():
    return Branchy()
'''


def test_estimate_failure_refuses_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    factory = tmp_path / "branchy.py"
    factory.write_text(_DATA_DEPENDENT)
    spec = f"{factory}:make"
    assert main(["measure", spec, "--no-store", "--steps", "1", "--warmup", "1"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--force measures without an estimate" in err
    assert main(["measure", spec, "--no-store", "--steps", "1", "--warmup", "1", "--force", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert "error" in out["estimated"] and out["measured"]["tracked_peak_bytes"] > 0
    assert out["comparison"][0]["estimated"] is None
