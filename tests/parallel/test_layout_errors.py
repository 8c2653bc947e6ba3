"""Layouts that cannot exist: one line with the failing arithmetic, exit 2 (no trace is run)."""

from __future__ import annotations

import pytest

from gpuplan.cli.main import main
from gpuplan.errors import LayoutError
from gpuplan.parallel.layout import check_batch, check_degrees, check_model


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    err = capsys.readouterr().err.strip()
    return code, err


def test_product_not_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", "--dp", "2", "--tp", "4", "--pp", "2")
    assert code == 2
    assert "dp(2)·tp(4)·pp(2) = 16 ≠ 8 GPUs" in err
    assert len(err.splitlines()) == 1


def test_tp_not_dividing_heads(capsys: pytest.CaptureFixture[str]) -> None:
    # gpt2 has 12 heads (its config.json: n_head 12)
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", "--tp", "8")
    assert code == 2 and "tp(8) does not divide the 12 attention heads (12 mod 8 = 4)" in err


def test_pp_above_layers(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "16", "--gpu", "H100-SXM", "--pp", "16")
    assert code == 2 and "pp(16) > 12 layers" in err


def test_global_batch_not_divisible(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(
        capsys,
        "plan",
        "gpt2",
        "--gpus",
        "8",
        "--gpu",
        "H100-SXM",
        "--dp",
        "8",
        "--micro-batch-size",
        "2",
        "--global-batch-size",
        "20",
    )
    assert code == 2 and "global batch 20 is not divisible by dp(8)·micro-batch(2) = 16 (20 mod 16 = 4)" in err


def test_partial_degrees_not_dividing(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", "--tp", "3")
    assert code == 2 and "tp(3) = 3 does not divide 8 GPUs" in err


def test_zero3_with_pipeline_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", "--pp", "2", "--zero", "3")
    assert code == 2 and "ZeRO-3 with pp(2)" in err


def test_nodes_not_dividing(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "12", "--gpu", "H100-SXM", "--nodes", "5")
    assert code == 2 and "12 GPUs do not split evenly over 5 nodes" in err


def test_unknown_emit(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", "--emit", "slurm")
    assert code == 2 and "invalid choice: 'slurm'" in err


def test_library_errors_are_layout_errors() -> None:
    with pytest.raises(LayoutError, match=r"dp\(3\)·tp\(2\)·pp\(1\) = 6 ≠ 8 GPUs"):
        check_degrees(8, 3, 2, 1)
    # 80 layers on pp 3 run as uneven stages (26/27/27); the interleaved schedule needs equal chunks
    check_model(1, 3, heads=64, kv_heads=8, layers=80)
    with pytest.raises(LayoutError, match="80 layers do not split into pp"):
        check_model(1, 3, heads=64, kv_heads=8, layers=80, virtual_stages=2)
    with pytest.raises(LayoutError, match="key/value heads"):
        check_model(16, 1, heads=64, kv_heads=6, layers=80)
    assert check_batch(512, 32, 4) == 4


def test_inference_mode_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", "--mode", "infer")
    assert code == 2 and "gpuplan plan covers training (--mode train), got --mode infer" in err


def test_megatron_with_zero_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "gpt2", "--gpus", "8", "--gpu", "H100-SXM", "--megatron", "--zero", "1")
    assert code == 2 and "not allowed with argument" in err


def test_tp_on_a_cnn_refused(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _cli(capsys, "plan", "resnet50", "--gpus", "8", "--gpu", "H100-SXM", "--tp", "2")
    assert code == 2 and "tp(2) needs a transformer to split" in err
