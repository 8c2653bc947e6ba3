"""The public RL rows (src/gpuplan/rl/data/public_rl.csv, residuals in docs/accuracy.md by scripts/accuracy_rl.py):
every row sourced and its command valid; the held-out checks of issue 22 as documented residual checks.

The step-time row is checked within a stated tolerance; the fit boundary is a documented miss, pinned with its
cause instead of widened, so that a change to the estimator that moves it is seen (and the doc updated).
"""

from __future__ import annotations

import csv
import re
import shlex
from pathlib import Path

import pytest

from tests.fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
ROWS = list(csv.DictReader((ROOT / "src" / "gpuplan" / "rl" / "data" / "public_rl.csv").open(encoding="utf-8")))
QUANTITIES = ("step_time_s", "tokens_per_s_per_gpu", "fits", "max_context")


def _row(row_id: str) -> dict[str, str]:
    return next(r for r in ROWS if r["id"] == row_id)


def test_every_row_is_sourced_and_every_command_is_valid() -> None:
    import argparse

    from gpuplan.cli.rl import add_parser, settings_from_args

    assert len({r["id"] for r in ROWS}) == len(ROWS) >= 10
    for r in ROWS:
        assert r["quantity"] in QUANTITIES and r["value"], r["id"]
        assert r["reproducible"] in ("true", "partial", "false"), r["id"]
        assert (r["repo"] and re.fullmatch(r"[0-9a-f]{40}", r["commit"])) or r["file"].startswith("https://"), r["id"]
        assert r["framework"] and r["settings"] and r["gpus"].isdigit(), r["id"]
        if r["reproducible"] == "false":
            assert r["reason"], r["id"]  # why gpuplan's flags cannot express the stack
            continue
        argv = shlex.split(r["command"])
        assert argv[:2] == ["gpuplan", "rl"], r["id"]
        parser = argparse.ArgumentParser()
        add_parser(parser)
        s = settings_from_args(parser.parse_args(argv[2:]))  # the settings check every value (ConfigError)
        assert (s.gpus, s.gpu) == (int(r["gpus"]), r["gpu"]), r["id"]


@pytest.mark.slow  # traces Llama-3.1-8B's step (~30 s)
def test_held_out_grpo_step_time_on_16_h100() -> None:
    """NeMo RL v0.5, Llama-3.1-8B-Instruct GRPO on 16 H100 (NVIDIA-NeMo/RL docs/about/performance-summary.md
    @e7c0123d): 92.8 s per step. gpuplan answers 70.1 s (-24%, 2026-12-02; -18% before the log-prob passes were
    traced in bf16 as FSDP mixed precision runs them) with the prompt/response split of the
    published 1,019-token mean assumed (128 + 891) and its FSDP2 trainer in place of NeMo RL's Megatron TP1 PP2.
    Tolerance: 30% either way."""
    got = load_script("accuracy_rl").run_row(_row("nemo-rl-v0.5-llama31-8b-grpo-16xh100-step"))
    assert got["fits"]
    assert abs(got["error"]) <= 0.30, got


@pytest.mark.slow  # traces Qwen2.5-72B's step
def test_held_out_grpo_lora_fit_boundary_on_8_h100() -> None:
    """verl's GRPO-LoRA tuning run, Qwen2.5-72B-Instruct on 8 H100 (volcengine/verl examples/tuning/70b/
    qwen2-72b_grpo-lora_8_h100_fsdp_vllm.sh @b178a3cd): 22 prompts per GPU ran, 23 ran out of memory. gpuplan
    says neither fits (2026-12-02: peak / usable 1.68 and 1.82, in the policy update — 2.32 and 2.52 while the
    update's activations came from the autocast trace, whose fp32 residual stream made the 80 checkpointed block
    inputs fp32; they now come from the step traced with the model in bf16, as verl's FSDP mixed precision runs
    it; the log-prob passes, 2.7x while traced under autocast, now need 18.3 GiB per GPU): it is given the
    1,024-token maximum response (GSM8K's mean is not published) and pads every sequence to it where verl removes
    padding, with the LM cross entropy's fp32 logits where verl uses flash-attn's fused kernel. A documented
    miss: the check pins it (both out of memory, by more than 1.5x, in the update) until the trainer's
    accounting changes."""
    script = load_script("accuracy_rl")
    for row_id in (
        "verl-tuning-qwen25-72b-grpo-lora-8xh100-176-fits",
        "verl-tuning-qwen25-72b-grpo-lora-8xh100-184-oom",
    ):
        got = script.run_row(_row(row_id))
        assert not got["fits"] and got["peak_over_usable"] > 1.5, (row_id, got)
        assert got["limiting_phase"] == "train", (row_id, got)
        assert got["phases_s"]["old_log_prob"] > 0, (row_id, got)
