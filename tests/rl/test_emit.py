"""``gpuplan rl --emit trl|verl|openrlhf``: the emitted configurations use only settings the frameworks have,
carry the step gpuplan sized (same batch, lengths, GPUs, engine share, offload), and refuse in one line what a
framework cannot express.

Two tiers:
- always: every emitted key/flag is checked against the lists extracted from the frameworks' own source
  (tests/rl/data/framework_keys.json, written by tests/rl/extract_framework_keys.py; versions and file hashes
  inside), and TRL's ``accelerate launch`` line is parsed by accelerate's own parser (gpuplan's engines extra);
- slow, where ``.venv-rlcfg`` exists at the repository root, the frameworks' own loaders parse the output
  (tests/rl/framework_parse.py): TRL's TrlParser, verl's Hydra compose + validate_config, OpenRLHF's
  train_ppo_ray argument block. Make it with
  ``python -m venv .venv-rlcfg && .venv-rlcfg/bin/pip install trl==1.16.0 hydra-core ray torchdata pillow
  "tensordict>=0.8,<=0.10,!=0.9.0" codetiming pylatexenc && .venv-rlcfg/bin/pip install --no-deps verl==0.9.1
  openrlhf==0.11.2`` (5 min here; torch comes with trl).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuplan.errors import ConfigError
from gpuplan.rl.emit import FRAMEWORKS, SOURCES, emit_config, openrlhf_args, refusal, trl_config, verl_overrides
from gpuplan.rl.settings import RLSettings
from tests.rl.framework_parse import commands

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent
KEYS = json.loads((HERE / "data" / "framework_keys.json").read_text())
FRAMEWORK_PYTHON = REPO / ".venv-rlcfg" / "bin" / "python"

BASE: dict[str, Any] = dict(
    model="qwen2.5-0.5b",
    gpu="H100-SXM",
    gpus=8,
    prompts_per_step=64,
    samples_per_prompt=8,
    prompt_len=512,
    response_len=1024,
    train_global_batch=128,
    train_micro_batch=4,
)
CASES: dict[str, dict[str, Any]] = {
    "grpo": {},
    "grpo-lora-offload": dict(
        peft="lora", lora_rank=32, lora_alpha=32, offload=frozenset({"optimizer"}), rollout_enforce_eager=True
    ),
    "grpo-ref-offload": dict(offload=frozenset({"ref"}), checkpointing="none", precision="amp-bf16"),
    "grpo-1gpu-qlora": dict(gpus=1, peft="qlora", lora_targets=("all-linear",), train_global_batch=64),
    "dapo-split": dict(
        algorithm="dapo",
        placement="split",
        rollout_gpus=4,
        rollout_tp=2,
        samples_per_prompt=16,
        train_global_batch=256,
        rollout_memory_utilization=0.85,
        rollout_enforce_eager=True,
    ),
    "ppo-2nodes": dict(
        algorithm="ppo",
        gpus=16,
        nodes=2,
        samples_per_prompt=1,
        train_global_batch=64,
        reward_model="qwen2.5-0.5b",
        offload=frozenset({"params", "optimizer", "ref"}),
    ),
    "dpo": dict(algorithm="dpo", samples_per_prompt=None, train_global_batch=32, ref=True),
}


def settings(name: str) -> RLSettings:
    return RLSettings(**{**BASE, **CASES[name]})


def emitted(name: str) -> dict[str, str]:
    """Every framework's text for the case (the refused ones left out, checked by test_refusals)."""
    s = settings(name)
    return {f: emit_config(s, None, f) for f in FRAMEWORKS if refusal(s, f) is None}


def test_every_case_is_emitted_by_some_framework_and_refusals_are_one_line() -> None:
    for name in CASES:
        s = settings(name)
        texts = emitted(name)
        assert texts, name
        for f in set(FRAMEWORKS) - set(texts):
            with pytest.raises(ConfigError) as err:
                emit_config(s, None, f)
            line = str(err.value)
            assert "\n" not in line and line.startswith(f"--emit {f} cannot express it: "), line
            assert all(f"--emit {g}" in line for g in texts), line  # names the frameworks that can


