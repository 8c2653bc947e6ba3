"""The public context-parallel rows (src/gpuplan/parallel/data/public_cp.csv; residuals in docs/accuracy.md by
scripts/accuracy_cp.py): every row sourced, its command a valid ``gpuplan plan`` with the published layout fixed,
and the held-out CP layout checked against its published figure with a stated tolerance."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from tests.fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
ROWS = list(csv.DictReader((ROOT / "src" / "gpuplan" / "parallel" / "data" / "public_cp.csv").open(encoding="utf-8")))
RESIDUALS = ROOT / "src" / "gpuplan" / "parallel" / "data" / "public_cp_residuals.json"
WORST = 0.25
"""Issue 10's worst-row bound for a multi-GPU family."""


def test_every_row_is_sourced_and_every_command_fixes_the_published_layout() -> None:
    from gpuplan.cli.main import build_parser

    parser = build_parser("plan")
    assert len({r["id"] for r in ROWS}) == len(ROWS) >= 10
    for r in ROWS:
        assert r["quantity"] in ("tokens_per_s_per_gpu", "per_gpu_peak_gib", "model_tflops_per_gpu", "mfu"), r["id"]
        assert r["reproducible"] in ("true", "partial", "false") and float(r["value"]) > 0, r["id"]
        assert (r["repo"] and re.fullmatch(r"[0-9a-f]{40}", r["commit"])) or r["file"].startswith("https://"), r["id"]
        assert r["framework"] and r["settings"] and r["gpus"].isdigit(), r["id"]
        if r["reproducible"] != "true":
            assert r["reason"], r["id"]  # what gpuplan cannot express
        if r["reproducible"] == "false":
            continue
        argv = shlex.split(r["command"])
        assert argv[:2] == ["gpuplan", "plan"], r["id"]
        args = parser.parse_args(argv[1:])
        assert (args.gpus, args.gpu) == (int(r["gpus"]), r["gpu"]), r["id"]
        # the published layout is fixed, not searched: every degree given
        assert None not in (args.dp, args.tp, args.pp, args.cp), r["id"]


def test_the_residuals_cover_every_run_row_and_the_doc_is_their_rendering() -> None:
    results = json.loads(RESIDUALS.read_text())
    script = load_script("accuracy_cp")
    doc = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert script.render(results) in doc  # regenerate with `python scripts/accuracy_cp.py --render-only`
    run = {r["id"] for r in ROWS if r["reproducible"] != "false"}
    assert set(results) == run
    for r in ROWS:
        if r["id"] in results:
            got = results[r["id"]]
            assert got["error"] == pytest.approx(got["predicted"] / float(r["value"]) - 1)


@pytest.mark.slow  # traces Llama-3.1-8B's fp8 step at 262,144 tokens (~45 s)
def test_held_out_torchtitan_cp8_at_256k() -> None:
    """torchtitan benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd, Table 2: Llama 3.1 8B on 8 H100, FSDP 1 ×
    CP 8, 262,144 tokens, Float8 + torch.compile, full checkpointing: 548 tokens/s per GPU and 84.5 GiB reserved.
    gpuplan (2026-12-02, eager, catalog H100-SXM, FSDP2 with fp32 shards as torchtitan builds its models): 535 tokens/s
    (-2.4%), 95.5 GiB (+13.0%). Tolerance: issue 10's 25% worst-row bound."""
    script = load_script("accuracy_cp")
    cache: dict[str, Any] = {}
    for suffix in ("tps", "mem"):
        row = next(r for r in ROWS if r["id"] == f"tt-cp-8b-fsdp1-cp8-256k-{suffix}")
        got = script.run_row(row, cache)
        assert got["layout"]["cp"] == 8 and got["layout"]["sharding"] == "fsdp2"
        assert abs(got["error"]) <= WORST, (row["id"], got)


@pytest.mark.slow  # plans Llama-3.1-405B twice (~20 s each)
def test_torchtitan_405b_memory_with_its_fsdp_settings() -> None:
    """torchtitan @31a17bfd, Table 6: Llama 3.1 405B on 512 H100, FSDP × TP 8 × PP 8 (1F1B), 75.3 GiB at 32K (CP 1)
    and 77.1 GiB at 128K (CP 4) reserved. Expressed with torchtitan's FSDP2 (torchtitan/parallelisms/
    parallelize_llama.py apply_fsdp @9dec370): fp32 shards (--fsdp-sharded-dtype fp32) and no resharding under a
    pipeline (--fsdp-reshard-after-forward default), with torch.distributed.pipelining's gradient accumulation
    (reduce-scatter after the last micro-batch). gpuplan (2026-12-02): 76.3 GiB (+1.3%) and 92.7 GiB (+20.2%); before
    these settings were expressible, 32.6 GiB (-56.7%) and 39.6 GiB (-48.6%). Tolerance: issue 10's 25% bound."""
    script = load_script("accuracy_cp")
    for row_id in ("tt-cp-405b-fsdp8-cp1-32k-mem", "tt-cp-405b-fsdp2-cp4-128k-mem"):
        row = next(r for r in ROWS if r["id"] == row_id)
        assert "--fsdp-sharded-dtype fp32 --fsdp-reshard-after-forward default" in row["command"]
        got = script.run_row(row, {})
        assert got["layout"]["pp"] == 8 and got["layout"]["sharding"] == "fsdp2"
        assert abs(got["error"]) <= WORST, (row_id, got)


def test_nemo_405b_on_b200_is_excluded_while_its_pipeline_cannot_be_expressed() -> None:
    """NVIDIA NeMo 25.02 performance summary (docs.nvidia.com/nemo-framework, DGX-B200 pre-training table): Llama 3.1
    405B on 128 B200, TP 4 PP 8 CP 2 VP 8, GBS 64, 625 tokens/s per GPU. Its recipe (NVIDIA/NeMo v2.2.0
    nemo/collections/llm/recipes/llama31_405b.py) sets Megatron-core's account_for_embedding_in_pipeline_split and
    account_for_loss_in_pipeline_split, so 126 blocks + the embedding + the loss make 64 chunks of 2 (commit a9531976,
    'Adjust 405B config due to asymmetric PP'), and recomputes nothing. gpuplan has no virtual-stage flag and refuses
    those chunks, so it plans 1F1B (2026-12-02: 11.9 s a step against NeMo's 6.55 s). The row stays out of the
    residuals until the schedule can be stated; this fails when it can (then run it again)."""
    from gpuplan.cli.main import build_parser
    from gpuplan.errors import LayoutError
    from gpuplan.models.sources import resolve_model
    from gpuplan.parallel.layout import check_model
    from gpuplan.trace.cache import layer_counts_of

    row = next(r for r in ROWS if r["id"] == "nemo-25.02-llama3-405b-cp2-128xb200-tps")
    assert row["reproducible"] == "false" and "VP 8" in row["settings"], row
    (layers,) = layer_counts_of(resolve_model("llama-3.1-405b")).values()
    pp, vp = 8, 8
    assert layers % (pp * vp) and (layers + 2) % (pp * vp) == 0  # NeMo's split: the embedding and loss count as blocks
    with pytest.raises(LayoutError):
        check_model(4, pp, heads=128, kv_heads=8, layers=layers, virtual_stages=vp)
    parser = build_parser("plan")
    assert parser._subparsers is not None
    plan = next(q for sub in parser._subparsers._group_actions for n, q in sub.choices.items() if n == "plan")
    flags = {f for a in plan._actions for f in a.option_strings}
    assert "--pp" in flags and not any("virtual" in f or f in ("--vp", "--vpp") for f in flags)
