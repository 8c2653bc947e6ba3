"""``gpuplan sweep MODEL --gpus N --gpu GPU [plan flags] [--top K] [--steps S] [--launcher local|slurm
--partition P [--time-min T --account A --cpus-per-task C --job-dir DIR]] [--store PATH | --no-store]
[--json]``: the plan's top
K layouts measured for S steps each (a Slurm job array, or torchrun here), predicted next to measured, stored
for ``gpuplan calibrate``."""

from __future__ import annotations

import argparse
import json

from gpuplan.cli._launcher import executor_from_args
from gpuplan.cli._workload import add_cache_argument, add_json_argument, add_options, workload_from_args
from gpuplan.cli.measure import check_store_arguments, open_store
from gpuplan.cli.plan import add_plan_arguments, plan_from_args
from gpuplan.errors import ConfigError
from gpuplan.report.verb_options import verb_options


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_plan_arguments(parser, pipelines=False)
    add_options(parser, verb_options("sweep"))  # --top, --steps, the store, the launcher (report/verb_options.py)
    add_json_argument(parser)
    add_cache_argument(parser)


def run(args: argparse.Namespace) -> int:
    from gpuplan.measure.local import Options
    from gpuplan.measure.sweep import check_top

    check_store_arguments(args)
    check_top(args.top)
    workload = workload_from_args(args, checkpointing=args.checkpointing or "none")
    Options(steps=args.steps, warmup=1).check(workload)
    from gpuplan.measure.launch import check_nproc

    if args.gpus < 2:
        raise ConfigError(f"--gpus {args.gpus}: sweep measures multi-GPU layouts (allowed 2 and more); "
                          "gpuplan measure runs one GPU")
    executor, _ = executor_from_args(args, nproc=args.gpus, nodes=args.nodes, gpus_per_node=args.gpus_per_node)
    if executor is None:  # every rank on this host: its GPUs or cores cap the ranks, before any trace
        check_nproc(args.gpus, "ddp", workload, here=True, flag="--gpus")
    store = open_store(args)
    from functools import partial

    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.measure.sweep import sweep
    from gpuplan.parallel.plan import plan

    try:
        with Progress(f"sweep: planning {args.model}, then measuring its top {args.top} layouts",
                      enabled=wanted(args.json)):
            p = plan_from_args(partial(plan, max_alternatives=args.top - 1), args, workload)
            result = sweep(args.model, p, top=args.top, steps=args.steps, executor=executor, launcher=args.launcher)
        if store is not None:
            from dataclasses import replace

            rows = tuple(replace(r, store_id=store.add_measurement(r.measurement)[0])
                         if r.measurement is not None else r for r in result.rows)
            result = replace(result, rows=rows, store_path=str(store.path))
    finally:
        if store is not None:
            store.close()
    print(json.dumps(result.to_dict(), indent=2) if args.json else result, end="" if not args.json else "\n")
    return 0 if result.measured else 1
