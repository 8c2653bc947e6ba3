"""``gpuplan plan MODEL --gpus N --gpu GPU [--nodes M] [--tp T] [--pp P] [--dp D] [--zero S | --fsdp]
[--global-batch-size G] [--micro-batch-size m] [workload flags]
[--emit torchrun|deepspeed|accelerate|torchtitan|jobset|skypilot [--queue NAME]]``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuplan.cli._workload import (
    add_cache_argument,
    add_json_argument,
    add_model_argument,
    add_options,
    add_workload_arguments,
    workload_from_args,
)
from gpuplan.cli.pictures import add_output_arguments, check_output_paths
from gpuplan.report.verb_options import emit_options, verb_options

if TYPE_CHECKING:

    from gpuplan.parallel.plan import Plan
    from gpuplan.workload import Workload


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_plan_arguments(parser)
    add_options(parser, emit_options("plan"))  # --emit, --queue
    add_output_arguments(parser)
    add_json_argument(parser)
    add_cache_argument(parser)


def add_plan_arguments(parser: argparse.ArgumentParser, *, pipelines: bool = True) -> None:
    """MODEL, the GPUs, the cluster, the layout and the workload: what ``plan`` and ``sweep`` share
    (``pipelines=False``: sweep runs real steps of one model, and its ``--steps`` counts timed steps)."""
    add_model_argument(parser)
    add_options(parser, verb_options("plan"))  # --gpus, --gpu, the cluster and the layout
    add_workload_arguments(parser, pipelines=pipelines)
    # None: the user left activation checkpointing open (searched); a value is never overridden
    parser.set_defaults(checkpointing=None)


def run(args: argparse.Namespace) -> int:
    from gpuplan.cli.pictures import write_outputs
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.parallel.emit import emit, layout_engine_note
    from gpuplan.parallel.emit_cluster import check_queue
    from gpuplan.parallel.plan import plan

    # checkpointing left open: the Workload's default (none; full with --offload activations), searched by plan
    workload = workload_from_args(args)
    check_queue(args.queue, args.emit)  # before the trace
    check_output_paths(args)
    progress = Progress(f"plan: tracing {args.model} and searching layouts", enabled=wanted(args.json))
    with progress:
        p = plan_from_args(plan, args, workload)
    emitted = emit(p, args.emit, queue=args.queue) if args.emit else None  # refuses (exit 2) before anything is printed
    note = layout_engine_note(p.best.layout, args.emit, p.workload) if args.emit else None
    data = p.to_dict()
    write_outputs(args, title=f"gpuplan plan {p.model} on {p.gpus}× {p.gpu.id}", result=p, data=data)
    if args.json:
        out = data
        if emitted is not None:
            out["emit"] = {"engine": args.emit, "text": emitted, "note": note}
        print(json.dumps(out, indent=2))
    else:
        print(p)
        if emitted is not None:
            print(f"\n--- {args.emit} ---")
            if note:
                print(f"# note: {note}")
            print(emitted, end="")
    return 0 if p.fits else 1


def plan_from_args(plan: Callable[..., Plan], args: argparse.Namespace, workload: Workload, **extra: Any) -> Plan:
    from gpuplan.parallel.emit import engine_filter

    emit = getattr(args, "emit", None)
    return plan(
        args.model,
        **{o.name: getattr(args, o.name) for o in verb_options("plan")},  # the layout flags, as the web page's call
        emit=engine_filter(emit) if emit else None,  # its layouts only; refused before the trace if none
        workload=workload,
        checkpointing_fixed=args.checkpointing is not None,
        **extra,
    )
