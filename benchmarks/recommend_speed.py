"""Speed of ``gpuplan recommend`` for the three cases of issue 3 (target: under 30 s each): wall time
of a fresh process (torch/transformers imports included), its CPU time, the trace time, GPUs ranked.

Run: .venv/bin/python benchmarks/recommend_speed.py   (prints a markdown table)

Wall time depends on machine load; CPU time (user + system of the child) is the steadier figure.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

CASES = [
    ["gpt2", "--mode", "train"],
    ["llama-3.1-8b", "--mode", "generate"],
    ["llama-3.1-70b", "--mode", "train", "--max-gpus", "64"],
    # the same model as people train it: the default (fp32, 8192 tokens, no checkpointing) fits nowhere
    [
        "llama-3.1-70b",
        "--mode",
        "train",
        "--max-gpus",
        "64",
        "--precision",
        "amp-bf16",
        "--checkpointing",
        "full",
        "--seq-len",
        "4096",
    ],
]


def main() -> int:
    rows = []
    ok = True
    for args in CASES:
        c0, t0 = os.times(), time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "gpuplan.cli.main", "recommend", *args, "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        wall = time.perf_counter() - t0
        c1 = os.times()
        cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
        data = json.loads(proc.stdout) if proc.stdout.strip() else {}
        recs = data.get("recommendations", [])
        top = recs[0] if recs else {}
        best = f"{top.get('gpu')} ×{top.get('count')}" if top else "-"
        ok &= wall < 30 and proc.returncode in (0, 1)
        rows.append(
            f"| `recommend {' '.join(args)}` | {proc.returncode} | {len(recs)} | {best} "
            f"| {data.get('trace_s', float('nan')):.1f} | {wall:.1f} | {cpu:.1f} |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    print("| command | exit | candidates in | fastest | trace s | wall s | CPU s |")
    print("|---|---:|---:|---|---:|---:|---:|")
    print("\n".join(rows))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
