"""Time the cost model adds to ``estimate``: costing one traced step on a GPU (issue 10 target:
under 0.5 s), printed as a table.

Each model is traced once (not timed); then ``summarize_source`` (step_time + throughput, what
``estimate`` runs after the trace) is timed on three GPUs of different architectures, best of 5.

    .venv/bin/python benchmarks/cost_speed.py
"""

from __future__ import annotations

import time

from gpuplan.hardware import get_gpu
from gpuplan.models.sources import resolve_model
from gpuplan.perf.summary import summarize_source
from gpuplan.trace.step import trace_step
from gpuplan.workload import make_workload

TARGET_S = 0.5
CASES = [
    ("gpt2 train b8 s1024", "gpt2", dict(mode="train", batch_size=8, seq_len=1024, precision="amp-bf16")),
    ("resnet50 train b256", "resnet50", dict(mode="train", batch_size=256, precision="amp-fp16")),
    ("llama-2-7b train b1 s4096", "llama-2-7b", dict(mode="train", batch_size=1, seq_len=4096, precision="amp-bf16")),
    ("llama-3.1-8b generate b1 s2048 +256", "llama-3.1-8b",
     dict(mode="generate", batch_size=1, seq_len=2048, new_tokens=256, precision="bf16")),
]
GPUS = ("A100-80GB-SXM", "H100-SXM", "RTX-4090")


def main() -> int:
    rows = []
    worst = 0.0
    for label, model, kwargs in CASES:
        source = resolve_model(model)
        workload = make_workload(**kwargs)
        step = trace_step(source, workload)
        for gpu_id in GPUS:
            gpu = get_gpu(gpu_id)
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                summarize_source(source, step, gpu, workload)
                best = min(best, time.perf_counter() - t)
            worst = max(worst, best)
            rows.append((label, gpu_id, len(step.ops), best))
    print(f"{'case':40s} {'gpu':15s} {'ops':>6s} {'costing (ms)':>13s}")
    for label, gpu_id, ops, s in rows:
        print(f"{label:40s} {gpu_id:15s} {ops:6d} {s * 1e3:13.2f}")
    print(f"\nworst {worst * 1e3:.2f} ms (target < {TARGET_S * 1e3:.0f} ms): {'OK' if worst < TARGET_S else 'OVER'}")
    return 0 if worst < TARGET_S else 1


if __name__ == "__main__":
    raise SystemExit(main())
