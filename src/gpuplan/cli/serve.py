"""``gpuplan serve MODEL --gpu GPU [--tp N] [--pp N] [--dp N] [--ep N] | [--gpus N] [--engine vllm|sglang|hf]
[--max-model-len L]
[--context L --concurrency C | --input-len I --output-len O --rate R] [--gpu-memory-utilization U]
[--kv-cache-dtype auto|fp8] [--max-num-batched-tokens T] [--max-num-seqs S] [--quantization ...]
[--ttft-slo S] [--itl-slo S] [--prices FILE] [--json]``.

Exit 0 when the engine starts and the asked concurrency fits, 1 when it would refuse to start or the
concurrency does not fit, 2 on a usage error."""

from __future__ import annotations

import argparse
import json

from gpuplan.cli._workload import _int, add_cache_argument, add_json_argument, add_model_argument, positive_float
from gpuplan.cli.pictures import add_output_arguments, check_output_paths


def add_parser(parser: argparse.ArgumentParser) -> None:
    from gpuplan.serve.engines import ENGINES
    from gpuplan.serve.kv import KV_CACHE_DTYPES
    from gpuplan.workload import WEIGHT_QUANTS

    add_model_argument(parser)
    parser.add_argument("--gpu", required=True, metavar="GPU", help="catalog GPU (gpuplan gpus lists them)")
    parser.add_argument("--tp", type=_int, default=None, metavar="N", help="tensor-parallel size (default 1)")
    parser.add_argument("--pp", type=_int, default=1, metavar="N", help="pipeline-parallel size (default 1)")
    parser.add_argument("--dp", type=_int, default=None, metavar="N",
                        help="data-parallel attention ranks, each with --tp GPUs and its own KV cache (default 1)")
    parser.add_argument("--ep", type=_int, default=None, metavar="N",
                        help="expert parallelism for MoE models: 1 (experts split by TP) or --tp × --dp")
    parser.add_argument("--gpus", type=_int, default=None, metavar="N",
                        help="search the layouts of N GPUs (tp × dp = N, MoE experts TP-split or expert-parallel) "
                        "instead of giving --tp/--dp/--ep; the best one that starts and meets the target is chosen")
    parser.add_argument("--engine", choices=ENGINES, default="vllm", help="serving engine modelled (default vllm)")
    parser.add_argument("--max-model-len", type=_int, default=None, metavar="L",
                        help="longest sequence the engine accepts (default: the model's trained context)")
    parser.add_argument("--context", type=_int, default=None, metavar="L",
                        help="tokens per sequence for the concurrency answer (default --max-model-len)")
    parser.add_argument("--concurrency", type=_int, default=None, metavar="C", help="concurrent sequences asked")
    parser.add_argument("--input-len", type=_int, default=None, metavar="I", help="prompt tokens per request")
    parser.add_argument("--output-len", type=_int, default=None, metavar="O", help="generated tokens per request")
    parser.add_argument("--rate", type=positive_float("a request rate"), default=None, metavar="R",
                        help="target requests per second: replicas and GPUs needed")
    parser.add_argument("--gpu-memory-utilization", type=float, default=None, metavar="U",
                        help="vLLM's fraction of GPU memory (default 0.9); SGLang's --mem-fraction-static")
    parser.add_argument("--kv-cache-dtype", choices=KV_CACHE_DTYPES, default="auto", help="KV cache dtype")
    parser.add_argument("--max-num-batched-tokens", type=_int, default=None, metavar="T",
                        help="token budget of one engine step (the profile run's size; default: the engine's)")
    parser.add_argument("--max-num-seqs", type=_int, default=None, metavar="S",
                        help="most sequences in one step (default: the engine's)")
    parser.add_argument("--quantization", choices=WEIGHT_QUANTS, default="none",
                        help="weight-only quantized checkpoint (layout of gpuplan.memory.weight_quant)")
    parser.add_argument("--ttft-slo", type=positive_float("a time to first token target"), default=None,
                        metavar="SECONDS", help="time-to-first-token target: the largest concurrency (or, with --rate, "
                        "the replicas) meeting it at p99")
    parser.add_argument("--itl-slo", type=positive_float("an inter-token latency target"), default=None,
                        metavar="SECONDS", help="inter-token latency target: the largest decode batch meeting it")
    parser.add_argument("--prices", default=None, metavar="FILE",
                        help="your $/hour per GPU (YAML/JSON mapping or CSV): cost per million tokens with --rate")
    add_output_arguments(parser)
    add_json_argument(parser)
    add_cache_argument(parser)


def run(args: argparse.Namespace) -> int:
    from gpuplan.advise.prices import load_prices
    from gpuplan.errors import ConfigError
    from gpuplan.serve import serve

    if args.concurrency is not None and args.rate is not None:
        raise ConfigError("pass either --context/--concurrency or --input-len/--output-len/--rate, not both")
    prices = load_prices(args.prices) if args.prices else None
    if prices is not None and args.rate is None:
        raise ConfigError("--prices prices a target rate: add --rate R --input-len I --output-len O")
    check_output_paths(args)
    common = {"engine": args.engine, "max_model_len": args.max_model_len, "context": args.context,
              "concurrency": args.concurrency, "input_len": args.input_len, "output_len": args.output_len,
              "rate": args.rate, "gpu_memory_utilization": args.gpu_memory_utilization,
              "kv_cache_dtype": args.kv_cache_dtype, "max_num_batched_tokens": args.max_num_batched_tokens,
              "max_num_seqs": args.max_num_seqs, "quantization": args.quantization, "prices": prices,
              "ttft_slo": args.ttft_slo, "itl_slo": args.itl_slo}
    if args.gpus is not None:
        given = [flag for flag, value in (("--tp", args.tp), ("--dp", args.dp), ("--ep", args.ep)) if value is not None]
        given += ["--pp"] if args.pp != 1 else []
        if given:
            raise ConfigError(f"--gpus {args.gpus} searches the layouts; drop {', '.join(given)} (or drop --gpus to "
                              "size the one layout given)")
        from gpuplan.serve.layouts import search_layouts

        search = search_layouts(args.model, gpu=args.gpu, gpus=args.gpus, **common)
        return _print(args, search, search.shown, ok=search.ok)
    result = serve(args.model, gpu=args.gpu, tp=args.tp or 1, pp=args.pp, dp=args.dp or 1, ep=args.ep or 1,
                   **common)
    return _print(args, result, result, ok=result.ok and result.concurrency_fits and result.slo_met is not False)


def _print(args: argparse.Namespace, answer: object, result: object, *, ok: bool) -> int:
    from gpuplan.cli.pictures import write_outputs
    from gpuplan.report.plot import serve_figure
    from gpuplan.report.verbs import serve_sections

    data = answer.to_dict()  # type: ignore[attr-defined]
    # the figure and report sections picture one serve answer: the chosen layout's in a search
    shown = result.to_dict() if result is not None else data  # type: ignore[attr-defined]
    write_outputs(args, title=f"gpuplan serve {data['model']} on {data['gpu']}", data=data, text=str(answer),
                  figure=lambda: serve_figure(shown), sections=lambda: serve_sections(shown))
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(answer)
    return 0 if ok else 1
