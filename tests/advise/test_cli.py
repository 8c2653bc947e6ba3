"""fit / recommend command lines: JSON contract, exit codes, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import gpuplan.hardware
from gpuplan.cli.main import main
from tests.advise.conftest import AffineStep, shrunk

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
    assert "expected a positive, finite number (an amount of US dollars), got '-3'" in _one_line_error(capsys)
    assert main(["fit", "gpt2", "--gpu", "L4", "--target-batch-size", "0"]) == 2
    assert "target-batch-size 0" in _one_line_error(capsys)


@pytest.mark.slow
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
    captured = capsys.readouterr()
    data = json.loads(captured.out)  # stdout: the one JSON object; the reason: one line on stderr
    assert data["max_batch_size"] == 0 and data["target_fits"] is False
    assert data["largest_gpu"] and data["needed_bytes"] > tiny.usable_memory_bytes
    err = captured.err.strip()
    assert (
        "\n" not in err and "does not fit" in err and data["largest_gpu"] in err and err.endswith("multi-GPU layouts")
    )
    assert data["reason"] and data["reason"] in err


@pytest.mark.slow
def test_fit_json_contract(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    small = shrunk("L4", 900)
    monkeypatch.setattr(gpuplan.hardware, "get_gpu", lambda name: small)
    assert main(["fit", CNN, "--gpu", "L4", "--image-size", "128", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for key in ("max_batch_size", "techniques", "peak_allocated_bytes"):  # DESIGN.md fit contract
        assert key in data
    assert data["max_batch"]["fits"] and not data["max_batch_plus_one"]["fits"]
    assert data["max_batch_plus_one"]["batch_size"] == data["max_batch_size"] + 1


# ---- fit: every flag value end to end on a tiny model (issue 9) --------------------------------------

MLP = "tests/fixtures/tiny_models.py:mlp"


@pytest.fixture(scope="module")
def tiny_gpt2_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.fixtures.tiny_models import TINY_GPT2

    path = tmp_path_factory.mktemp("tiny-gpt2") / "config.json"
    path.write_text(json.dumps({"architectures": ["GPT2LMHeadModel"], **TINY_GPT2}))
    return str(path)


def _fit_cases() -> list[tuple[str, list[str]]]:
    """(model, flags) covering every value of every flag ``gpuplan fit`` takes."""
    from gpuplan.workload import ATTENTIONS, CHECKPOINTING, LOSSES, OPTIMIZER_IMPLS, OPTIMIZERS, PRECISIONS, ZERO_GRADS

    cases: list[tuple[str, list[str]]] = [
        (MLP, ["--mode", "train"]),
        (MLP, ["--mode", "infer"]),
        ("GPT2", ["--mode", "generate", "--new-tokens", "4", "--seq-len", "32"]),
        (MLP, ["--batch-size", "4"]),
        (MLP, ["--grad-accum", "4"]),
        (CNN, ["--image-size", "32"]),
        (MLP, ["--target-batch-size", "64"]),
        (MLP, ["--target-batch-size", "64", "--exact-batch"]),
    ]
    # the block-scaled recipes need Blackwell (the last --gpu wins over the test's L4)
    cases += [(MLP, ["--precision", p, *(["--gpu", "B200"] if p in ("mxfp8", "nvfp4") else [])]) for p in PRECISIONS]
    cases += [(MLP, ["--optimizer", o]) for o in OPTIMIZERS]
    cases += [("GPT2", ["--checkpointing", c, "--seq-len", "32"]) for c in CHECKPOINTING]
    # flash attention runs in half precision only (as on CUDA)
    cases += [("GPT2", ["--attention", a, "--seq-len", "32", "--precision", "amp-bf16"]) for a in ATTENTIONS]
    cases += [(MLP, ["--optimizer-impl", i]) for i in OPTIMIZER_IMPLS]
    cases += [(MLP, ["--zero-grad", z]) for z in ZERO_GRADS]
    # cross entropy needs labels the model defines: a language model's next tokens (chunked-ce, fused-linear-ce:
    # its LM head)
    cases += [("GPT2" if loss in ("cross-entropy", "chunked-ce", "fused-linear-ce") else MLP, ["--loss", loss])
              for loss in LOSSES]
    return cases


@pytest.mark.slow
@pytest.mark.parametrize(("model", "flags"), _fit_cases(), ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_fit_every_flag_value_end_to_end(
    model: str, flags: list[str], tiny_gpt2_config: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["fit", tiny_gpt2_config if model == "GPT2" else model, "--gpu", "L4", *flags, "--json"]
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.err
    data = json.loads(captured.out)  # exactly one JSON object on stdout
    assert data["max_batch_size"] >= 1 and data["max_batch"]["fits"]
    if "--target-batch-size" in flags:
        assert data["target_fits"] and data["effective_batch_size"] >= 64
        assert data["exact_batch"] == ("--exact-batch" in flags)


@pytest.mark.slow
def test_fit_text_output(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", MLP, "--gpu", "L4", "--target-batch-size", "64"]) == 0
    out = capsys.readouterr().out
    assert "largest batch that fits" in out and "answer: fits as given" in out


def test_exact_batch_needs_a_target(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", MLP, "--gpu", "L4", "--exact-batch"]) == 2
    err = _one_line_error(capsys)
    assert "--exact-batch" in err and "--target-batch-size" in err


def test_fit_accumulation_through_the_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """``--target-batch-size`` far past the largest micro-batch: accumulation, in one JSON object."""
    import gpuplan.estimate

    stub = AffineStep(gpuplan.hardware.get_gpu("L4"))
    monkeypatch.setattr(gpuplan.estimate, "estimate", stub)
    base = ["fit", MLP, "--gpu", "L4", "--precision", "amp-bf16", "--optimizer", "sgd", "--checkpointing", "full"]
    assert main([*base, "--target-batch-size", "100000", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    last = data["techniques"][-1]
    assert last["technique"] == "grad-accumulation" and last["fits"]
    assert last["batch_size"] <= stub.b2 and data["effective_batch_size"] >= 100000
    assert data["traces"] <= 40
