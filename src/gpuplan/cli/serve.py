"""``gpuplan serve MODEL --gpu GPU [--tp N] [--pp N] [--dp N] [--ep N] | [--gpus N] [--engine vllm|sglang|hf]
[--max-model-len L]
[--context L --concurrency C | --input-len I --output-len O --rate R] [--gpu-memory-utilization U]
[--kv-cache-dtype auto|fp8] [--max-num-batched-tokens T] [--max-num-seqs S] [--quantization ...] [--enforce-eager]
[--ttft-slo S] [--itl-slo S] [--prices FILE] [--json]``.

``--engine llama.cpp|ollama`` (local inference, serve/llamacpp.py) takes a .gguf file, or a catalog name /
config.json with ``--gguf-type T``, and ``[--n-gpu-layers N] [--context L] [--concurrency C]
[--cache-type-k T] [--cache-type-v T] [--flash-attn on|off] [--tensor-split A,B,...]
[--override-tensor PATTERN=CPU] [--n-cpu-moe N] [--ubatch-size N] [--host-memory-bandwidth GB/s]``.

Exit 0 when the engine starts and the asked concurrency fits, 1 when it would refuse to start or the
concurrency does not fit, 2 on a usage error."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from typing import Any

from gpuplan.cli._workload import (
    _pipeline_fields,
    add_cache_argument,
    add_json_argument,
    add_model_argument,
    add_options,
    add_pipeline_arguments,
)
from gpuplan.cli.pictures import add_output_arguments, check_output_paths
from gpuplan.report.options import WORKLOAD_OPTIONS
from gpuplan.report.verb_options import LOCAL_GROUP, verb_options


def add_parser(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_options(parser, verb_options("serve"))  # --gpu, the layout, the engine and its target
    _add_pipeline_serve_arguments(parser)
    add_output_arguments(parser)
    add_json_argument(parser)
    add_cache_argument(parser)


ALL_ENGINES_FLAGS: tuple[str, ...] = ("gpu", "engine", "context", "concurrency")
"""serve's flags that every engine takes; the others of its description (report/options.py) are the paged
engines' (vllm, sglang, hf), refused by llama.cpp / Ollama: a flag added there is refused here without a list."""
PIPELINE_TAKES: tuple[str, ...] = ("gpu", "quantization", "prices")
"""serve's flags a diffusion pipeline's generations take too (its others are language-model engine flags)."""


LAYOUT_FLAGS: tuple[str, ...] = ("gpu", "tp", "pp", "dp", "ep", "gpus", "disaggregate", "prices")
"""serve's flags that choose the call (one layout, a layout search, disaggregated pools) or are read first."""


def _local_flags() -> tuple[str, ...]:
    return tuple(o.name for o in verb_options("serve") if o.group == LOCAL_GROUP)


def _paged_flags() -> tuple[str, ...]:
    return tuple(o.name for o in verb_options("serve") if o.name not in ALL_ENGINES_FLAGS and o.group != LOCAL_GROUP)


def _engine_flags() -> dict[str, object]:
    """Language-model serving flags and their defaults: a pipeline given one is told so in one line."""
    return {o.name: o.default for o in verb_options("serve") if o.name not in PIPELINE_TAKES}


# a diffusion pipeline's generation (serve/pipeline.py); the engine flags are for language models
PIPELINE_SERVE_FLAGS: tuple[str, ...] = ("image_size", "batch_size", "precision", "steps", "frames", "offload",
                                         "vae_tiling", "vae_slicing", "quantize_components")
def _add_pipeline_serve_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("diffusion / video pipelines (MODEL a pipeline: seconds per image, images per hour)")
    shared = {o.name: o for o in WORKLOAD_OPTIONS}
    add_options(g, (
        replace(shared["image_size"], help="image (video frame) size in pixels (default: the pipeline's)"),
        replace(shared["batch_size"], default=None, help="images (videos) per generation (default 1)"),
        replace(shared["precision"], help="weights and compute dtype (default: what people run on the GPU, bf16 "
                "where it has it)")))
    add_pipeline_arguments(parser, training=False)


