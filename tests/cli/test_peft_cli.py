"""The PEFT flags on the command line: every traced verb takes them (one definition in
cli/_workload.py), the --json workload echoes them, and bad values are one line with exit 2."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli.main import main
from tests.fixtures.tiny_models import TINY_LLAMA

Capture = pytest.CaptureFixture[str]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("models") / "tiny-llama.json"
    path.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], **TINY_LLAMA}))
    return str(path)


def _usage_line(capsys: Capture, argv: list[str], *needles: str) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own type errors exit from parse_args
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err


@pytest.mark.slow
def test_estimate_json_echoes_the_peft_setup(tiny_llama: str, capsys: Capture) -> None:
    base = ["estimate", tiny_llama, "--batch-size", "2", "--seq-len", "32", "--gpu", "RTX-4090", "--json"]
    assert main([*base, "--peft", "lora", "--lora-rank", "4", "--lora-alpha", "16", "--lora-dropout", "0.05",
                 "--lora-targets", "q_proj,v_proj", "--train-modules", "lm_head"]) == 0
    lora = json.loads(capsys.readouterr().out)
    w = lora["workload"]
    assert (w["peft"], w["lora_rank"], w["lora_alpha"], w["lora_dropout"]) == ("lora", 4, 16.0, 0.05)
    assert (w["lora_targets"], w["train_modules"]) == (["q_proj", "v_proj"], ["lm_head"])
    # 5 blocks × r·(in+out) on q_proj (64→64) and v_proj (64→32), plus lm_head's trained copy (300×64)
    trainable = 5 * 4 * ((64 + 64) + (64 + 32)) + 300 * 64
    assert any(f"{trainable:,} trainable parameters" in a for a in lora["assumptions"]), lora["assumptions"]
    assert main(base) == 0
    full = json.loads(capsys.readouterr().out)
    assert full["workload"]["peft"] == "none"
    # optimizer state for the trainable parameters only: AdamW's two fp32 moments (+ step counters)
    assert 8 * trainable <= lora["components"]["optimizer_state"] < full["components"]["optimizer_state"]


@pytest.mark.parametrize(("flags", "needles"), [
    (["--peft", "lora", "--lora-rank", "0"], ["LoRA rank 0 is out of range"]),
    (["--peft", "lora", "--lora-dropout", "1"], ["LoRA dropout 1.0 is out of range"]),
    (["--peft", "adapter"], ["unknown PEFT method 'adapter'", "lora"]),
    (["--lora-rank", "16"], ["--lora-rank configures PEFT adapters", "--peft lora"]),
    (["--peft", "lora", "--lora-targets", "q_proj,,v_proj"], ["expected comma-separated module names"]),
    (["--peft", "lora", "--lora-targets", "qkv"],
     ["--lora-targets qkv matches no linear module", "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"]),
    (["--peft", "qlora", "--gpu", "T4"], ["--peft qlora computes in bfloat16, which T4 lacks"]),
])
def test_bad_peft_flags_are_one_line_exit_2(tiny_llama: str, capsys: Capture, flags: list[str],
                                            needles: list[str]) -> None:
    _usage_line(capsys, ["estimate", tiny_llama, "--seq-len", "16", *flags], *needles)


def test_fit_seq_len_axis_json(tiny_llama: str, capsys: Capture, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI wiring of --axis seq-len, on a stand-in estimate exactly linear in the sequence
    (tests/advise/test_fit_finetune.py runs the search on real traces)."""
    import gpuplan.estimate
    from gpuplan.hardware import get_gpu
    from tests.advise.test_fit_finetune import LinearInSeq

    monkeypatch.setattr(gpuplan.estimate, "estimate", LinearInSeq(get_gpu("T4"), answer_tokens=3000))
    argv = ["fit", tiny_llama, "--gpu", "T4", "--axis", "seq-len", "--peft", "lora", "--batch-size", "2", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["axis"] == "seq-len" and data["max_seq_len"] == 2944  # 46 × 64 ≤ 3000 < 47 × 64
    assert data["max_seq_len_point"]["fits"] and not data["max_seq_len_plus_step"]["fits"]
    assert data["max_seq_len_plus_step"]["seq_len"] == 3008 and data["workload"]["peft"] == "lora"
    assert main(argv[:-1]) == 0
    assert "largest sequence length that fits: 2,944 tokens" in capsys.readouterr().out


def test_fit_seq_len_axis_refuses_batch_only_flags(tiny_llama: str, capsys: Capture) -> None:
    _usage_line(capsys, ["fit", tiny_llama, "--gpu", "T4", "--axis", "seq-len", "--target-batch-size", "8"],
                "--target-batch-size applies to --axis batch")
    _usage_line(capsys, ["fit", tiny_llama, "--gpu", "T4", "--axis", "seq-len", "--seq-len", "128"],
                "drop --seq-len")


@pytest.mark.slow
def test_plan_and_recommend_take_the_peft_flags(tiny_llama: str, capsys: Capture) -> None:
    """FSDP2 + LoRA: gradients and optimizer state only for the adapters (the planner reads the
    traced categories), so they are a small fraction of the parameters' bytes."""
    peft = ["--peft", "lora", "--seq-len", "64", "--batch-size", "2"]
    assert main(["plan", tiny_llama, "--gpu", "H100-SXM5-80GB", "--gpus", "2", "--fsdp", *peft, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["workload"]["peft"] == "lora"
    assert "fsdp2" in plan["layout"]
    rank = plan["ranks"][0]
    # tiny Llama: 232,384 fp32 parameters, 8,960 of them LoRA's (q_proj, v_proj at r=8), halved by 2 ranks
    assert rank["gradients"] < 0.1 * rank["parameters"] and rank["optimizer_state"] < 0.1 * rank["parameters"]
    assert main(["recommend", tiny_llama, *peft, "--max-gpus", "1", "--json"]) in (0, 1)
    rec = json.loads(capsys.readouterr().out)
    assert rec["workload"]["peft"] == "lora"
