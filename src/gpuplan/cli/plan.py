"""``gpuplan plan MODEL --gpus N --gpu GPU [--nodes M] [--tp T] [--pp P] [--dp D] [--zero S | --fsdp]
[--global-batch-size G] [--micro-batch-size m] [workload flags] [--emit torchrun|deepspeed|accelerate|torchtitan]``."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from gpuplan.cli._workload import (
    _int,
    add_cache_argument,
    add_json_argument,
    add_model_argument,
    add_workload_arguments,
    positive_float,
    workload_from_args,
)
from gpuplan.cli.pictures import add_output_arguments, check_output_paths
from gpuplan.parallel.layout import CP_COMMS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from gpuplan.parallel.plan import Plan
    from gpuplan.workload import Workload


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--gpus", type=_int, required=True, metavar="N", help="total GPUs")
    parser.add_argument("--gpu", required=True, help="GPU type (catalog name)")
    g = parser.add_argument_group("cluster")
    g.add_argument("--nodes", type=_int, default=None, metavar="M")
    g.add_argument("--gpus-per-node", type=_int, default=None, metavar="K")
    g.add_argument(
        "--inter-node-gbps",
        type=positive_float("a bandwidth in Gbit/s, e.g. 400"),
        default=None,
        metavar="GBPS",
        help="network per GPU between nodes, Gbit/s per direction (default by GPU generation)",
    )
    lay = parser.add_argument_group("layout (left open: searched)")
    lay.add_argument("--tp", type=_int, default=None)
    lay.add_argument("--pp", type=_int, default=None)
    lay.add_argument("--dp", type=_int, default=None)
    lay.add_argument("--ep", type=_int, default=None, help="expert-parallel ranks (MoE models; divides dp)")
    lay.add_argument(
        "--cp",
        type=_int,
        default=None,
        help="context-parallel ranks (each sequence split over them); default: 1, searched when nothing fits",
    )
    lay.add_argument(
        "--cp-comm",
        default="ring",
        choices=CP_COMMS,
        help="context-parallel attention: ring (torchtitan, Megatron p2p), all-to-all (Ulysses, Megatron a2a), "
        "hierarchical (Megatron a2a+p2p); default ring",
    )
    shard = lay.add_mutually_exclusive_group()
    shard.add_argument("--zero", type=_int, default=None, choices=(0, 1, 2, 3), help="DeepSpeed ZeRO stage")
    shard.add_argument("--fsdp", action="store_true", default=None, help="FSDP2 (fully_shard)")
    shard.add_argument(
        "--megatron",
        action="store_true",
        default=None,
        help="Megatron-LM (16-bit weights, fp32 master weights and main grads, its DDP)",
    )
    lay.add_argument(
        "--no-sequence-parallel",
        dest="sequence_parallel",
        action="store_false",
        help="tensor parallelism without Megatron sequence parallelism",
    )
    lay.add_argument("--global-batch-size", type=_int, default=None, metavar="G")
    lay.add_argument("--micro-batch-size", type=_int, default=None, metavar="m")
    add_workload_arguments(parser)
    # None: the user left activation checkpointing open (searched); a value is never overridden
    parser.set_defaults(checkpointing=None)
    parser.add_argument(
        "--emit",
        choices=("torchrun", "deepspeed", "accelerate", "torchtitan"),
        default=None,
        help="print the launch configuration for this engine (torchtitan: a job TOML for torchtitan.train)",
    )
    add_output_arguments(parser)
    add_json_argument(parser)
    add_cache_argument(parser)


def run(args: argparse.Namespace) -> int:
    from gpuplan.cli.pictures import write_outputs
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.parallel.emit import emit, layout_engine_note
    from gpuplan.parallel.plan import plan
    from gpuplan.report.verbs import plan_sections

    workload = workload_from_args(args, checkpointing=args.checkpointing or "none")
    check_output_paths(args)
    progress = Progress(f"plan: tracing {args.model} and searching layouts", enabled=wanted(args.json))
    with progress:
        p = _plan(plan, args, workload)
    emitted = emit(p, args.emit) if args.emit else None  # refuses (exit 2) before anything is printed
    note = layout_engine_note(p.best.layout, args.emit, p.workload) if args.emit else None
    data = p.to_dict()
    write_outputs(args, title=f"gpuplan plan {p.model} on {p.gpus}× {p.gpu.id}", data=data, text=str(p),
                  figure=lambda: _figure(data), sections=lambda: plan_sections(data))
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


def _figure(data: dict[str, Any]) -> Figure:
    from gpuplan.report.plot import plan_figure

    return plan_figure(data)


def _plan(plan: Callable[..., Plan], args: argparse.Namespace, workload: Workload) -> Plan:
    from gpuplan.parallel.emit import engine_filter

    return plan(
        args.model,
        gpus=args.gpus,
        gpu=args.gpu,
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        inter_node_gbps=args.inter_node_gbps,
        dp=args.dp,
        tp=args.tp,
        pp=args.pp,
        zero=args.zero,
        fsdp=args.fsdp,
        global_batch_size=args.global_batch_size,
        micro_batch_size=args.micro_batch_size,
        sequence_parallel=args.sequence_parallel,
        megatron=args.megatron,
        ep=args.ep,
        cp=args.cp,
        cp_comm=args.cp_comm,
        emit=engine_filter(args.emit) if args.emit else None,  # its layouts only; refused before the trace if none
        workload=workload,
        checkpointing_fixed=args.checkpointing is not None,
    )