def _pipeline_flags_given(args: argparse.Namespace, model: str) -> None:
    """A language model given a pipeline flag: one line."""
    from gpuplan.errors import ConfigError

    given = [f for f in PIPELINE_SERVE_FLAGS if getattr(args, f, None) is not None]
    if given:
        flag = "--" + given[0].replace("_", "-")
        raise ConfigError(f"{flag} applies to diffusion pipelines; {model} is served by an engine: use "
                          "--context/--concurrency or --input-len/--output-len/--rate")


def _run_pipeline(args: argparse.Namespace, source: object) -> int:
    """``gpuplan serve PIPELINE``: one GPU's generations (serve/pipeline.py). Exit 1 when it does not fit."""
    from gpuplan.advise.prices import load_prices
    from gpuplan.cli._workload import precision_for
    from gpuplan.errors import ConfigError
    from gpuplan.extras import require_workload
    from gpuplan.serve.pipeline import serve_pipeline
    from gpuplan.workload import Workload

    name = getattr(source, "name", args.model)
    engine = [n for n, default in _engine_flags().items() if getattr(args, n) != default]
    if engine:
        flag = "--" + engine[0].replace("_", "-")
        raise ConfigError(f"{flag} is a language-model engine flag; {name} is a diffusion pipeline: use "
                          "--image-size, --steps, --frames, --batch-size, --offload, --quantization")
    check_output_paths(args)
    height, width = args.image_size if args.image_size is not None else (None, None)
    args.mode = "infer"  # precision_for reads the verb's mode
    fields: dict[str, Any] = {"mode": "infer", "batch_size": args.batch_size or 1, "image_size": height,
                              "image_width": width, **_pipeline_fields(args),
                              "precision": args.precision if args.precision is not None else precision_for(args)}
    workload = Workload(**fields)
    require_workload(workload)
    prices = load_prices(args.prices) if args.prices else None
    result = serve_pipeline(source, args.gpu, workload, quantization=args.quantization,  # type: ignore[arg-type]
                            prices=prices)
    from gpuplan.cli.pictures import write_outputs

    data = result.to_dict()
    write_outputs(args, title=f"gpuplan serve {data['model']} on {data['gpu']}", result=result, data=data)
    print(json.dumps(data, indent=2) if args.json else result)
    return 0 if result.ok else 1


def _given(args: argparse.Namespace, parser_defaults: dict[str, object], names: tuple[str, ...]) -> list[str]:
    return [n for n in names if getattr(args, n) != parser_defaults.get(n)]


def _defaults() -> dict[str, object]:
    """The parser's defaults of the flags one engine kind takes and the other refuses (serve's description)."""
    return {o.name: o.default for o in verb_options("serve")}


def _run_local(args: argparse.Namespace) -> int:
    from gpuplan.errors import ConfigError
    from gpuplan.serve.llamacpp import serve_local

    paged = _given(args, _defaults(), _paged_flags())
    if paged:
        flags = ", ".join("--" + n.replace("_", "-") for n in paged)
        raise ConfigError(f"{flags}: flags of the paged engines (vllm, sglang, hf); --engine {args.engine} takes "
                          "--n-gpu-layers, --context, --concurrency, --cache-type-k/-v, --flash-attn, --tensor-split")
    if args.plot is not None or args.html is not None:
        raise ConfigError(f"--plot / --html are not drawn for --engine {args.engine} yet; use --json for the figures")
    result = serve_local(args.model, gpu=args.gpu, engine=args.engine, gguf_type=args.gguf_type,
                         n_gpu_layers=args.n_gpu_layers, context=args.context, concurrency=args.concurrency,
                         cache_type_k=args.cache_type_k, cache_type_v=args.cache_type_v,
                         flash_attn=args.flash_attn == "on", tensor_split=args.tensor_split,
                         override_tensor=args.override_tensor, n_cpu_moe=args.n_cpu_moe, ubatch=args.ubatch_size,
                         host_memory_bandwidth_gb_per_s=args.host_memory_bandwidth)
    print(json.dumps(result.to_dict(), indent=2) if args.json else result)
    return 0 if result.fits else 1


