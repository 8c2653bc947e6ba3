"""Cold-run time of `gpuplan doctor`: a fresh Python process per run, as a user would start it.

    .venv/bin/python benchmarks/doctor_speed.py [--runs N]

Targets (issue 5): under 1.5 s when torch is not imported (the default), under 5 s with
--import-torch. The first run of each row also pays for a cold file cache; the table shows it
separately from the median. The verdict uses the median. On a shared, loaded machine `import torch`
alone swings by seconds, so the last line also gives the doctor's own time on top of `import torch`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASES = [
    ("python -c pass (interpreter start)", ["-c", "pass"], None),
    ("gpuplan doctor", ["-m", "gpuplan.cli.main", "doctor"], 1.5),
    ("gpuplan doctor --json", ["-m", "gpuplan.cli.main", "doctor", "--json"], 1.5),
    ("gpuplan doctor --import-torch", ["-m", "gpuplan.cli.main", "doctor", "--import-torch"], 5.0),
    ("python -c 'import torch' (reference)", ["-c", "import torch"], None),
]


def _time_once(args: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):  # doctor exits 1 when it finds an error-level problem
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr.strip()[:300]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per row (default 5)")
    runs = parser.parse_args().runs
    rows = []
    for label, args, target in CASES:
        times = [_time_once(args) for _ in range(runs)]
        rows.append((label, times[0], statistics.median(times), max(times), target))
    print(f"{'command':40} {'first s':>8} {'median s':>9} {'max s':>7} {'target s':>9}  verdict")
    for label, first, median, worst, target in rows:
        verdict = "" if target is None else ("ok" if median < target else "SLOW")
        shown = "" if target is None else f"{target:.1f}"
        print(f"{label:40} {first:8.3f} {median:9.3f} {worst:7.3f} {shown:>9}  {verdict}")
    medians = {label: median for label, _, median, _, _ in rows}
    extra = medians["gpuplan doctor --import-torch"] - medians["python -c 'import torch' (reference)"]
    print(f"\ndoctor --import-torch minus import torch (median): {extra:+.3f} s")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"{runs} runs each, {sys.executable}, Python {sys.version.split()[0]}, load average {load:.2f}")


if __name__ == "__main__":
    main()
