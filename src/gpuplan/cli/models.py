"""``gpuplan models``: the built-in model catalog (names MODEL accepts), with published sizes, and
the other forms MODEL takes (``--help`` and the footer of the table list them).

    gpuplan models [--task TASK] [--family FAMILY] [--json]

Exit codes: 0 ok, 1 when no model passes the filters, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpuplan.models.catalog import TASKS, CatalogModel, catalog_models
from gpuplan.units import format_count_significant

MODEL_FORMS = """\
MODEL forms (the first that applies wins):
  path               an existing config.json or a folder holding one; a .safetensors or .gguf file
                     or folder (headers only: weights memory; with a config.json beside it, a full
                     estimate that knows the stored weights)
  timm:NAME          a timm architecture built without weights (timm:convnext_tiny, timm:resnet50,
                     timm:vit_base_patch16_224); input size from the model's pretrained config,
                     --image-size overrides it
  FILE.py:FACTORY    your own nn.Module (package.module:factory too; ",inputs" names an inputs factory)
  NAME               a built-in catalog name (`gpuplan models` lists them)
  ORG/NAME[@REV]     a Hugging Face Hub id: config.json from the local HF cache (HF_HUB_CACHE /
                     HF_HOME), else the built-in entry with that id, else config.json alone from the
                     Hub (never with HF_HUB_OFFLINE=1; gated repos need HF_TOKEN); timm/ARCH.TAG
                     is the timm model
  BUILDER            a torchvision.models builder name (resnet18, vit_b_16, ...)"""


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.epilog = MODEL_FORMS
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--task", choices=TASKS, help="only models of this task")
    parser.add_argument("--family", metavar="FAMILY",
                        help="only this architecture (the config's model_type: llama, gpt2, t5, ...)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")


def _published(m: CatalogModel) -> str:
    """The parameter count in one style for every row, no finer than its authors publish it (the exact
    figure is in --json)."""
    return format_count_significant(m.published_params, m.published_params_rounding)


def to_dict(m: CatalogModel) -> dict[str, Any]:
    return {"name": m.name, "family": m.model_type, "task": m.task, "hf_id": m.hf_id,
            "published_params": m.published_params, "published_params_rounding": m.published_params_rounding,
            "published_params_source": m.published_params_source, "default_seq_len": m.default_seq_len,
            "aliases": list(m.aliases)}


def render(models: list[CatalogModel]) -> str:
    rows = [("MODEL", "FAMILY", "TASK", "PARAMETERS", "HUGGING FACE ID")]
    rows += [(m.name, m.model_type, m.task, _published(m), m.hf_id) for m in models]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join([*(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)), r[4]]).rstrip()
             for r in rows]
    lines.append(f"\n{len(models)} built-in models. MODEL may also be a Hugging Face Hub id ORG/NAME[@REV], "
                 "timm:NAME, a config.json, a .safetensors or .gguf file or folder, path/to/file.py:factory, "
                 "or a torchvision.models builder name (gpuplan models --help says more).")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    models = catalog_models()
    if args.task:
        models = [m for m in models if m.task == args.task]
    if args.family:
        models = [m for m in models if m.model_type == args.family.strip().lower()]
    if args.json:
        print(json.dumps({"count": len(models), "filters": {"task": args.task, "family": args.family},
                          "models": [to_dict(m) for m in models]}, indent=2))
    elif models:
        print(render(models))
    else:
        families = sorted({m.model_type for m in catalog_models()})
        print(f"no built-in model passes these filters (families: {', '.join(families)})")
    return 0 if models else 1
