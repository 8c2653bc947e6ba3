"""``gpuplan rl`` end to end on the tiny GPT-2 (tests/fixtures): the JSON contract, exit codes, every bad input
one line with exit 2, and every advertised flag value reflected in the answer."""

from __future__ import annotations

import contextlib
import io
import json
from typing import Any

import pytest

from gpuplan.cli.main import main
from gpuplan.rl.result import PHASES
from gpuplan.workload import CHECKPOINTING, PRECISIONS

BASE = [
    "--gpus",
    "2",
    "--gpu",
    "H100-SXM",
    "--prompts-per-step",
    "4",
    "--samples-per-prompt",
    "4",
    "--prompt-len",
    "32",
    "--response-len",
    "32",
    "--max-response-len",
    "64",
    "--rollout-max-num-seqs",
    "16",
    "--rollout-max-num-batched-tokens",
    "256",
]  # a small profile run (fast)
CONTRACT = (
    "fits",
    "reason",
    "step_time_s",
    "step_time_interval_s",
    "tokens_per_s_per_gpu",
    "phases",
    "limiting_phase",
    "command",
    "assumptions",
)


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["rl", *argv])
    return code, out.getvalue(), err.getvalue()


def rl_json(*argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run(*argv, "--json")
    assert code in (0, 1), err[-1000:]
    data = json.loads(out)
    assert isinstance(data, dict)
    return code, data


def test_json_contract(tiny_gpt2: str) -> None:
    code, data = rl_json(tiny_gpt2, *BASE)
    assert code == 0 and data["fits"] is True and data["reason"] is None
    assert set(CONTRACT) <= set(data)
    assert list(data["phases"]) == ["generate", "old_log_prob", "ref_log_prob", "train", "weight_sync"]
    for phase in data["phases"].values():
        assert phase["seconds"] >= 0 and phase["peak_bytes_per_gpu"] == sum(phase["parts_bytes"].values())
    assert data["step_time_s"] == pytest.approx(sum(p["seconds"] for p in data["phases"].values()))
    low, high = data["step_time_interval_s"]
    assert low <= data["step_time_s"] <= high
    tokens = 4 * 4 * (32 + 32)
    assert data["tokens_per_s_per_gpu"] == pytest.approx(tokens / data["step_time_s"] / 2)
    assert data["limiting_phase"] == max(data["phases"], key=lambda n: data["phases"][n]["peak_bytes_per_gpu"])
    assert data["command"] is None


def test_text_output(tiny_gpt2: str) -> None:
    code, out, _ = run(tiny_gpt2, *BASE)
    assert code == 0 and "GRPO on" in out and "FITS" in out and "generation (rollout)" in out


def test_an_engine_that_would_not_start_is_exit_1_with_its_reason(tiny_gpt2: str) -> None:
    code, data = rl_json(tiny_gpt2, *BASE, "--rollout-memory-utilization", "1")
    assert code == 1 and data["fits"] is False
    assert data["reason"].startswith("the vllm rollout engine does not start: ")
    assert "--rollout-memory-utilization" in data["reason"] and "--gpu-memory-utilization" not in data["reason"]


@pytest.mark.slow  # gpt2 traced for training, two forwards and the engine's profile run (~25 s)
def test_a_trainer_phase_that_does_not_fit_is_exit_1_and_limits_the_step() -> None:
    code, data = rl_json(
        "gpt2",
        "--gpus",
        "1",
        "--gpu",
        "T4",
        "--prompts-per-step",
        "8",
        "--samples-per-prompt",
        "8",
        "--prompt-len",
        "512",
        "--response-len",
        "512",
        "--train-micro-batch",
        "64",
    )
    assert code == 1 and data["limiting_phase"] == "train"
    assert data["reason"].startswith("train needs ") and data["settings"]["precision"] == "amp-fp16"  # T4: no bf16


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--samples-per-prompt", "1"], "--samples-per-prompt 1 is too few for GRPO"),
        (["--algorithm", "dapo", "--samples-per-prompt", "1"], "too few for DAPO"),
        (["--algorithm", "dpo", "--critic", "gpt2"], "--critic applies to --algorithm ppo only"),
        (
            ["--algorithm", "ppo", "--samples-per-prompt", "1", "--critic", "vit-base-patch16-224"],
            "has no token-classification class",
        ),
        (["--rollout-tp", "3"], "--rollout-tp 3 does not divide the 2 rollout GPUs"),
        (["--rollout-memory-utilization", "0"], "--rollout-memory-utilization 0 is outside (0, 1]"),
        (["--rollout-memory-utilization", "1.5"], "outside (0, 1]"),
        (["--placement", "split"], "--placement split needs --rollout-gpus"),
        (["--placement", "split", "--rollout-gpus", "2"], "--rollout-gpus 2 is out of range"),
        (["--rollout-gpus", "1"], "applies to --placement split"),
        (["--offload", "weights"], "unknown offload 'weights'"),
        (["--no-ref", "--offload", "ref"], "--offload ref needs a reference model"),
        (["--train-global-batch", "5"], "does not divide the 16 sequences"),
        (["--train-global-batch", "4", "--train-micro-batch", "4"], "is not a multiple of --train-micro-batch 4"),
        (["--max-response-len", "16"], "--max-response-len 16 is out of range"),
        (["--precision", "bf17"], "unknown precision 'bf17'"),
        (["--lora-rank", "4"], "--lora-rank configures PEFT adapters"),
        (["--gpus", "3", "--nodes", "2"], "not a multiple of --nodes 2"),
        (["--algorithm", "dpo", "--samples-per-prompt", "3"], "does not apply to DPO"),
        (["--framework", "verl", "--emit", "trl"], "--framework verl conflicts with --emit trl"),
        (["--framework", "deepspeed-chat"], "unknown RL framework 'deepspeed-chat'"),
    ],
)
def test_bad_input_is_one_line_exit_2(tiny_gpt2: str, argv: list[str], message: str) -> None:
    args = list(BASE)
    for flag in argv[::2]:  # the case's own value replaces the base one
        if flag in args and not flag.startswith("--no-"):
            del args[args.index(flag) : args.index(flag) + 2]
    code, out, err = run(tiny_gpt2, *args, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], err


