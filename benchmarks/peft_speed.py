"""Cost of a PEFT estimate of llama-3.1-8b against the plain estimate (issue 11 target: LoRA < 1.5×).

Each row is ``gpuplan.estimate`` in this process with the trace cache off, after one warm-up
estimate that pays the imports (torch, transformers, peft) for every row alike. The workload is
torchtune's single-device LoRA recipe shape (bf16, batch 2, 2048 tokens, full checkpointing).

    python benchmarks/peft_speed.py
"""

from __future__ import annotations

import os
import sys
import time

TARGET_RATIO = 1.5
SHAPE = {"precision": "bf16", "batch_size": 2, "seq_len": 2048, "checkpointing": "full"}
ROWS = [
    ("plain (full fine-tuning)", {}),
    ("LoRA r=8, PEFT default targets", {"peft": "lora"}),
    ("LoRA r=8, all-linear", {"peft": "lora", "lora_targets": ("all-linear",)}),
    ("DoRA r=8, PEFT default targets", {"peft": "dora"}),
    ("QLoRA r=8, all-linear", {"peft": "qlora", "lora_targets": ("all-linear",)}),
]


def main() -> int:
    os.environ["GPUPLAN_CACHE"] = "off"
    from gpuplan.estimate import estimate
    from gpuplan.workload import Workload

    estimate("gpt2", workload=Workload(batch_size=1, seq_len=16, peft="lora"))  # imports, once for every row
    rows = []
    for label, fields in ROWS:
        t = time.perf_counter()
        est = estimate("llama-3.1-8b", gpu="RTX-4090", workload=Workload(**SHAPE, **fields))  # type: ignore[arg-type]
        rows.append((label, time.perf_counter() - t, est.peak_allocated_bytes / 2**30))
    plain_s = rows[0][1]
    print(f"{'workload':<34} {'wall s':>7} {'× plain':>8} {'peak GiB':>9}  verdict (< {TARGET_RATIO}×)")
    worst = 0.0
    for label, wall_s, peak in rows:
        ratio = wall_s / plain_s
        worst = max(worst, ratio) if label.startswith("LoRA") else worst
        verdict = "-" if label.startswith("plain") else ("ok" if ratio < TARGET_RATIO else "OVER")
        print(f"{label:<34} {wall_s:>7.2f} {ratio:>8.2f} {peak:>9.2f}  {verdict}")
    return 0 if worst < TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