def run(args: argparse.Namespace) -> int:
    from gpuplan.advise.prices import load_prices
    from gpuplan.errors import ConfigError
    from gpuplan.serve import serve
    from gpuplan.serve.engines import is_local

    if is_local(args.engine):
        _pipeline_flags_given(args, args.model)
        return _run_local(args)
    from gpuplan.models.sources import resolve_model

    source = resolve_model(args.model)
    if source.kind == "pipeline":
        return _run_pipeline(args, source)
    _pipeline_flags_given(args, source.name)
    local = _given(args, _defaults(), _local_flags())
    if local:
        flags = ", ".join("--" + n.replace("_", "-") for n in local)
        raise ConfigError(f"{flags} are for local inference: add --engine llama.cpp or --engine ollama")
    if args.concurrency is not None and args.rate is not None:
        raise ConfigError("pass either --context/--concurrency or --input-len/--output-len/--rate, not both")
    prices = load_prices(args.prices) if args.prices else None
    if prices is not None and args.rate is None:
        raise ConfigError("--prices prices a target rate: add --rate R --input-len I --output-len O")
    check_output_paths(args)
    # the engine's options under their flag names, as the web page's call passes them (report/options.py)
    common = {o.name: getattr(args, o.name) for o in verb_options("serve")
              if o.name not in LAYOUT_FLAGS and o.group != LOCAL_GROUP}
    common["prices"] = prices
    if args.disaggregate is not None:
        if args.gpus is not None:
            raise ConfigError("--disaggregate sizes pools of one layout: give --tp/--dp/--ep, not --gpus")
        from gpuplan.serve.disaggregate import disaggregate

        asked = ("input_len", "output_len", "rate", "ttft_slo", "itl_slo")
        kwargs = {k: v for k, v in common.items() if k not in asked}
        pools = disaggregate(args.model, gpu=args.gpu, split=args.disaggregate, input_len=args.input_len,
                             output_len=args.output_len, rate=args.rate, ttft_slo=args.ttft_slo, itl_slo=args.itl_slo,
                             tp=args.tp or 1, pp=args.pp, dp=args.dp or 1, ep=args.ep or 1, **kwargs)
        return _print(args, pools, ok=pools.ok)
    if args.gpus is not None:
        given = [flag for flag, value in (("--tp", args.tp), ("--dp", args.dp), ("--ep", args.ep)) if value is not None]
        given += ["--pp"] if args.pp != 1 else []
        if given:
            raise ConfigError(f"--gpus {args.gpus} searches the layouts; drop {', '.join(given)} (or drop --gpus to "
                              "size the one layout given)")
        from gpuplan.serve.layouts import search_layouts

        search = search_layouts(args.model, gpu=args.gpu, gpus=args.gpus, **common)
        return _print(args, search, ok=search.ok)
    result = serve(args.model, gpu=args.gpu, tp=args.tp or 1, pp=args.pp, dp=args.dp or 1, ep=args.ep or 1,
                   **common)
    return _print(args, result, ok=result.ok and result.concurrency_fits and result.slo_met is not False)


def _print(args: argparse.Namespace, answer: object, *, ok: bool) -> int:
    from gpuplan.cli.pictures import write_outputs

    data = answer.to_dict()  # type: ignore[attr-defined]
    # the picture and tables are of one serve answer: the chosen layout's in a search (report/verbs.py)
    write_outputs(args, title=f"gpuplan serve {data['model']} on {data['gpu']}", result=answer, data=data)
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print(answer)
    return 0 if ok else 1
