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

from table import print_table

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
    print_table(header, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
