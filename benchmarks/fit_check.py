"""``gpuplan fit`` for 5 models × 3 GPUs: the reported batch fits and batch + 1 does not, by the
tool's own traces (the confirming ``estimate`` runs fit makes), with the wall and CPU time of each.

Run: .venv/bin/python benchmarks/fit_check.py   (prints a markdown table; docs/accuracy.md keeps one)

Target: under 20 s each. Wall time depends on machine load; CPU time (user + system of this process
for that fit) is the steadier figure on a shared box.
"""

from __future__ import annotations

import os
import sys
import time

from gpuplan.advise.fit import fit
from gpuplan.estimate import make_workload

MODELS = [
    ("gpt2", dict(mode="train", seq_len=1024, precision="amp-bf16")),
    ("bert-large-uncased", dict(mode="train", seq_len=512, precision="amp-bf16")),
    ("resnet50", dict(mode="train", image_size=224, precision="amp-bf16")),
    ("qwen2.5-0.5b", dict(mode="train", seq_len=2048, precision="amp-bf16", checkpointing="full")),
    ("llama-3.1-8b", dict(mode="generate", seq_len=2048, new_tokens=128, precision="bf16")),
]
GPUS = ["RTX-4090", "A100-80GB-SXM", "H100-SXM"]


def main() -> int:
    rows = []
    ok_all = True
    for model, fields in MODELS:
        for gpu in GPUS:
            c0, t0 = os.times(), time.perf_counter()
            r = fit(model, gpu, make_workload(**fields))
            wall = time.perf_counter() - t0
            c1 = os.times()
            cpu = (c1.user - c0.user) + (c1.system - c0.system)
            fits = r.max_point is not None and r.max_point.fits
            over = (
                r.over_point is not None
                and not r.over_point.fits
                and r.over_point.workload.batch_size == r.max_batch_size + 1
            )
            ok = fits and over and r.max_batch_size >= 1
            ok_all &= ok
            gib = (r.max_point.need_bytes / 2**30) if r.max_point else float("nan")
            over_gib = (r.over_point.need_bytes / 2**30) if r.over_point else float("nan")
            rows.append(
                f"| {model} | {gpu} | {fields['mode']} | {r.max_batch_size} | {gib:.2f} | {over_gib:.2f} "
                f"| {r.gpu.usable_memory_bytes / 2**30:.2f} | {'yes' if ok else 'NO'} | {r.traces} "
                f"| {wall:.1f} | {cpu:.1f} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    print(
        "| model | GPU | mode | max batch | needs GiB (batch) | needs GiB (batch+1) | usable GiB "
        "| batch fits, +1 not | traces | wall s | CPU s |"
    )
    print("|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|")
    print("\n".join(rows))
    return 0 if ok_all else 1


if __name__ == "__main__":
    raise SystemExit(main())
