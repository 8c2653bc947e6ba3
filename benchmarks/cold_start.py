"""Cold ``gpuplan estimate gpt2 --gpu A100-80GB-SXM``: wall and CPU time, and where the CPU goes.

Issue 19 item 4's target: at most 5 s of wall time on an idle 2-core machine, with no trace cache. Each run is a
fresh process with an empty ``GPUPLAN_CACHE_DIR`` (never the user's cache), gpuplan byte-compiled first and
``PYTHONDONTWRITEBYTECODE`` dropped, as an installed gpuplan runs (benchmarks/verb_speed.py does the same).
On a shared machine wall time moves by seconds with the load: the minimum and the median are printed with the
load average, and CPU time beside them.

``--phases`` then runs the same command once more in one process, timing in order: the interpreter and
gpuplan's own modules, each third-party import the command makes (torch, torch._dynamo — imported by
``FakeTensorMode`` and by transformers' ``masking_utils`` —, transformers, its model table, its model-building
code, GPT-2's module), the model builds, the warm-up and recorded steps, the rest of the trace (scaling, the
allocator replay), the costing and the rendering; the cyclic GC's share is measured across all of them.

    python benchmarks/cold_start.py [--runs N] [--phases]

The measured tables are in docs/speed.md.
"""

from __future__ import annotations

import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from table import print_table

ARGV = ["estimate", "gpt2", "--gpu", "A100-80GB-SXM"]
TARGET_WALL_S = 5.0

# The child of --phases. Timers wrap gpuplan's own functions only; torch and transformers run untouched.
PHASES_CHILD = r"""
import contextlib, functools, gc, io, json, sys, time
T0 = time.process_time()
rows, gc_s, last = [], [0.0], [T0]
def mark(name):
    now = time.process_time(); rows.append((name, now - last[0])); last[0] = now
def on_gc(phase, info, start=[0.0]):
    if phase == "start": start[0] = time.process_time()
    else: gc_s[0] += time.process_time() - start[0]
gc.callbacks.append(on_gc)
from gpuplan.cli.main import fewer_full_collections, main
import gpuplan.cli.estimate
mark("interpreter and gpuplan's front end")
with fewer_full_collections():  # as main() runs the command: these imports happen inside it
    import torch; mark("import torch")
    import torch._dynamo; mark("import torch._dynamo (FakeTensorMode, transformers' masking_utils)")
    import transformers; mark("import transformers (its lazy top level)")
    import transformers.models; mark("transformers.models (its table of every model's exports)")
    import transformers.modeling_utils; mark("transformers.modeling_utils (and what it imports when installed)")
    import transformers.models.gpt2.modeling_gpt2; mark("transformers' GPT-2 modules")
    import torch.utils.flop_counter; mark("torch.utils.flop_counter")
    for name in sys.argv[1:]:
        __import__(name)
    mark("gpuplan's modules the estimate imports")
from gpuplan.trace import runner, step
import gpuplan.estimate as estimate_module
spent = {}
def timed(owner, attr, label):
    f = getattr(owner, attr)
    @functools.wraps(f)
    def wrapper(*a, **k):
        t = time.process_time()
        try:
            return f(*a, **k)
        finally:
            spent[label] = spent.get(label, 0.0) + time.process_time() - t
    setattr(owner, attr, wrapper)
timed(runner.StepRunner, "build_model", "build")
timed(runner.StepProgram, "warm_up", "warm_up")
timed(runner.StepProgram, "run", "step")
timed(step, "_trace_source", "trace")
timed(estimate_module.Estimate, "__str__", "render")
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main([*ARGV, "--no-cache"])
total = time.process_time() - last[0]
rows.append(("model builds (3 and 2 blocks, fake tensors)", spent["build"]))
rows.append(("optimizer warm-up steps", spent["warm_up"]))
rows.append(("recorded steps (fake-tensor dispatch, recorder)", spent["step"]))
rows.append(("rest of the trace (config, scaling, allocator replay)",
             spent["trace"] - spent["build"] - spent["warm_up"] - spent["step"]))
rows.append(("rendering the text", spent["render"]))
rows.append(("costing, memory, the rest of the command", total - spent["trace"] - spent["render"]))
print(json.dumps({"rows": rows, "gc_s": gc_s[0], "total_s": time.process_time() - T0, "code": code,
                  "installed": [m for m in ("torchao", "torchvision", "accelerate") if m in sys.modules]}))
""".replace("ARGV", repr(ARGV))

MODULES_CHILD = r"""
import contextlib, io, sys
from gpuplan.cli.main import main
with contextlib.redirect_stdout(io.StringIO()):
    main(sys.argv[1:])
print(" ".join(sorted(m for m in sys.modules if m.startswith("gpuplan"))))
"""


def _env(cache_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "GPUPLAN_CACHE": "on", "GPUPLAN_CACHE_DIR": cache_dir, "GPUPLAN_PROGRESS": "off"}


def _cold_run() -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one cold command in a fresh process and an empty cache directory."""
    with tempfile.TemporaryDirectory() as directory:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "gpuplan", *ARGV, "--no-cache"],
            env=_env(directory),
            capture_output=True,
            check=False,
        )
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), proc.returncode


def _phases() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as directory:
        env = _env(directory)
        listed = subprocess.run(
            [sys.executable, "-c", MODULES_CHILD, *ARGV, "--no-cache"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        modules = listed.stdout.split()
        done = subprocess.run(
            [sys.executable, "-c", PHASES_CHILD, *modules], env=env, capture_output=True, text=True, check=True
        )
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main(args: list[str]) -> int:
    runs = int(args[args.index("--runs") + 1]) if "--runs" in args else 5
    import gpuplan

    compileall.compile_dir(str(Path(gpuplan.__file__).parent), quiet=1)  # as a pip-installed wheel is
    load_before = os.getloadavg()[0]
    results = [_cold_run() for _ in range(runs)]
    walls, cpus = [r[0] for r in results], [r[1] for r in results]
    print(f"gpuplan {' '.join(ARGV)} --no-cache: {runs} cold runs; load average {load_before:.1f} at the start")
    verdict = "met" if min(walls) <= TARGET_WALL_S else "not met"
    print_table(
        ("", "min", "median", "max"),
        [
            ("wall s", f"{min(walls):.2f}", f"{statistics.median(walls):.2f}", f"{max(walls):.2f}"),
            ("CPU s", f"{min(cpus):.2f}", f"{statistics.median(cpus):.2f}", f"{max(cpus):.2f}"),
        ],
    )
    print(
        f"target: <= {TARGET_WALL_S:.0f} s wall on an idle 2-core machine ({verdict} by the fastest run here); "
        f"exit codes {sorted({r[2] for r in results})}"
    )
    if "--phases" in args:
        phases = _phases()
        rows, installed = phases["rows"], phases["installed"]
        assert isinstance(rows, list) and isinstance(installed, list)
        print(
            f"\nwhere one cold run's CPU goes (one process, in order; total {phases['total_s']:.2f} s, of which "
            f"the cyclic GC {phases['gc_s']:.2f} s; installed and imported by transformers: "
            f"{', '.join(installed) or 'none'})"
        )
        print_table(("phase", "CPU s"), [(name, f"{seconds:.2f}") for name, seconds in rows])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
