"""``gpuplan measure MODEL [workload flags] [--steps N] [--warmup N] [--force] [--nproc N --layout L]
[--launcher local|slurm --partition P [--nodes N --gpus-per-node G --time-min T --account A --cpus-per-task C
--job-dir DIR]]
[--store PATH | --no-store] [--json]``: run the workload here (or on a Slurm cluster), for real, next to its
estimate."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from gpuplan.cli._launcher import executor_from_args
from gpuplan.cli._workload import (
    add_cache_argument,
    add_json_argument,
    add_model_argument,
    add_options,
    add_workload_arguments,
    workload_from_args,
)
from gpuplan.report.verb_options import MEASURE_LAYOUTS, verb_options

if TYPE_CHECKING:
    from gpuplan.measure.executor import Executor
    from gpuplan.measure.store import Store


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_workload_arguments(parser, pipelines=False)
    add_options(parser, verb_options("measure"))  # described once (report/verb_options.py)
    add_json_argument(parser)
    add_cache_argument(parser)


def check_store_arguments(args: argparse.Namespace) -> None:
    if args.no_store and args.store is not None:  # contradictory: which one was meant is unknowable
        from gpuplan.errors import ConfigError

        raise ConfigError(f"--store {args.store!r} and --no-store cannot be combined: keep one")


def open_store(args: argparse.Namespace) -> Store | None:
    """The store, opened before any work (a bad path fails before minutes of it); None with --no-store."""
    if args.no_store:
        return None
    from gpuplan.measure.store import Store

    return Store(args.store)


def run(args: argparse.Namespace) -> int:
    from gpuplan.measure.local import Options

    check_store_arguments(args)
    workload = workload_from_args(args)
    options = Options(steps=args.steps, warmup=args.warmup, force=args.force, record=not args.no_record)
    options.check(workload)
    executor, nproc = _executor(args)
    store = open_store(args)
    from gpuplan.cli.progress import Progress, wanted

    try:
        with Progress(f"measure: running {args.model} ({args.warmup} warm-up + {args.steps} timed steps)",
                      enabled=wanted(args.json)):
            if nproc != 1 or args.layout is not None:
                from gpuplan.measure.launch import measure_distributed

                m = measure_distributed(args.model, workload=workload, options=options, nproc=nproc,
                                        layout=args.layout, executor=executor)
            else:
                from gpuplan.measure.local import measure

                m = measure(args.model, workload=workload, options=options)
        if store is not None:
            from dataclasses import replace

            ids = store.add_measurement(m)
            m = replace(m, store_id=ids[0], store_path=str(store.path))
    finally:
        if store is not None:
            store.close()
    from gpuplan.report.measure import measurement_to_dict, render_measurement

    print(json.dumps(measurement_to_dict(m), indent=2) if args.json else render_measurement(m))
    return 0


def _executor(args: argparse.Namespace) -> tuple[Executor | None, int]:
    """``--launcher``'s executor and the ranks to run (all checks before any work)."""
    from gpuplan.errors import ConfigError

    if args.launcher == "local":
        shape = "--nodes" if args.nodes is not None else "--gpus-per-node" if args.gpus_per_node is not None else None
        if shape:
            raise ConfigError(f"{shape} applies to --launcher slurm only (locally, --nproc gives the ranks)")
    elif args.layout is None and args.partition is not None:
        raise ConfigError("--launcher slurm runs the multi-process path: give --layout L "
                          f"({', '.join(MEASURE_LAYOUTS)})")
    executor, nproc = executor_from_args(args, nproc=args.nproc if args.nproc != 1 else None, nodes=args.nodes,
                                         gpus_per_node=args.gpus_per_node)
    return executor, nproc if nproc is not None else args.nproc
