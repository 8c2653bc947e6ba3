"""``gpuplan rl --fit``: the ladder (cumulative rungs, cheapest first, stopping at the first that fits) and the
longest response that fits, on the tiny GPT-2 (tests/fixtures)."""

from __future__ import annotations

from typing import Any

from gpuplan.rl import RLSettings, rl
from gpuplan.rl.fit import RESPONSE_STEP, ladder, largest_response_len
from tests.rl.test_cli import BASE, rl_json

SHAPE: dict[str, Any] = dict(
    gpu="H100-SXM",
    gpus=2,
    prompts_per_step=4,
    samples_per_prompt=4,
    prompt_len=32,
    response_len=32,
    max_response_len=64,
    rollout_max_num_seqs=16,
    rollout_max_num_batched_tokens=256,
)


def test_ladder_climbs_until_a_rung_fits(tiny_gpt2: str) -> None:
    s = RLSettings(model=tiny_gpt2, rollout_memory_utilization=1.0, **SHAPE)  # the engine takes the whole GPU
    assert not rl(s).fits
    rungs = ladder(s, rl)
    assert [r.name for r in rungs] == [
        "--peft lora",
        "--peft lora --offload optimizer",
        "--peft lora --offload optimizer,params",
        "--peft lora --offload optimizer,params --rollout-memory-utilization 0.4",
    ]
    assert [r.fits for r in rungs] == [False, False, False, True]
    last = rungs[-1].settings
    assert (last.peft, last.offload, last.rollout_memory_utilization) == (
        "lora",
        frozenset({"optimizer", "params"}),
        0.4,
    )


def test_split_rung_gives_the_engine_half_the_gpus(tiny_gpt2: str) -> None:
    s = RLSettings(model=tiny_gpt2, rollout_memory_utilization=1.0, **SHAPE)
    rungs = ladder(s, rl, stop_at_fit=False)
    split = rungs[-1]
    assert split.name.endswith("--placement split --rollout-gpus 1")
    assert split.settings.placement == "split" and split.settings.rollout_memory_utilization == 0.9
    assert split.fits


def test_longest_response_stops_at_the_models_context(tiny_gpt2: str) -> None:
    """The tiny GPT-2 learned 128 positions: 32 prompt tokens leave 96, so 64 is the last step of 64 that fits."""
    s = RLSettings(model=tiny_gpt2, **SHAPE)
    assert largest_response_len(s, rl) == RESPONSE_STEP


def test_cli_fit_json(tiny_gpt2: str) -> None:
    code, data = rl_json(tiny_gpt2, *BASE, "--rollout-memory-utilization", "1", "--fit")
    assert code == 1
    fit = data["fit"]
    assert fit["answer"] == "--peft lora --offload optimizer,params --rollout-memory-utilization 0.4"
    assert fit["max_response_len"] is None  # the engine does not start at any length with utilization 1
    assert fit["ladder"][-1]["fits"] is True and fit["max_prompts_per_step"] is None
