"""Wall time of a repeated ``gpuplan estimate`` answered from the trace cache (issue 13 target).

Each row is a whole command in a fresh process (interpreter start, imports, the answer), with an
empty cache directory for the first (miss) run. Target: a repeated estimate of llama-3.1-8b on
another GPU of the same kernel class answers in under 0.3 s wall, without importing torch.

    python benchmarks/cache_speed.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

MODEL = ["llama-3.1-8b", "--precision", "bf16", "--batch-size", "1", "--seq-len", "4096"]
RUNS = [
    ("miss: first query (traces)", "H100-SXM", None),
    ("hit: same query again", "H100-SXM", 0.3),
    ("hit: another GPU (H200)", "H200", 0.3),
    ("hit: another GPU (GH200)", "GH200", 0.3),
]
PROBE = ("import sys, io, contextlib\nfrom gpuplan.cli.main import main\n"
         "with contextlib.redirect_stdout(io.StringIO()): main(sys.argv[1:])\n"
         "print('torch' in sys.modules)")


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        env = {**os.environ, "GPUPLAN_CACHE": "on", "GPUPLAN_CACHE_DIR": directory}
        for label, gpu, target_s in RUNS:
            argv = [sys.executable, "-c", PROBE, "estimate", *MODEL, "--gpu", gpu]
            t = time.perf_counter()
            out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
            wall_s = time.perf_counter() - t
            torch_imported = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "error"
            verdict = "-" if target_s is None else ("ok" if wall_s <= target_s else "OVER")
            rows.append((label, f"{wall_s:.3f}", "-" if target_s is None else f"{target_s}", torch_imported, verdict))
    header = ("run", "wall s", "target s", "torch imported", "verdict")
    widths = [max(len(str(x[i])) for x in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"\nload average: {os.getloadavg()[0]:.1f} (other work on the machine slows these figures)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
