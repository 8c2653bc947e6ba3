"""The public diffusion-pipeline rows (src/gpuplan/models/data/public_pipelines.csv; residuals in
docs/accuracy-diffusion.md by scripts/accuracy_diffusion.py): every row sourced, every command one gpuplan accepts
(parsed and its workload checked, no trace), every run row's residual recorded and shown in the doc. The numbers
themselves are the script's (each FLUX.1-dev row traces 12 B parameters: minutes); the held-out FLUX rows are
pinned in tests/trace/test_pipeline_published.py."""

from __future__ import annotations

import csv
import json
import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "src" / "gpuplan" / "models" / "data"
ROWS = list(csv.DictReader((DATA / "public_pipelines.csv").open(encoding="utf-8")))
QUANTITIES = ("after_load_gib", "peak_gib", "time_s", "step_time_s", "peak_without_text_encoders_gib")


def test_every_row_is_sourced_and_every_command_is_accepted() -> None:
    from gpuplan.cli._workload import workload_from_args
    from gpuplan.cli.main import build_parser
    from gpuplan.models.sources import resolve_model

    assert len({r["id"] for r in ROWS}) == len(ROWS) >= 40
    for r in ROWS:
        assert r["quantity"] in QUANTITIES and float(r["value"]) > 0, r["id"]
        assert r["reproducible"] in ("true", "partial", "false") and r["reason"], r["id"]
        assert r["repo"] and r["file"] and re.fullmatch(r"[0-9a-f]{40}", r["commit"]) and r["settings"], r["id"]
        if r["reproducible"] == "false":
            assert not r["command"], r["id"]
            continue
        argv = shlex.split(r["command"])
        assert argv[:2] == ["gpuplan", "estimate"] and f"--gpu {r['gpu']}" in r["command"], r["id"]
        args = build_parser("estimate").parse_args(argv[1:])
        source = resolve_model(args.model)
        source.check_workload(workload_from_args(args))  # type: ignore[attr-defined]  # a pipeline's own refusals


def test_every_run_row_has_its_residual_in_the_doc() -> None:
    residuals = json.loads((DATA / "public_pipelines_residuals.json").read_text())
    doc = (ROOT / "docs" / "accuracy-diffusion.md").read_text(encoding="utf-8")
    for r in ROWS:
        if r["reproducible"] == "false":
            assert r["id"] not in residuals and f"`{r['id']}`" in doc, r["id"]  # listed as not run, with why
            continue
        got = residuals[r["id"]]
        assert abs(got["predicted"] / float(r["value"]) - 1 - got["error"]) < 1e-9, r["id"]
        assert f"`{r['id']}`" in doc and f"{got['error']:+.1%}" in doc, r["id"]
