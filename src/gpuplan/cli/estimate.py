"""``gpuplan estimate MODEL [workload flags] [--gpu GPU] [--json]``."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from gpuplan.cli._workload import (
    add_cache_argument,
    add_json_argument,
    add_model_argument,
    add_options,
    add_workload_arguments,
    workload_from_args,
)
from gpuplan.cli.pictures import add_output_arguments, check_output_paths
from gpuplan.report.verb_options import verb_options

if TYPE_CHECKING:

    pass


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_workload_arguments(parser)
    add_options(parser, verb_options("estimate"))  # --gpu, --cuda-module-loading, --weight-quant
    add_output_arguments(parser)
    add_json_argument(parser)
    add_cache_argument(parser)


def run(args: argparse.Namespace) -> int:
    from gpuplan.cli.pictures import write_outputs
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.estimate import estimate
    from gpuplan.measure.calibration import calibration_for_gpu

    workload = workload_from_args(args)
    check_output_paths(args)
    with Progress(f"tracing {args.model}", enabled=wanted(args.json)):
        options = {o.name: getattr(args, o.name) for o in verb_options("estimate")}  # as the web page's call
        est = estimate(args.model, workload=workload, calibration=calibration_for_gpu(args.gpu), **options)
    data = est.to_dict()
    write_outputs(args, title=f"gpuplan estimate {est.model}", result=est, data=data)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(est)
    return 1 if est.fits is False else 0