def test_refusals() -> None:
    cases: list[tuple[dict[str, Any], str, str]] = [
        (
            dict(algorithm="ppo", samples_per_prompt=1, train_global_batch=64),
            "trl",
            "PPOTrainer generates with transformers",
        ),
        (dict(algorithm="dpo", samples_per_prompt=None, train_global_batch=32), "verl", "no offline DPO"),
        (dict(placement="split", rollout_gpus=4), "verl", "hybrid engine only"),
        (dict(rollout_engine="sglang"), "trl", "vLLM only"),
        (dict(offload=frozenset({"params"})), "openrlhf", "not the policy's parameters"),
        (dict(train_global_batch=64, samples_per_prompt=3), "verl", "not a multiple of 3"),
        (dict(checkpointing="selective"), "verl", "whole decoder layers"),
        (dict(precision="fp32"), "verl", "trains in amp-bf16"),
    ]
    for change, framework, why in cases:
        s = RLSettings(**{**BASE, **change})
        with pytest.raises(ConfigError, match=why):
            emit_config(s, None, framework)
    with pytest.raises(ConfigError, match=r"unknown --emit 'deepspeed' \(allowed: trl, verl, openrlhf\)"):
        emit_config(settings("grpo"), None, "deepspeed")


# ------------------------------------------------------------------------------- names and arithmetic
@pytest.mark.parametrize("name", sorted(CASES))
def test_trl_names_and_batch(name: str) -> None:
    s = settings(name)
    if refusal(s, "trl") is not None:
        pytest.skip(refusal(s, "trl"))
    text = emit_config(s, None, "trl")
    kind = "DPOConfig" if s.algorithm == "dpo" else "GRPOConfig"
    cfg = yaml.safe_load(text.split(".yaml ---\n", 1)[1].split("# --- launch ---", 1)[0])
    assert cfg == trl_config(s)
    unknown = set(cfg) - set(KEYS["trl"][kind]) - set(KEYS["trl"]["ModelConfig"])
    assert not unknown, (unknown, KEYS["trl"]["source"])
    launch = commands(text.split("# --- launch ---\n", 1)[1])
    acc = _accelerate(next(a for a in launch if a[:2] == ["accelerate", "launch"]))
    assert acc.num_processes == s.trainer_gpus
    # one optimizer step = micro-batch x processes x accumulation sequences (DPO counts pairs)
    per_step = cfg["per_device_train_batch_size"] * acc.num_processes * cfg["gradient_accumulation_steps"]
    assert per_step * (2 if s.algorithm == "dpo" else 1) == s.global_batch
    if s.algorithm != "dpo":
        assert cfg["generation_batch_size"] == s.prompts_per_step * s.samples
        assert cfg["num_generations"] == s.samples and cfg["max_completion_length"] == s.longest_response
        assert (cfg["beta"] > 0) == bool(s.ref)  # GRPOTrainer loads the reference only when beta > 0
    offload = {"params": acc.offload_param_device == "cpu", "optimizer": acc.offload_optimizer_device == "cpu"}
    assert {k for k, on in offload.items() if on} == s.offload - {"ref"}
    if s.placement == "split":
        server = next(a for a in launch if a[:2] == ["trl", "vllm-serve"])
        flags = {a.lstrip("-") for a in server if a.startswith("--")}
        assert flags <= set(KEYS["trl"]["vllm_serve"]), flags - set(KEYS["trl"]["vllm_serve"])
        tp, dp = int(_flag(server, "--tensor_parallel_size")), int(_flag(server, "--data_parallel_size"))
        assert (tp, tp * dp) == (s.rollout_tp, s.engine_gpus)
        assert float(_flag(server, "--gpu_memory_utilization")) == s.utilization
        assert ("enforce_eager" in flags) == s.rollout_enforce_eager
    elif s.algorithm != "dpo":
        assert cfg["vllm_gpu_memory_utilization"] == s.utilization
        # GRPOConfig has no enforce_eager: the colocated engine's graphs are said in a note, not dropped silently
        assert ("no enforce_eager setting" in text) == s.rollout_enforce_eager


