"""``gpuplan fit`` for 5 models × 3 GPUs: the reported batch fits and batch + 1 does not, by the
tool's own traces (the confirming ``estimate`` runs fit makes), with the wall and CPU time of each;
then ``--target-batch-size`` cases of issue 9 (gpt2 on T4 at 1000 and 100000 samples per step): the
answer fits, and the traces (hence the time) do not grow with the target.

Run: .venv/bin/python benchmarks/fit_check.py [--only MODEL] [--targets-only]
(prints markdown tables; docs/accuracy.md keeps one)

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
TARGETS = [("gpt2", "T4", dict(mode="train", seq_len=1024), target) for target in (1000, 100_000)]


def targets() -> tuple[list[str], bool]:
    """The target-batch cases: (markdown rows, all fit within the trace bound)."""
    from gpuplan.advise.fit import MAX_TRACES

    rows, ok_all = [], True
    for model, gpu, fields, target in TARGETS:
        c0, t0 = os.times(), time.perf_counter()
        r = fit(model, gpu, make_workload(**fields), target_batch_size=target)
        wall = time.perf_counter() - t0
        c1 = os.times()
        cpu = (c1.user - c0.user) + (c1.system - c0.system)
        last = r.techniques[-1] if r.techniques else None
        ok = bool(r.target_fits) and r.traces <= MAX_TRACES
        ok_all &= ok
        shape = f"{last.point.workload.batch_size} × {last.point.workload.grad_accum}" if last else "-"
        need = last.point.need_bytes / 2**30 if last else float("nan")
        rows.append(
            f"| {model} | {gpu} | {target} | {last.name if last else '-'} | {shape} | {need:.2f} "
            f"| {r.gpu.usable_memory_bytes / 2**30:.2f} | {'yes' if ok else 'NO'} | {r.traces} "
            f"| {wall:.1f} | {cpu:.1f} |"
        )
        print(rows[-1], file=sys.stderr, flush=True)
    return rows, ok_all


def main() -> int:
    only = sys.argv[sys.argv.index("--only") + 1] if "--only" in sys.argv else None
    rows = []
    ok_all = True
    for model, fields in MODELS if "--targets-only" not in sys.argv else []:
        if only is not None and model != only:
            continue
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
    target_rows, targets_ok = targets()
    print()
    print(
        "| model | GPU | target batch | last technique | micro × k | needs GiB | usable GiB | fits | traces "
        "| wall s | CPU s |"
    )
    print("|---|---|---:|---|---|---:|---:|---|---:|---:|---:|")
    print("\n".join(target_rows))
    return 0 if ok_all and targets_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
