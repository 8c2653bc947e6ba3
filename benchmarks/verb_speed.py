"""Cold and cached wall time (and CPU time) of every verb, each a whole command in a fresh process.

"cold": an empty trace-cache directory (interpreter start, imports, the trace); "cached": the same
command again, its traced steps read from the cache. Verbs that never trace (gpus, models, doctor,
install, explain, calibrate) have no cached column. CPU is the child's user + system time: on a
shared machine it moves less than wall time does, so both are printed with the load average.

Targets (issue 19 item 4, issue 18 item 7): a cold ``estimate gpt2 --gpu A100-80GB-SXM`` under 5 s
wall on an idle 2-core machine; ``--grad-accum 8`` at most one trace more than without it; a cached
``plan`` or ``serve`` without importing torch.

    python benchmarks/verb_speed.py [--repeat N] [VERB ...]

``--repeat N`` runs each cold command N times and prints the median (the load of a shared machine moves
single runs by seconds). The children run as an installed gpuplan does: its modules byte-compiled first
(pip compiles a wheel's modules at install) and ``PYTHONDONTWRITEBYTECODE`` dropped from their
environment — with it set, every run compiles gpuplan's ~50 imported modules again (≈0.3 s of CPU).

The measured table (and what changed it) is docs/speed.md.
"""

from __future__ import annotations

import compileall
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from table import print_table

CASES: list[tuple[str, list[str]]] = [
    ("estimate", ["estimate", "gpt2", "--gpu", "A100-80GB-SXM"]),
    ("estimate", ["estimate", "gpt2", "--gpu", "A100-80GB-SXM", "--grad-accum", "8"]),
    ("estimate", ["estimate", "gpt2", "--gpu", "A100-80GB-SXM", "--checkpointing", "selective", "--grad-accum", "8"]),
    ("fit", ["fit", "gpt2", "--gpu", "T4", "--seq-len", "512", "--json"]),
    ("fit", ["fit", "gpt2", "--gpu", "A100-40GB-PCIe:3g.20gb", "--seq-len", "512", "--json"]),
    ("fit", ["fit", "gpt2", "--gpu", "T4", "--axis", "seq-len", "--json"]),
    ("fit", ["fit", "gemma-2-2b", "--gpu", "A100-40GB-PCIe:3g.20gb", "--zero-grad", "zeros", "--json"]),
    ("plan", ["plan", "gpt2", "--gpu", "H100-SXM", "--gpus", "8"]),
    ("recommend", ["recommend", "gpt2", "--seq-len", "512"]),
    ("serve", ["serve", "qwen2.5-0.5b", "--gpu", "L4"]),
    ("gpus", ["gpus"]),
    ("models", ["models"]),
    ("doctor", ["doctor"]),
    ("install", ["install", "--gpu", "RTX-4090"]),
    ("explain", ["explain", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"]),
    ("calibrate", ["calibrate", "--json"]),
]
TRACES = {"estimate", "fit", "plan", "recommend", "serve"}


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float, int]:
    """(wall s, child CPU s, exit code) of ``gpuplan argv``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "gpuplan.cli.main", *argv], env=env, capture_output=True,
                          check=False)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def _child_env(cache_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "GPUPLAN_CACHE": "on", "GPUPLAN_CACHE_DIR": cache_dir}


def main(args: list[str]) -> int:
    repeat = 1
    if args[:1] == ["--repeat"]:
        repeat, args = max(1, int(args[1])), args[2:]
    import gpuplan

    compileall.compile_dir(str(Path(gpuplan.__file__).parent), quiet=1)  # as a pip-installed wheel is
    load_before = os.getloadavg()[0]
    rows = []
    for verb, argv in CASES:
        if args and verb not in args:
            continue
        colds, cached = [], None
        for _ in range(repeat):
            with tempfile.TemporaryDirectory() as directory:
                colds.append(_run(argv, _child_env(directory)))
                if verb in TRACES and cached is None:
                    cached = _run(argv, _child_env(directory))
        cold_wall = statistics.median(c[0] for c in colds)
        cold_cpu = statistics.median(c[1] for c in colds)
        rows.append((" ".join(argv)[:70], f"{cold_wall:.1f}", f"{cold_cpu:.1f}",
                     "-" if cached is None else f"{cached[0]:.1f}", "-" if cached is None else f"{cached[1]:.1f}",
                     str(colds[-1][2])))
    header = ("command", "cold wall s", "cold CPU s", "cached wall s", "cached CPU s", "exit")
    print(f"{repeat} cold run(s) per command (median); load average when it started: {load_before:.1f}")
    print_table(header, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
