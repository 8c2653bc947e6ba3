"""The public benchmark matrices (src/gpuplan/perf/data/public/*.csv), their cross-validated residuals
(perf/data/residuals.json) and the generated section of docs/accuracy.md, all written by
scripts/accuracy.py from published tables cited row by row (repository, file, commit)."""

from __future__ import annotations

import csv
import json
import math
import re
import shlex
from pathlib import Path

import pytest

from gpuplan.cli.main import build_parser
from gpuplan.hardware import get_gpu
from gpuplan.perf.calibration import CASES
from gpuplan.perf.efficiency import arch_key
from gpuplan.perf.uncertainty import FAMILIES, load_residuals
from tests.fixtures.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = ROOT / "src" / "gpuplan" / "perf" / "data" / "public"
COLUMNS = ["id", "source", "repo", "file", "commit", "gpu", "gpu_count", "model", "mode", "precision", "batch_size",
           "seq_len", "image_size", "flags", "quantity", "unit", "value", "framework", "stack_year", "family",
           "command", "reproducible", "exclude_reason"]
# issue 17 acceptance: interval coverage 75-85% on held-out sources; median interval no wider than x1.35
# either side. (Its per-family bar, leave-one-source-out median |error| <= 12% and worst <= 35%, does not
# hold yet for the training families: docs/accuracy.md states the residuals.)
COVERAGE = (0.75, 0.85)
WIDTH = 1.35


def _rows() -> list[dict[str, str]]:
    out = []
    for path in sorted(PUBLIC.glob("*.csv")):
        with path.open(encoding="utf-8") as f:
            reader = csv.DictReader(f)
            assert reader.fieldnames == COLUMNS, path
            out += list(reader)
    return out


def test_every_row_is_cited_and_costable_or_excluded_with_a_reason() -> None:
    rows = _rows()
    assert len({r["id"] for r in rows}) == len(rows)
    for r in rows:
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"]) and r["repo"] and r["file"], r["id"]
        assert float(r["value"]) > 0 and r["stack_year"], r["id"]
        if r["reproducible"] == "true":
            assert r["exclude_reason"] == "" and r["family"] in FAMILIES, r["id"]
            get_gpu(r["gpu"])  # a catalog GPU
        else:
            assert r["reproducible"] == "false" and r["exclude_reason"], r["id"]


def test_commands_are_gpuplan_invocations_the_cli_accepts() -> None:
    """The command stored with each costed row parses with gpuplan's own argument parser and names the
    row's GPU, batch and precision. (bert-base-qa / bert-large-qa are perf/calibration.model_source
    configs, BERT with the SQuAD head: the CLI catalog has the masked-LM heads only.)"""
    parsers = {verb: build_parser(verb) for verb in ("estimate", "plan")}
    for r in _rows():
        if r["reproducible"] != "true":
            continue
        argv = shlex.split(r["command"])
        assert argv[0] == "gpuplan", r["id"]
        ns = parsers[argv[1]].parse_args(argv[1:])
        assert ns.gpu == r["gpu"] and str(ns.batch_size) == r["batch_size"] and ns.precision == r["precision"], r["id"]


def test_matrices_cover_300_rows_and_the_generations() -> None:
    """Issue 17: >= 300 public rows; the costed ones span Volta, Turing, Ampere (data centre and
    consumer), Ada, Hopper and both Blackwell kinds (no public CDNA row gpuplan expresses yet)."""
    rows = [r for r in _rows() if r["reproducible"] == "true"]
    assert len(rows) >= 300
    archs = {arch_key(get_gpu(r["gpu"]).arch) for r in rows}
    assert {"volta", "turing", "ampere", "ada", "hopper", "blackwell", "blackwell-gb20x"} <= archs
    ampere = {get_gpu(r["gpu"]).compute_capability for r in rows if arch_key(get_gpu(r["gpu"]).arch) == "ampere"}
    assert {(8, 0), (8, 6)} <= ampere  # data centre GA100 and consumer GA102


