"""``gpuplan recommend MODEL [workload flags] [--max-gpus N] [--budget-usd X] [--prices FILE] [--json]``."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
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
    add_options(parser, verb_options("recommend"))  # --max-gpus, --budget-usd, --prices, --top
    add_output_arguments(parser)
    add_json_argument(parser)
    add_cache_argument(parser)
    _add_serve_arguments(parser)


def _add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """``--mode serve``: rank GPUs × counts for a serving target (gpuplan.advise.recommend.recommend_serve)."""
    from gpuplan.serve.engines import PAGED_ENGINES

    mode = next(a for a in parser._actions if a.dest == "mode")  # argparse has no public lookup
    mode.choices = [*(mode.choices or ()), "serve"]
    g = parser.add_argument_group("serving (--mode serve)")
    serve = {o.name: o for o in verb_options("serve")}  # the same flags as gpuplan serve's (report/options.py)
    asked = ("context", "concurrency", "input_len", "output_len", "rate", "kv_cache_dtype")
    add_options(g, (replace(serve["engine"], choices=PAGED_ENGINES, web_choices=()), *(serve[n] for n in asked)))


def run(args: argparse.Namespace) -> int:
    if args.mode == "serve":
        return _run_serve(args)
    from gpuplan.advise.prices import load_prices
    from gpuplan.advise.recommend import recommend
    from gpuplan.cli.pictures import write_outputs
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.errors import ConfigError
    from gpuplan.report.advise import render_recommendation

    if args.max_gpus < 1:
        raise ConfigError(f"--max-gpus {args.max_gpus} is out of range: allowed 1..100000")
    if args.top < 1:
        raise ConfigError(f"--top {args.top} is out of range: the rows shown must be at least 1")
    prices = load_prices(args.prices) if args.prices else None
    check_output_paths(args)
    with Progress(f"recommend: tracing {args.model}", enabled=wanted(args.json)) as progress:
        result = recommend(
            args.model,
            workload_from_args(args),
            max_gpus=args.max_gpus,
            budget_usd=args.budget_usd,
            prices=prices,
            progress=progress,
            precision_per_gpu=args.precision is None,  # each GPU in what people run on it
        )
    data = result.to_dict()
    text = render_recommendation(result, top=args.top)
    write_outputs(args, title=f"gpuplan recommend {result.model}", result=result, data=data, text=text)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(text)
        if not result.ok:
            print(_nothing_fits(result))
    if not result.ok and args.json:
        import sys

        print(_nothing_fits(result), file=sys.stderr)
    return 0 if result.ok else 1


def _run_serve(args: argparse.Namespace) -> int:
    from gpuplan.advise.prices import load_prices
    from gpuplan.advise.recommend import recommend_serve
    from gpuplan.cli.progress import Progress, wanted
    from gpuplan.errors import ConfigError

    if args.concurrency is not None and args.rate is not None:
        raise ConfigError("pass either --context/--concurrency or --input-len/--output-len/--rate, not both")
    for flag, given in (("--plot", args.plot), ("--html", args.html)):
        if given:  # not drawn for the serving answer yet: say so rather than write nothing
            raise ConfigError(f"{flag} is not drawn for recommend --mode serve; use it with gpuplan serve MODEL "
                              "--gpu GPU for one GPU's serving picture")
    prices = load_prices(args.prices) if args.prices else None
    with Progress(f"recommend: sizing {args.model} for serving", enabled=wanted(args.json)) as progress:
        result = recommend_serve(args.model, engine=args.engine, context=args.context, concurrency=args.concurrency,
                                 input_len=args.input_len, output_len=args.output_len, rate=args.rate,
                                 kv_cache_dtype=args.kv_cache_dtype, quantization=getattr(args, "weight_quant", "none"),
                                 max_gpus=args.max_gpus, prices=prices, progress=progress)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result)
    return 0 if result.ok else 1


def _nothing_fits(result: object) -> str:
    from gpuplan.units import format_bytes

    largest = getattr(result, "largest_gpu", None)
    needed = getattr(result, "needed_bytes", None)
    max_gpus = getattr(result, "max_gpus", 1)
    need = f"needs {format_bytes(needed)} per GPU" if needed else "does not fit"
    return (
        f"nothing fits: even the largest GPU, {largest}, {need} with {max_gpus} GPU(s); "
        "raise --max-gpus or reduce the batch / use --checkpointing full"
    )