@pytest.mark.parametrize("name", sorted(CASES))
def test_verl_names_types_and_batch(name: str) -> None:
    s = settings(name)
    if refusal(s, "verl") is not None:
        pytest.skip(refusal(s, "verl"))
    (argv,) = commands(emit_config(s, None, "verl"))
    assert argv[:3] == ["python3", "-m", "verl.trainer.main_ppo"]
    overrides = dict(a.split("=", 1) for a in argv[3:])
    keys: dict[str, Any] = KEYS["verl"]["keys"]
    unknown = set(overrides) - set(keys)
    assert not unknown, (unknown, KEYS["verl"]["source"])
    for key, value in verl_overrides(s).items():
        default = keys[key]
        if isinstance(default, bool):
            assert isinstance(value, bool), key
        elif isinstance(default, int | float):  # numbers stay numbers (an int where the default is a float)
            assert isinstance(value, int | float) and not isinstance(value, bool), key
    o = verl_overrides(s)
    # verl multiplies ppo_mini_batch_size (prompts) by rollout.n; trainer GPUs = n_gpus_per_node x nnodes
    assert o["actor_rollout_ref.actor.ppo_mini_batch_size"] * o["actor_rollout_ref.rollout.n"] == s.global_batch
    assert o["trainer.n_gpus_per_node"] * o["trainer.nnodes"] == s.gpus
    assert o["data.train_batch_size"] * o["actor_rollout_ref.rollout.n"] == s.sequences_per_step
    assert o["actor_rollout_ref.rollout.enforce_eager"] is s.rollout_enforce_eager


@pytest.mark.parametrize("name", sorted(CASES))
def test_openrlhf_flags_and_batch(name: str) -> None:
    s = settings(name)
    if refusal(s, "openrlhf") is not None:
        pytest.skip(refusal(s, "openrlhf"))
    (argv,) = commands(emit_config(s, None, "openrlhf"))
    assert argv[:3] == ["python3", "-m", "openrlhf.cli.train_ppo_ray"]
    flags: dict[str, dict[str, Any]] = KEYS["openrlhf"]["flags"]
    i, seen = 3, {}
    while i < len(argv):  # walk the command as argparse would: a switch takes no value, nargs N takes N
        flag = argv[i]
        assert flag in flags, (flag, KEYS["openrlhf"]["source"])
        spec = flags[flag]
        width = 0 if spec["switch"] else spec["nargs"] if isinstance(spec["nargs"], int) else 1
        if spec["nargs"] in ("*", "+"):
            width = next((j for j, a in enumerate(argv[i + 1 :]) if a.startswith("--")), len(argv) - i - 1)
        seen[flag] = argv[i + 1 : i + 1 + width]
        i += 1 + width
    assert int(seen["--train.batch_size"][0]) == s.global_batch
    assert int(seen["--rollout.batch_size"][0]) * int(seen["--rollout.n_samples_per_prompt"][0]) == s.sequences_per_step
    assert int(seen["--vllm.num_engines"][0]) * int(seen["--vllm.tensor_parallel_size"][0]) == s.engine_gpus
    assert ("--train.colocate_all" in seen) == (s.placement == "colocate")
    assert ("--vllm.enforce_eager" in seen) == s.rollout_enforce_eager
    assert (
        dict(openrlhf_args(s))["--actor.num_gpus_per_node"] * dict(openrlhf_args(s))["--actor.num_nodes"]
        == s.trainer_gpus
    )


