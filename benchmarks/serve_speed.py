"""Wall time of ``gpuplan serve`` (the issue's target: llama-3.1-70b, H100-SXM, TP 4, 32k context, < 10 s).

Runs each case in a fresh process (imports included, as a user pays them) with the trace cache off, and
prints a table: case, wall seconds, CPU seconds. Run: ``.venv/bin/python benchmarks/serve_speed.py``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time

CASES = [
    ["llama-3.1-70b", "--gpu", "H100-SXM", "--tp", "4", "--context", "32768"],
    ["llama-3.1-8b", "--gpu", "L4", "--context", "8192", "--engine", "sglang"],
    ["qwen2.5-72b", "--gpu", "H200", "--tp", "2", "--input-len", "4096", "--output-len", "512", "--rate", "50"],
]


def main() -> int:
    env = {**os.environ, "GPUPLAN_CACHE": "off"}
    gpuplan = os.path.join(os.path.dirname(sys.executable), "gpuplan")
    print(f"{'case':<90} {'wall s':>8} {'cpu s':>8}")
    for case in CASES:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run([gpuplan, "serve", *case, "--json"], capture_output=True, text=True, env=env, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        status = "" if done.returncode in (0, 1) else f"  exit {done.returncode}: {done.stderr.strip()[-200:]}"
        print(f"{' '.join(case):<90} {wall:8.2f} {cpu:8.2f}{status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
