"""GPU accuracy suite: estimated vs measured peak allocated, peak reserved, total and step time.

    python benchmarks/gpu_accuracy.py [--out docs/accuracy-gpu.md] [--budget-s 450] [--per-workload-s 120]
                                      [--only SUBSTRING] [--dry-run] [--cpu-smoke]

On a CUDA machine it runs at least 12 workloads (resnet50, vit_b_16, bert-base-uncased, gpt2 and a
Llama-style config sized to the GPU; train, infer and generate; fp32, AMP bf16 and pure bf16;
activation checkpointing on and off; two batch sizes) through ``gpuplan measure --json``, each in
its own process (a fresh CUDA context to measure, and an OOM or a hang cannot take the suite
down), each under a time limit, the whole under a time budget (workloads past it are listed as
skipped). It prints a table with the errors and their medians and writes it, with the date, GPU,
driver and torch version, to ``--out``, plus the raw results as JSON next to it.

Without a GPU it says so and exits 0. ``--cpu-smoke`` runs two tiny workloads on the CPU through
the same code path (the table then compares the storage-tracked bytes), to check the script
itself; ``--dry-run`` only lists the workloads and commands.

error = (estimated - measured) / measured; medians are over absolute errors of the rows that ran.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GIB = 1 << 30


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    flags: tuple[str, ...]
    steps: int = 5
    warmup: int = 2


@dataclass
class Row:
    case: Case
    status: str = "not run"
    wall_s: float = 0.0
    result: dict[str, Any] = field(default_factory=dict)


def llama_config(total_memory_bytes: int) -> dict[str, Any]:
    """A Llama-architecture config (GQA, SwiGLU, RMSNorm, RoPE) sized to the GPU: up to 16 blocks of
    width 2048 (~0.9B parameters, ~14 GiB of fp32 AdamW states), fewer on smaller GPUs."""
    layers = max(2, min(16, int(total_memory_bytes / GIB / 9)))
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
        "intermediate_size": 5632, "num_hidden_layers": layers, "num_attention_heads": 16,
        "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False, "hidden_act": "silu",
        "bos_token_id": 1, "eos_token_id": 2,
    }


def _case(name: str, model: str, flags: str, steps: int = 5, warmup: int = 2) -> Case:
    return Case(name, model, tuple(flags.split()), steps, warmup)


def gpu_cases(llama: str) -> list[Case]:
    gpt2, bert = "gpt2", "bert-base-uncased"
    return [
        _case("resnet50 train fp32 b32", "resnet50", "--mode train --batch-size 32 --precision fp32"),
        _case("resnet50 train amp-bf16 b64", "resnet50", "--mode train --batch-size 64 --precision amp-bf16"),
        _case("vit_b_16 train amp-bf16 b32", "vit_b_16", "--mode train --batch-size 32 --precision amp-bf16"),
        _case("vit_b_16 infer fp32 b64", "vit_b_16", "--mode infer --batch-size 64"),
        _case("bert-base train fp32 b16 s512", bert, "--mode train --batch-size 16 --seq-len 512"),
        _case("bert-base train amp-bf16 b32 s512", bert,
              "--mode train --batch-size 32 --seq-len 512 --precision amp-bf16"),
        _case("gpt2 train amp-bf16 b8 s1024", gpt2,
              "--mode train --batch-size 8 --seq-len 1024 --precision amp-bf16"),
        _case("gpt2 train amp-bf16 b8 s1024 ckpt", gpt2,
              "--mode train --batch-size 8 --seq-len 1024 --precision amp-bf16 --checkpointing full"),
        _case("gpt2 train fp32 b4 s1024", gpt2, "--mode train --batch-size 4 --seq-len 1024"),
        _case("gpt2 generate bf16 b8 s512 +64", gpt2,
              "--mode generate --batch-size 8 --seq-len 512 --new-tokens 64 --precision bf16", 3, 1),
        _case("llama-style train bf16 b4 s2048", llama,
              "--mode train --batch-size 4 --seq-len 2048 --precision bf16"),
        _case("llama-style train amp-bf16 b2 s2048 ckpt", llama,
              "--mode train --batch-size 2 --seq-len 2048 --precision amp-bf16 --checkpointing full"),
        _case("llama-style generate bf16 b16 s1024 +128", llama,
              "--mode generate --batch-size 16 --seq-len 1024 --new-tokens 128 --precision bf16", 2, 1),
        _case("gpt2 infer bf16 b32 s1024", gpt2,
              "--mode infer --batch-size 32 --seq-len 1024 --precision bf16"),
    ]


def smoke_cases(tiny: str) -> list[Case]:
    return [
        _case("tiny-gpt2 train fp32 b2 s32", tiny, "--mode train --batch-size 2 --seq-len 32", 1, 1),
        _case("tiny-gpt2 generate fp32 b1 s8 +3", tiny,
              "--mode generate --batch-size 1 --seq-len 8 --new-tokens 3", 1, 0),
    ]


def command(case: Case, store: str) -> list[str]:
    # --force: an accuracy suite measures what the estimate would refuse or cannot trace, too (an
    # out-of-memory run still ends as one line, and a failed estimate leaves the row's errors empty)
    return [sys.executable, "-m", "gpuplan.cli.main", "measure", case.model, *case.flags, "--steps",
            str(case.steps), "--warmup", str(case.warmup), "--store", store, "--force", "--json"]


def run_case(case: Case, store: str, limit_s: float) -> Row:
    row = Row(case)
    start = time.monotonic()
    try:
        proc = subprocess.run(command(case, store), capture_output=True, text=True, timeout=limit_s,
                              check=False, cwd=ROOT)
    except subprocess.TimeoutExpired:
        row.status = f"timeout after {limit_s:.0f} s"
        row.wall_s = time.monotonic() - start
        return row
    row.wall_s = time.monotonic() - start
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
        row.status = f"exit {proc.returncode}: {lines[-1][:160] if lines else 'no output'}"
        return row
    try:
        row.result = json.loads(proc.stdout)
        row.status = "ok"
    except json.JSONDecodeError as exc:
        row.status = f"unreadable output: {exc}"
    return row


# quantity label -> comparison row in `gpuplan measure --json`
QUANTITIES: tuple[tuple[str, str], ...] = (
    ("peak allocated", "peak allocated"),
    ("peak reserved", "peak reserved"),
    ("total (with context)", "total (with context)"),
    ("step time", "step time"),
    ("tracked tensors", "tracked tensor peak"),
)
SMOKE_QUANTITIES: tuple[tuple[str, str], ...] = (
    ("tracked tensors (host)", "tracked peak (host semantics)"),
    ("step time", "step time"),
)


def _comparison(row: Row, quantity: str) -> dict[str, Any] | None:
    for c in row.result.get("comparison", []):
        if c["quantity"] == quantity:
            return c  # type: ignore[no-any-return]
    return None


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "s":
        return f"{value * 1e3:.1f} ms" if value < 10 else f"{value:.2f} s"
    return f"{value / GIB:.2f} GiB" if value >= GIB / 4 else f"{value / (1 << 20):.1f} MiB"


def _err(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1%}"


def table(rows: list[Row], quantities: tuple[tuple[str, str], ...]) -> tuple[str, dict[str, dict[str, Any]]]:
    header = ["workload"]
    for label, _ in quantities:
        header += [f"est {label}", f"meas {label}", "err"]
    header.append("status")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    errors: dict[str, list[float]] = {label: [] for label, _ in quantities}
    for row in rows:
        cells = [row.case.name]
        for label, quantity in quantities:
            c = _comparison(row, quantity)
            if c is None:
                cells += ["n/a", "n/a", "n/a"]
                continue
            cells += [_fmt(c["estimated"], c["unit"]), _fmt(c["measured"], c["unit"]), _err(c["error"])]
            if c["error"] is not None:
                errors[label].append(abs(c["error"]))
        cells.append(row.status if row.status == "ok" else row.status.replace("|", "/"))
        lines.append("| " + " | ".join(cells) + " |")
    summary = {label: {"median_abs_error": statistics.median(v) if v else None,
                       "worst_abs_error": max(v) if v else None, "rows": len(v)}
               for label, v in errors.items()}
    lines += ["", "| quantity | rows | median abs error | worst abs error |", "|---|---|---|---|"]
    for label, s in summary.items():
        med = "n/a" if s["median_abs_error"] is None else f"{s['median_abs_error']:.1%}"
        worst = "n/a" if s["worst_abs_error"] is None else f"{s['worst_abs_error']:.1%}"
        lines.append(f"| {label} | {s['rows']} | {med} | {worst} |")
    return "\n".join(lines), summary


def environment(rows: list[Row]) -> dict[str, Any]:
    for row in rows:
        if row.result.get("environment"):
            return row.result["environment"]  # type: ignore[no-any-return]
    import torch

    return {"device_name": "unknown", "torch_version": torch.__version__, "cuda_version": torch.version.cuda}


def write_report(out: Path, rows: list[Row], quantities: tuple[tuple[str, str], ...], total_s: float,
                 note: str) -> str:
    text, summary = table(rows, quantities)
    env = environment(rows)
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    head = [
        "# gpuplan accuracy on a real GPU" if env.get("device") == "cuda" else "# gpuplan accuracy suite (CPU)",
        "",
        f"- date: {when}",
        f"- device: {env.get('device_name')} ({env.get('gpu_id') or 'not in catalog'}), "
        f"{env.get('device_memory_bytes', 0) / GIB:.1f} GiB",
        f"- driver: {env.get('driver_version')}; torch {env.get('torch_version')}; "
        f"CUDA {env.get('cuda_version')}; cuDNN {env.get('cudnn_version')}; host {platform.node()}",
        f"- {sum(r.status == 'ok' for r in rows)} of {len(rows)} workloads ran, in {total_s:.0f} s "
        "(each in its own process: `gpuplan measure --json`)",
        "- error = (estimated − measured) / measured; GiB = 2^30 bytes; step time is the median of the timed "
        "steps (a whole generation per step in generate mode)",
    ]
    if note:
        head.append(f"- {note}")
    body = "\n".join([*head, "", text, ""])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(body)
    raw = [{"workload": r.case.name, "command": command(r.case, "STORE")[3:], "status": r.status,
            "wall_s": round(r.wall_s, 1), "result": r.result} for r in rows]
    out.with_suffix(".json").write_text(json.dumps({"summary": summary, "rows": raw}, indent=1))
    return body


def fit_calibration(store: str, out: Path) -> str:
    """Run `gpuplan calibrate` on the store into a scratch file; one line describing the fit."""
    try:
        proc = subprocess.run([sys.executable, "-m", "gpuplan.cli.main", "calibrate", "--store", store, "--out",
                               str(out), "--json"], capture_output=True, text=True, timeout=60, check=False)
        entries = json.loads(proc.stdout)["entries"] if proc.stdout.strip() else []
    except (subprocess.TimeoutExpired, json.JSONDecodeError, KeyError):
        return ""
    parts = []
    for e in entries:
        ctx = "n/a" if e["cuda_context_bytes"] is None else f"{e['cuda_context_bytes'] / (1 << 20):.0f} MiB"
        factor = "n/a" if e["step_time_factor"] is None else f"{e['step_time_factor']:.3f}"
        parts.append(f"{e['gpu']} torch {e['torch_version']} CUDA {e['cuda_version']}: context {ctx} "
                     f"(n={e['context_samples']}), step-time factor {factor} (n={e['step_time_samples']})")
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "accuracy-gpu.md"))
    p.add_argument("--budget-s", type=float, default=450.0,
                   help="stop starting workloads after this many seconds (default 450)")
    p.add_argument("--per-workload-s", type=float, default=120.0,
                   help="time limit of one workload (default 120)")
    p.add_argument("--store", default=None, help="measurements store (default: gpuplan's default store)")
    p.add_argument("--only", default=None, help="run only workloads whose name contains this")
    p.add_argument("--dry-run", action="store_true", help="list the workloads and commands, run nothing")
    p.add_argument("--cpu-smoke", action="store_true",
                   help="two tiny workloads on the CPU (checks the script)")
    args = p.parse_args(argv)

    import torch

    tmp = Path(tempfile.mkdtemp(prefix="gpuplan-accuracy-"))
    if args.cpu_smoke:
        tiny = tmp / "tiny-gpt2.json"
        tiny.write_text(json.dumps({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2,
                                    "n_head": 2, "n_embd": 64, "n_positions": 128, "vocab_size": 1000,
                                    "bos_token_id": 0, "eos_token_id": 0}))
        cases, quantities = smoke_cases(str(tiny)), SMOKE_QUANTITIES
        note = ("CPU smoke run of the suite itself: memory is the storage-tracked peak, no allocator or "
                "context")
    elif not torch.cuda.is_available() and not args.dry_run:
        print("no CUDA GPU here (torch.cuda.is_available() is False): the accuracy suite needs one; "
              "nothing was run")
        return 0
    else:
        memory = torch.cuda.get_device_properties(0).total_memory if torch.cuda.is_available() else 80 * GIB
        llama = tmp / "llama-style" / "config.json"
        llama.parent.mkdir()
        llama.write_text(json.dumps(llama_config(memory)))
        cases, quantities, note = gpu_cases(str(llama)), QUANTITIES, ""
    if args.only:
        cases = [c for c in cases if args.only in c.name]
    # the smoke run keeps its records apart; a GPU run stores into gpuplan's default store, so
    # `gpuplan calibrate` can fit from it afterwards
    store = args.store or (str(tmp / "measurements.sqlite3") if args.cpu_smoke else "")
    if not store:
        from gpuplan.measure.store import default_store_path

        store = str(default_store_path())
    if args.dry_run:
        for c in cases:
            print(f"{c.name}: {' '.join(command(c, store)[1:])}")
        print(f"{len(cases)} workloads")
        return 0
    start = time.monotonic()
    rows: list[Row] = []
    for case in cases:
        left = args.budget_s - (time.monotonic() - start)
        if left < 15:
            rows.append(Row(case, status="skipped: time budget spent"))
            continue
        row = run_case(case, store, min(args.per_workload_s, left))
        rows.append(row)
        elapsed = time.monotonic() - start
        print(f"[{elapsed:5.0f} s] {case.name}: {row.status} ({row.wall_s:.0f} s)", flush=True)
    calibration = fit_calibration(store, tmp / "calibration.json")
    if calibration:
        note = ((note + "; ") if note else "") + f"calibration fitted from the store: {calibration}"
    body = write_report(Path(args.out), rows, quantities, time.monotonic() - start, note)
    print()
    print(body)
    print(f"written to {args.out} (raw results: {Path(args.out).with_suffix('.json')})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
