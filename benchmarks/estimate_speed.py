"""Wall time and peak RSS of ``gpuplan estimate`` (issue 2 targets), printed as a table.

Each case runs in a fresh process; the estimate's wall time is measured after imports (torch,
transformers, gpuplan), and the peak RSS is the process's maximum resident set.

Targets: gpt2 train b8 s1024 and resnet50 train b32 under 5 s each; llama-2-7b train b1 s4096 under
15 s; llama-3.1-405b train b1 s8192 under 30 s; peak RSS under 1.5 GiB in every case.

    python benchmarks/estimate_speed.py
"""

from __future__ import annotations

import json
import subprocess
import sys

from table import print_table

CASES = [
    ("gpt2 train b8 s1024", "gpt2", dict(mode="train", batch_size=8, seq_len=1024), 5.0),
    ("resnet50 train b32", "resnet50", dict(mode="train", batch_size=32), 5.0),
    ("llama-2-7b train b1 s4096", "llama-2-7b", dict(mode="train", batch_size=1, seq_len=4096, precision="amp-bf16"),
     15.0),
    ("llama-3.1-405b train b1 s8192", "llama-3.1-405b",
     dict(mode="train", batch_size=1, seq_len=8192, precision="bf16"), 30.0),
    ("llama-3.1-8b generate b1 s2048 +256", "llama-3.1-8b",
     dict(mode="generate", batch_size=1, seq_len=2048, new_tokens=256, precision="bf16"), 15.0),
]

CHILD = """
import json, resource, sys, time
import torch, transformers, torchvision
from gpuplan.estimate import estimate
model, kwargs = sys.argv[1], json.loads(sys.argv[2])
t = time.perf_counter()
est = estimate(model, gpu="H100-SXM", **kwargs)
elapsed = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"s": elapsed, "rss": rss, "peak": est.peak_allocated_bytes}))
"""


def main() -> int:
    rows = []
    for label, model, kwargs, target_s in CASES:
        out = subprocess.run([sys.executable, "-c", CHILD, model, json.dumps(kwargs)], capture_output=True, text=True,
                             check=False)
        if out.returncode != 0:
            rows.append((label, "error", "", "", out.stderr.strip().splitlines()[-1][:60]))
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        ok = r["s"] <= target_s and r["rss"] <= 1.5 * 2**30
        rows.append((label, f"{r['s']:.2f}", f"{target_s:.0f}", f"{r['rss'] / 2**30:.2f}",
                     ("ok" if ok else "OVER") + f"  (peak {r['peak'] / 2**30:.1f} GiB)"))
    header = ("case", "estimate s", "target s", "peak RSS GiB", "verdict")
    print_table(header, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
