"""Public multi-GPU training rows at scale (src/gpuplan/parallel/data/public_scale.csv; issue 17's held-out kinds):
Megatron-LM 2021 Table 1 and its ZeRO-3 comparison (Narayanan et al., arXiv 2104.04473, Tables 1 and 2),
llm-foundry's FSDP throughput tables, torchtitan's Float8 row. Every row sourced, every command a valid
``gpuplan plan`` with the published layout fixed; the slow tests run the rows against their published figures with
the tolerance stated on each. Residuals (2026-12-02): docs/accuracy-scale.md, "Published rows at scale"."""

from __future__ import annotations

import csv
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
ROWS = {
    r["id"]: r
    for r in csv.DictReader(
        (ROOT / "src" / "gpuplan" / "parallel" / "data" / "public_scale.csv").open(encoding="utf-8")
    )
}
TOLERANCE = 0.15
"""Issue 17: a held-out row off by more than 15% is a miss to explain."""


def _run(row_id: str, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return dict(load_script("accuracy_cp").run_row(ROWS[row_id], cache))  # the one row runner (plan --json)


def test_every_row_is_sourced_and_every_command_fixes_the_published_layout() -> None:
    from gpuplan.cli.main import build_parser

    parser = build_parser("plan")
    assert len(ROWS) >= 10
    for rid, r in ROWS.items():
        assert r["quantity"] in ("tokens_per_s_per_gpu", "step_time_s"), rid
        assert r["reproducible"] in ("true", "partial") and float(r["value"]) > 0, rid
        assert (r["repo"] and re.fullmatch(r"[0-9a-f]{40}", r["commit"])) or r["file"].startswith("https://"), rid
        assert r["framework"] and r["settings"] and r["gpus"].isdigit(), rid
        assert r["reproducible"] == "true" or r["reason"], rid  # what gpuplan does not express
        args = parser.parse_args(shlex.split(r["command"])[1:])
        assert (args.gpus, args.gpu) == (int(r["gpus"]), r["gpu"]), rid
        assert None not in (args.dp, args.tp, args.pp), rid  # the published layout, not a searched one


def test_the_gpt_configs_are_megatron_shapes() -> None:
    """The committed config.json files the Megatron rows name are the test suite's one GPT-shape rule."""
    sys.path.insert(0, str(Path(__file__).parent))
    from megatron_configs import gpt_config

    for name, (h, layers, heads) in {
        "gpt-7.5b": (4096, 36, 32),
        "gpt-39.1b": (8192, 48, 64),
        "gpt-310.1b": (16384, 96, 128),
        "gpt-175b": (12288, 96, 96),
    }.items():
        path = ROOT / "tests" / "fixtures" / "public_models" / name / "config.json"
        assert json.loads(path.read_text()) == gpt_config(h, layers, heads), name


@pytest.mark.slow  # traces three GPT blocks each of 4096, 8192 and 16384 (~45 s)
@pytest.mark.parametrize(
    ("row_id", "tp"), [("meg-t1-7.5b-step", 4), ("meg-t1-39.1b-step", 8), ("meg-t1-310.1b-step", 8)]
)
def test_megatron_table1_layouts(row_id: str, tp: int) -> None:
    """Narayanan et al. 2021 Table 1 with the paper's full recomputation: GPT 7.5B (t 4, 128 A100, 142 TFLOP/s per
    GPU = 3.70 s per iteration by the paper's FLOP count), 39.1B (t 8 p 2, 512 A100, 14.45 s), 310.1B (t 8 p 16,
    1,920 A100, 37.61 s). gpuplan (2026-12-02): +2.3%, -6.1%, -4.2%. Tolerance 10%: the Korthikanti / Table 1
    rows' bound (test_megatron.py)."""
    got = _run(row_id, {})
    assert got["layout"]["tp"] == tp and got["layout"]["checkpointing"] == "full"
    assert abs(got["error"]) <= 0.10, got


FOUNDRY_ROWS = ["foundry-mpt7b-8xh100-tps", "foundry-mpt7b-8xa100-tps", "foundry-mpt13b-8xa100-tps"]


@pytest.mark.slow  # traces Llama-2-7B and 13B (~40 s)
@pytest.mark.parametrize("row_id", FOUNDRY_ROWS)
def test_llm_foundry_fsdp_8_gpus(row_id: str) -> None:
    """llm-foundry scripts/train/benchmarking/README.md @061f2c7c: MPT-7B on 8 H100 10,643 and on 8 A100 4,641,
    MPT-13B on 8 A100 2,262 tokens/s per GPU (FSDP FULL_SHARD, no checkpointing, seq 2048). gpuplan (2026-12-02,
    Llama-2 of the same size): -3.6%, +1.1%, +7.7%. Tolerance: issue 17's 15%."""
    got = _run(row_id, {})
    assert got["layout"]["sharding"] == "fsdp2"
    assert abs(got["error"]) <= TOLERANCE, got


@pytest.mark.slow  # traces Llama-3.1-8B at 8192 tokens twice (~40 s)
def test_float8_is_faster_than_bf16_where_gemms_dominate() -> None:
    """torchtitan benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd Table 1: Float8 linears raise the compiled
    bf16 run's 6,667 to 8,532 tokens/s per GPU (+28%). gpuplan times both eagerly (no torch.compile), so its bf16
    row is slower than the compiled one and its fp8 gain smaller (2026-12-02: +6%); the direction must hold and
    each row stays within 25% (issue 10's multi-GPU worst-row bound)."""
    cache: dict[str, dict[str, Any]] = {}
    bf16 = _run("tt-8b-fsdp8-compile-bf16-tps", cache)
    fp8 = _run("tt-8b-fsdp8-compile-float8-tps", cache)
    assert fp8["predicted"] > bf16["predicted"]
    assert abs(bf16["error"]) <= 0.25 and abs(fp8["error"]) <= 0.25, (bf16, fp8)


@pytest.mark.slow  # traces three GPT-3 blocks (~25 s)
@pytest.mark.xfail(
    strict=True,
    reason=(
        "ZeRO-3 at micro-batch 1 over 192 nodes: published 66.7 s per iteration, gpuplan 20.8 s. NCCL's ring "
        "over 8 NICs per node moves the 350 GB of fp16 weights in ~2 s per pass; the paper's DeepSpeed (v0.3.13) "
        "gathered and reduce-scattered parameter by parameter through torch's list collectives, one copy per "
        "rank each (work proportional to the GPU count), a 2021 engine vintage gpuplan does not model: "
        "docs/accuracy-scale.md"
    ),
)
def test_zero3_175b_on_1536_gpus_micro_batch_1() -> None:
    """Narayanan et al. 2021 Table 2: GPT-3 175B, ZeRO-3 without model parallelism, 1,536 A100, micro-batch 1,
    44 TFLOP/s per GPU = 66.7 s per iteration. Tolerance: issue 17's 15%."""
    got = _run("meg-t2-zero3-175b-1536-step", {})
    assert got["layout"]["sharding"] == "zero3"
    assert abs(got["error"]) <= TOLERANCE, got
