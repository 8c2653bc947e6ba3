"""``gpuplan fit MODEL --gpu GPU [workload flags] [--target-batch-size N] [--json]``."""

from __future__ import annotations

import argparse
import json
import sys
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
from gpuplan.errors import ConfigError
from gpuplan.report.verb_options import check_fit_axis, verb_options

if TYPE_CHECKING:
    pass


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_options(parser, verb_options("fit"))  # --gpu, --target-batch-size, --exact-batch, --axis
    add_workload_arguments(parser)
    add_output_arguments(parser)
    add_json_argument(parser)
    add_cache_argument(parser)


def run(args: argparse.Namespace) -> int:
    from gpuplan.advise.fit import fit
    from gpuplan.cli.pictures import write_outputs
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.hardware import get_gpu
    from gpuplan.measure.calibration import calibration_for_gpu

    gpu = get_gpu(args.gpu)  # unknown/ambiguous names fail here, before any tracing
    if args.exact_batch and args.target_batch_size is None:
        raise ConfigError("--exact-batch applies with --target-batch-size N only; add the target batch or drop it")
    check_fit_axis(vars(args), seq_len_given=args.seq_len is not None,  # the web page's rule too
                   spell=lambda name: "--" + name.replace("_", "-"))
    if args.axis == "seq-len":
        return _run_seq_len(args, gpu)
    if args.axis == "resolution":
        return _run_resolution(args, gpu)
    check_output_paths(args)
    with Progress(f"fit: tracing {args.model}", enabled=wanted(args.json)) as progress:
        result = fit(
            args.model,
            gpu,
            workload_from_args(args),
            target_batch_size=args.target_batch_size,
            exact_batch=args.exact_batch,
            calibration=calibration_for_gpu(gpu.id),
            progress=progress,
        )
    data = result.to_dict()
    write_outputs(args, title=f"gpuplan fit {result.model} on {result.gpu.id}", result=result, data=data)
    if args.json:
        print(json.dumps(data, indent=2))
        if result.reason:  # the text output says it on stdout; with --json stdout is the object only
            print(f"gpuplan fit: {result.reason}", file=sys.stderr)
    else:
        print(result)
    return 0 if result.ok else 1


def _run_seq_len(args: argparse.Namespace, gpu: Any) -> int:
    """``fit --axis seq-len``: the largest sequence length at the given batch (advise/fit.largest_seq_len)."""
    from gpuplan.advise.fit import largest_seq_len
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.measure.calibration import calibration_for_gpu

    for flag, given in (("--plot", getattr(args, "plot", None)), ("--html", getattr(args, "html", None))):
        if given:  # the batch options: check_fit_axis
            raise ConfigError(f"{flag} applies to --axis batch; --axis seq-len answers the largest --seq-len only")
    with Progress(f"fit: tracing {args.model}", enabled=wanted(args.json)) as progress:
        result = largest_seq_len(args.model, gpu, workload_from_args(args),
                                 calibration=calibration_for_gpu(gpu.id), progress=progress, ladder=True)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        if result.reason:
            print(f"gpuplan fit: {result.reason}", file=sys.stderr)
    else:
        print(result)
    return 0 if result.ok else 1


def _run_resolution(args: argparse.Namespace, gpu: Any) -> int:
    """``fit --axis resolution``: a pipeline's largest square image at the given batch
    (advise/fit.largest_resolution)."""
    from gpuplan.advise.fit import largest_resolution
    from gpuplan.cli.pictures import write_outputs
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.measure.calibration import calibration_for_gpu

    check_output_paths(args)
    with Progress(f"fit: tracing {args.model}", enabled=wanted(args.json)) as progress:
        result = largest_resolution(args.model, gpu, workload_from_args(args),
                                    calibration=calibration_for_gpu(gpu.id), progress=progress)
    data = result.to_dict()
    write_outputs(args, title=f"gpuplan fit {result.model} on {result.gpu.id} (resolution)", result=result,
                  data=data)
    if args.json:
        print(json.dumps(data, indent=2))
        if result.reason:
            print(f"gpuplan fit: {result.reason}", file=sys.stderr)
    else:
        print(result)
    return 0 if result.ok else 1

