"""fit / recommend command lines: JSON contract, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpuplan.hardware
from gpuplan.cli.main import main
from tests.advise.conftest import shrunk

CNN = "tests/fixtures/tiny_models.py:small_cnn"


def _one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_unknown_gpu_suggests(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "gpt2", "--gpu", "H100-SMX"]) == 2
    err = _one_line_error(capsys)
    assert "H100-SMX" in err and "did you mean H100-SXM" in err


def test_ambiguous_gpu_lists_matches(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", "gpt2", "--gpu", "A100"]) == 2
    err = _one_line_error(capsys)
    assert "ambiguous" in err and "A100-80GB-SXM" in err


def test_malformed_price_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text("H100-SXM: [1.0\n")
    assert main(["recommend", "gpt2", "--prices", str(bad)]) == 2
    err = _one_line_error(capsys)
    assert "prices.yaml" in err and "not valid YAML" in err


def test_price_file_unknown_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "prices.json"
    bad.write_text('{"H100-SMX": 2.5}')
    assert main(["recommend", "gpt2", "--prices", str(bad)]) == 2
    assert "did you mean H100-SXM" in _one_line_error(capsys)


def test_bad_numbers_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:  # argparse: one line, exit 2
        main(["recommend", "gpt2", "--budget-usd", "-3"])
    assert info.value.code == 2
    assert "expected a positive amount, got '-3'" in _one_line_error(capsys)
    assert main(["fit", "gpt2", "--gpu", "L4", "--target-batch-size", "0"]) == 2
    assert "target-batch-size 0" in _one_line_error(capsys)


def test_recommend_nothing_fits_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["recommend", CNN, "--batch-size", "1000000", "--image-size", "64", "--max-gpus", "1", "--json"])
    assert code == 1
    captured = capsys.readouterr()
    data = json.loads(captured.out)
    assert data["recommendations"] == [] and data["largest_gpu"]
    assert f"largest GPU, {data['largest_gpu']}" in captured.err and "needs" in captured.err


def test_fit_nothing_fits_exit_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    tiny = shrunk("L4", 300)  # below the CUDA context alone
    monkeypatch.setattr(gpuplan.hardware, "get_gpu", lambda name: tiny)
    code = main(
        [
            "fit",
            CNN,
            "--gpu",
            "L4",
            "--precision",
            "amp-bf16",
            "--optimizer",
            "sgd",
            "--checkpointing",
            "full",
            "--image-size",
            "32",
            "--json",
        ]
    )
    assert code == 1
    data = json.loads(capsys.readouterr().out)
    assert data["max_batch_size"] == 0 and data["target_fits"] is False
    assert data["largest_gpu"] and data["needed_bytes"] > tiny.usable_memory_bytes


def test_fit_json_contract(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    small = shrunk("L4", 900)
    monkeypatch.setattr(gpuplan.hardware, "get_gpu", lambda name: small)
    assert main(["fit", CNN, "--gpu", "L4", "--image-size", "128", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("max_batch_size", "techniques", "peak_allocated_bytes"):  # DESIGN.md fit contract
        assert key in data
    assert data["max_batch"]["fits"] and not data["max_batch_plus_one"]["fits"]
    assert data["max_batch_plus_one"]["batch_size"] == data["max_batch_size"] + 1