# -- every advertised value, reflected in the answer -----------------------------------------------------------
def _phases(data: dict[str, Any]) -> list[str]:
    return list(data["phases"])


FAST_CASES: list[tuple[list[str], Any]] = [
    (["--algorithm", "ppo"], lambda d: "critic" in _phases(d) and d["settings"]["critic"] is not None),
    (["--algorithm", "dapo", "--samples-per-prompt", "4"], lambda d: "ref_log_prob" not in _phases(d)),
    (
        ["--algorithm", "dpo", "--samples-per-prompt", "2"],
        lambda d: _phases(d) == ["ref_log_prob", "train"] and d["rollout"] is None,
    ),
    (["--algorithm", "grpo"], lambda d: _phases(d)[0] == "generate"),
    (
        ["--placement", "split", "--rollout-gpus", "1", "--gpus", "3"],
        lambda d: d["phases"]["generate"]["gpus"] == "rollout" and d["phases"]["train"]["gpus"] == "trainer",
    ),
    (["--placement", "colocate"], lambda d: d["phases"]["train"]["parts_bytes"]["engine_asleep"] > 0),
    (["--rollout-engine", "sglang"], lambda d: d["rollout"]["engine"]["name"] == "sglang"),
    (["--rollout-engine", "vllm"], lambda d: d["rollout"]["engine"]["name"] == "vllm"),
    (
        ["--rollout-enforce-eager"],
        lambda d: (
            d["rollout"]["engine"]["cuda_graphs"] is False
            and d["rollout"]["engine_command"].endswith("--enforce-eager")
        ),
    ),
    (["--no-ref"], lambda d: "ref_log_prob" not in _phases(d)),
    (["--offload", "params,optimizer"], lambda d: d["phases"]["generate"]["parts_bytes"]["policy"] == 0),
    (["--offload", "ref"], lambda d: "ref" not in d["phases"]["generate"]["parts_bytes"]),
    *(
        (
            ["--framework", fw],
            lambda d, fw=fw, way=way: d["settings"]["framework"] == fw and any(way in a for a in d["assumptions"]),
        )
        for fw, way in (("verl", "verl's way"), ("trl", "TRL's way"), ("openrlhf", "OpenRLHF's way"))
    ),
    (["--emit", "openrlhf"], lambda d: d["settings"]["framework"] == "openrlhf" and d["command"] is not None),
]


@pytest.mark.parametrize("argv, check", FAST_CASES, ids=[" ".join(a) for a, _ in FAST_CASES])
def test_every_rl_flag_value(tiny_gpt2: str, argv: list[str], check: Any) -> None:
    args = list(BASE)
    for flag in argv[::2]:
        if flag in args:
            del args[args.index(flag) : args.index(flag) + 2]
    code, data = rl_json(tiny_gpt2, *args, *argv)
    assert code == 0, data["reason"]
    assert check(data), data


def test_models_flags(tiny_gpt2: str) -> None:
    """--critic, --reward-model, --rollout-tp, --train-global-batch / --train-micro-batch, --ppo-epochs, --nodes."""
    code, data = rl_json(
        tiny_gpt2,
        *BASE,
        "--algorithm",
        "ppo",
        "--critic",
        tiny_gpt2,
        "--reward-model",
        tiny_gpt2,
        "--rollout-tp",
        "2",
        "--train-global-batch",
        "8",
        "--train-micro-batch",
        "2",
        "--ppo-epochs",
        "2",
    )
    assert code == 0
    assert _phases(data) == list(PHASES)
    assert data["rollout"]["engine"]["tensor_parallel_size"] == 2 and data["rollout"]["replicas"] == 1
    s = data["settings"]
    assert (s["train_global_batch"], s["train_micro_batch"], s["ppo_epochs"]) == (8, 2, 2)
    assert any("4 optimizer step(s) per RL step" in a for a in data["assumptions"])  # 16 / 8 × 2 epochs
    code, data = rl_json(tiny_gpt2, "--gpus", "4", "--nodes", "2", *BASE[2:])
    assert code == 0 and data["settings"]["nodes"] == 2


@pytest.mark.slow  # one trace per value (~40 traces of the tiny model)
@pytest.mark.parametrize(
    "flag, values",
    [
        ("--precision", list(PRECISIONS)),
        ("--checkpointing", list(CHECKPOINTING)),
        ("--peft", ["lora", "qlora", "dora"]),
        ("--optimizer", ["adamw", "sgd", "adamw-8bit"]),
    ],
)
def test_every_trainer_flag_value(tiny_gpt2: str, flag: str, values: list[str]) -> None:
    key = flag[2:]
    for value in values:
        # MXFP8 / NVFP4 tensor cores are Blackwell's (hardware/support.py refuses them on Hopper)
        gpu = "B200" if value in ("mxfp8", "nvfp4") else "H100-SXM"
        args = [gpu if a == "H100-SXM" else a for a in BASE]
        code, data = rl_json(tiny_gpt2, *args, flag, value)
        assert code == 0, data["reason"]
        assert data["settings"][key] == value