def test_residuals_cover_every_costed_row() -> None:
    """Every expressible public row is either in residuals.json or listed as pending (not costed in
    the run that wrote it); every residual belongs to an expressible row or a calibration.py row."""
    data = load_residuals()
    costed = {r["id"] for r in _rows() if r["reproducible"] == "true"}
    done = {r["id"] for r in data["rows"]}
    assert costed <= done | set(data["pending"])
    multi = {r["id"] for r in load_script("accuracy").multi_gpu_rows()[0]}
    assert done - costed <= {c.row_id for c in CASES} | multi
    assert multi <= done  # every expressible multi-GPU LLM training row (parallel/data/*.csv) is carried


def test_multi_gpu_llm_intervals_come_from_their_own_rows() -> None:
    """LLM training on several GPUs has its own public rows (parallel/data/public_scale.csv, public_cp.csv, planned
    at the shipped factors by scripts/accuracy.py): its intervals are built from them, no longer from all families'
    rows widened by the spread between families, and held-out coverage over every row stays within 75-85%."""
    from gpuplan.perf.uncertainty import log_bounds

    script = load_script("accuracy")
    data = load_residuals()
    multi = [r for r in data["rows"] if r["family"] == "llm-train-multi"]
    run, skipped = script.multi_gpu_rows()
    assert {r["id"] for r in multi} == {r["id"] for r in run} and len(multi) >= 15
    assert all(r["evaluated"] == "shipped factors" and r["gpus"] > 1 for r in multi)
    # DeepSpeed v0.3.13's ZeRO-3 (test_public_scale.py's xfail) is not expressible: skipped, with its reason
    assert {f"meg-t2-zero3-175b-{n}-step" for n in (384, 768, 1536)} <= set(skipped) and all(skipped.values())
    hopper = [r for r in multi if r["arch"] == "hopper"]
    assert len(hopper) >= 8
    _, _, basis = log_bounds(data, "llm-train-multi", "hopper")
    assert basis == f"Hopper, LLM training, several GPUs rows (n={len(hopper)})", basis
    _, _, basis = log_bounds(data, "llm-train-multi", "ampere")
    assert basis.startswith(f"LLM training, several GPUs rows of all generations (n={len(multi)};"), basis
    share, n = script.coverage(data["rows"])
    assert COVERAGE[0] <= share <= COVERAGE[1] and n == len(data["rows"]), (share, n)


def test_docs_section_is_what_the_script_renders() -> None:
    """docs/accuracy.md's generated section equals scripts/accuracy.py's rendering of residuals.json
    (regenerate with `python scripts/accuracy.py --render-only` after a refit)."""
    script = load_script("accuracy")
    text = (ROOT / "docs" / "accuracy.md").read_text(encoding="utf-8")
    section = script.BEGIN + text.split(script.BEGIN, 1)[1].split(script.END, 1)[0] + script.END + "\n"
    assert section == script.render(load_residuals())


def test_interval_covers_75_to_85_percent_of_held_out_sources() -> None:
    """Each row's 80% interval built from the other sources' leave-one-source-out residuals (the
    pooling rule of perf/uncertainty) contains that row's own held-out residual 75-85% of the time."""
    share, n = load_script("accuracy").coverage(load_residuals()["rows"])
    assert COVERAGE[0] <= share <= COVERAGE[1], (share, n)


def test_median_interval_is_no_wider_than_1_35_either_side() -> None:
    widths = load_script("accuracy").interval_widths(load_residuals()["rows"])
    assert widths["median_low"] <= WIDTH and widths["median_high"] <= WIDTH, widths


