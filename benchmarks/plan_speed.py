"""Speed of ``gpuplan plan`` with the search open: wall time of a fresh process (imports of torch and
transformers included), its CPU time, the trace time, layouts searched per second, peak RSS.

Run: .venv/bin/python benchmarks/plan_speed.py  (prints a markdown table; docs/parallel.md keeps one)

Wall time depends on machine load; CPU time (user + system) is the steadier figure on a shared box.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

CASES = [
    ("llama-3.1-70b", ["--gpus", "64", "--gpu", "H100-SXM", "--nodes", "8", "--mode", "train"], 10.0),
    ("llama-3.1-405b", ["--gpus", "1024", "--gpu", "H100-SXM", "--nodes", "128", "--mode", "train"], 30.0),
    # MoE: the search adds every expert-parallel degree that divides dp and the 8 experts
    ("mixtral-8x7b", ["--gpus", "64", "--gpu", "H100-SXM", "--nodes", "8", "--mode", "train"], 30.0),
]

CHILD = """
import contextlib, io, json, resource, sys, time
t0 = time.perf_counter()
import torch, transformers  # what any trace needs; timed separately (transformers imports lazily:
from transformers import AutoConfig, AutoModelForCausalLM  # touch what building a model loads)
AutoConfig.for_model("llama")
t_import = time.perf_counter() - t0
from gpuplan.cli.main import main
buf = io.StringIO()
with contextlib.redirect_stdout(buf):
    code = main(["plan", *sys.argv[1:], "--json"])
wall = time.perf_counter() - t0
out = json.loads(buf.getvalue())
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"code": code, "wall_s": wall, "import_s": t_import, "cpu_s": ru.ru_utime + ru.ru_stime,
                  "rss_bytes": ru.ru_maxrss * 1024, "layout": out["layout"], "trace_s": out["trace_s"],
                  "search_s": out["search_s"], "n": out["layouts_considered"], "fits": out["fits"],
                  "step_time_s": out["step_time_s"], "mfu": out["mfu"]}))
"""


def main() -> int:
    rows = []
    for model, flags, limit in CASES:
        cmd = [sys.executable, "-c", CHILD, model, *flags]
        res = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if res.returncode not in (0, 1):
            print(res.stderr[-2000:])
            return 2
        rows.append((model, flags, limit, json.loads(res.stdout.strip().splitlines()[-1])))
    with open("/proc/loadavg") as f:
        load = f.read().split()[:3]
    print(f"load average at the end: {load}  ({time.strftime('%Y-%m-%d %H:%M')})")
    print("| command | wall s (limit) | of which torch+transformers import s | CPU s | trace s | layouts "
          "| layouts/s | peak RSS GiB | best layout | step s | MFU |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, flags, limit, r in rows:
        rate = r["n"] / r["search_s"] if r["search_s"] else float("inf")
        print(f"| plan {model} {' '.join(flags)} | {r['wall_s']:.1f} ({limit:g}) | {r['import_s']:.1f} "
              f"| {r['cpu_s']:.1f} | {r['trace_s']:.1f} | {r['n']} | {rate:,.0f} "
              f"| {r['rss_bytes'] / 2**30:.2f} "
              f"| {r['layout']} | {r['step_time_s']:.2f} | {r['mfu'] * 100:.1f}% |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
