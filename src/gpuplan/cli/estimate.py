"""``gpuplan estimate MODEL [workload flags] [--gpu GPU] [--json]``."""

from __future__ import annotations

import argparse
import json

from gpuplan.cli._workload import add_json_argument, add_model_argument, add_workload_arguments, workload_from_args


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_workload_arguments(parser)
    parser.add_argument("--gpu", default=None, help="target GPU (adds fit, headroom, step time)")
    parser.add_argument("--cuda-module-loading", default="lazy", choices=("lazy", "eager"),
                        help="CUDA context size: lazy (CUDA >= 11.7, default) or eager (older stacks)")
    parser.add_argument("--weight-quant", default="none", choices=("none", "int8", "fp8", "int4"),
                        help="weight-only quantization: decode reads quantized weights (time with --gpu, "
                             "generate mode); the weight memory it would save is reported, not subtracted")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from gpuplan.estimate import estimate

    workload = workload_from_args(args)
    est = estimate(args.model, workload=workload, gpu=args.gpu, cuda_module_loading=args.cuda_module_loading,
                   weight_quant=args.weight_quant)
    if args.json:
        print(json.dumps(est.to_dict(), indent=2))
    else:
        print(est)
    return 1 if est.fits is False else 0