def test_shipped_refits_are_the_adopted_ones_and_never_above_the_gemm_benchmark() -> None:
    """Issue 17: a generation carries its own fitted factors in arch_factors.json exactly when
    scripts/accuracy.py's held-out comparison adopted them (residuals.json ``adopted``); no generation's
    large-GEMM fraction, fitted or prior, is above the public GEMM benchmark's (``gemm_cap``: the MAMF
    table; Ada's GeForce cuBLASLt sweep, capped at the datasheet peak), and no CUDA-core fp32 fraction above
    the public cuBLAS SGEMM one (``bounds.fp32_matmul``: 0.90)."""
    from gpuplan.perf.efficiency import ARCH_EFFICIENCY, load_factors

    data = load_factors()
    archs = data["architectures"]
    adopted = {a for a, f in archs.items() if "fitted" in f}
    assert adopted == set(load_residuals().get("adopted", {}))
    assert data["bounds"]["fp32_matmul"] <= 0.90 and "sgemm" in data["bounds"]["fp32_matmul_source"].lower()
    for key, a in archs.items():
        assert 0 < ARCH_EFFICIENCY[key].tensor_core_matmul <= a["gemm_cap"] <= 1.0, key
        src = a["gemm_cap_source"]
        assert "@" in src and ("TFLOP/s" in src or "%" in src), key
        assert 0 < ARCH_EFFICIENCY[key].fp32_matmul <= data["bounds"]["fp32_matmul"], key

@pytest.mark.slow  # plans the tiny GPT-2 on 4 H100 and re-derives coverage over ~340 rows (~7 s)
def test_multi_gpu_only_replans_the_rows_and_rewrites_residuals_and_doc(
        tiny_gpt2: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`scripts/accuracy.py --multi-gpu-only` end to end on a tiny GPT-2: a multi-GPU row of its CSVs is planned
    with its command, its residual is log(measured time / modelled) (a rate's time is its inverse: 1,000 tokens/s
    measured against a modelled rate R is log(R / 1000)), the earlier multi-GPU rows are replaced, coverage and
    widths are recomputed over every row, and the doc section lists the rows run and skipped."""
    script = load_script("accuracy")
    header = ["id", "repo", "file", "commit", "framework", "gpu", "gpus", "model", "settings", "quantity", "value",
              "command", "reproducible", "reason"]
    command = (f"gpuplan plan {tiny_gpt2} --gpus 4 --gpu H100-SXM --dp 4 --tp 1 --pp 1 --seq-len 32 "
               "--micro-batch-size 4 --global-batch-size 16")
    rows = [["tiny-tps", "", "https://example.org/t", "", "test", "H100-SXM", "4", "tiny", "", "tokens_per_s_per_gpu",
             "1000", command, "partial", "made up"],
            ["tiny-mem", "", "https://example.org/t", "", "test", "H100-SXM", "4", "tiny", "", "per_gpu_peak_gib", "1",
             command, "partial", "made up"]]
    csv_path = tmp_path / "rows.csv"
    with csv_path.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([header, *rows])
    residuals, doc = tmp_path / "residuals.json", tmp_path / "accuracy.md"
    residuals.write_text(script.RESIDUALS.read_text(encoding="utf-8"), encoding="utf-8")
    doc.write_text(script.DOC.read_text(encoding="utf-8"), encoding="utf-8")
    monkeypatch.setattr(script, "MULTI_GPU_CSVS", (csv_path,))
    monkeypatch.setattr(script, "RESIDUALS", residuals)
    monkeypatch.setattr(script, "DOC", doc)
    assert script.main(["--multi-gpu-only"]) == 0
    data = json.loads(residuals.read_text(encoding="utf-8"))
    multi = [r for r in data["rows"] if r["family"] == "llm-train-multi"]
    assert [r["id"] for r in multi] == ["tiny-tps"] and data["multi_gpu_skipped"] == {
        "tiny-mem": "per_gpu_peak_gib is not a time"}
    planned = load_script("accuracy_cp").plan_json(command)["tokens_per_s_per_gpu"]
    assert multi[0]["log_residual"] == pytest.approx(math.log(planned / 1000), abs=1e-5)
    assert (multi[0]["arch"], multi[0]["gpus"], multi[0]["source"]) == ("hopper", 4, "https://example.org/t")
    shipped = load_residuals()["rows"]  # the shipped multi-GPU rows are replaced by the one planned here
    shipped_multi = sum(r["family"] == "llm-train-multi" for r in shipped)
    assert data["coverage"]["rows"] == len(data["rows"]) == len(shipped) - shipped_multi + 1
    assert data["interval_width"] == {k: round(v, 4) for k, v in script.interval_widths(data["rows"]).items()}
    assert "### Multi-GPU LLM training rows (1; shipped factors, out of sample)" in doc.read_text(encoding="utf-8")