def _flag(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def _accelerate(argv: list[str]) -> Any:
    from accelerate.commands.launch import launch_command_parser

    return launch_command_parser().parse_args(argv[2:])


# ------------------------------------------------------------------------ the frameworks' own loaders
@pytest.mark.slow
@pytest.mark.skipif(not FRAMEWORK_PYTHON.exists(), reason="no .venv-rlcfg with trl, verl, openrlhf (module doc)")
def test_frameworks_load_what_is_emitted() -> None:
    names = sorted(CASES)
    done = subprocess.run(
        [str(FRAMEWORK_PYTHON), str(HERE / "framework_parse.py"), json.dumps([emitted(n) for n in names])],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for name, parsed in zip(names, json.loads(done.stdout.splitlines()[-1]), strict=True):
        _check_loaded(settings(name), parsed)


def _check_loaded(s: RLSettings, parsed: dict[str, Any]) -> None:
    for framework, got in parsed.items():
        assert "error" not in got, (framework, got)
    if "trl" in parsed:
        cfg, model = parsed["trl"]["config"], parsed["trl"]["model"]
        assert cfg["gradient_accumulation_steps"] == s.grad_accum
        assert model["use_peft"] == (s.peft != "none") and model["load_in_4bit"] == (s.peft == "qlora")
        if s.algorithm != "dpo":
            # TRL's own __post_init__ resolved the generation batch it will roll out per step
            assert cfg["generation_batch_size"] == s.sequences_per_step and cfg["num_generations"] == s.samples
            assert cfg["vllm_mode"] == ("colocate" if s.placement == "colocate" else "server")
        if s.lora_targets == ("all-linear",):
            assert model["lora_target_modules"] == "all-linear"  # the string PEFT expands
    if "verl" in parsed:
        got = parsed["verl"]
        assert got["use_reference_policy"] == bool(s.ref) and got["use_critic"] == (s.critic is not None)
        for key, value in verl_overrides(s).items():
            assert key in got["swapped"] or got["overrides"][key] == value, key
    if "openrlhf" in parsed:
        args = parsed["openrlhf"]["args"]
        assert args["rollout"]["batch_size"] == s.prompts_per_step
        assert args["vllm"]["enable_sleep"] == (s.placement == "colocate")  # OpenRLHF keeps it when colocated
        assert args["ref"]["offload"] == ("ref" in s.offload)
        assert args["ds"]["adam_offload"] == ("optimizer" in s.offload)


# ------------------------------------------------------------------------------------ through the CLI
@pytest.mark.slow  # three sizings of the tiny GPT-2 (~30 s)
def test_every_emit_value_through_the_cli(tiny_gpt2: str) -> None:
    """``gpuplan rl ... --emit X``: the JSON ``command`` is the emitter's text for the flags' settings, headed by
    the answer; a framework that cannot express the step is one line, exit 2, before the step is sized."""
    import argparse
    import contextlib
    import io

    from gpuplan.cli.main import main
    from gpuplan.cli.rl import add_parser, settings_from_args
    from tests.rl.test_cli import BASE

    argv = [tiny_gpt2, *BASE, "--peft", "lora", "--offload", "optimizer"]
    parser = argparse.ArgumentParser()
    add_parser(parser)
    s = settings_from_args(parser.parse_args(argv))
    for framework in FRAMEWORKS:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["rl", *argv, "--emit", framework, "--json"])
        data = json.loads(out.getvalue())
        assert code == (0 if data["fits"] else 1)
        head, _, body = data["command"].partition("\n# gpuplan rl: ")
        assert head == f"# {framework}: {SOURCES[framework]}"
        assert body.startswith(("fits; ", "does NOT fit; "))
        assert data["command"].endswith(emit_config(s, None, framework).partition("\n")[2])
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["rl", *argv, "--placement", "split", "--rollout-gpus", "1", "--emit", "verl"])
    assert code == 2
    (line,) = err.getvalue().strip().splitlines()
    assert "--emit verl cannot express it: verl's main_ppo runs the hybrid engine only" in line
