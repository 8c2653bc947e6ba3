"""Parse ``vllm serve ...`` / ``python -m sglang.launch_server ...`` command lines with the engine's own
parser (run by the engine's Python, not gpuplan's).

Usage: ``python engine_parse.py '["vllm serve MODEL --flag value ...", ...]' ['["extra_field", ...]']``; prints a
JSON list with, per command, the parsed engine arguments (the fixed fields, plus the extra ones named) or
{"error": the parser's message}. Kept free of gpuplan imports:
the engine's environment does not have gpuplan installed.
"""

from __future__ import annotations

import json
import shlex
import sys


def sglang(commands: list[str], extra: tuple[str, ...] = ()) -> int:
    """``python -m sglang.launch_server ...`` through SGLang's own ServerArgs.add_cli_args parser."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    fields = ("model_path", "tp_size", "pp_size", "context_length", "mem_fraction_static", "chunked_prefill_size",
              "max_running_requests", "kv_cache_dtype", "quantization", *extra)
    out: list[dict[str, object]] = []
    for line in commands:
        argv = shlex.split(line)
        if argv[:3] != ["python", "-m", "sglang.launch_server"]:
            out.append({"error": f"not an sglang.launch_server command: {argv[:3]}"})
            continue
        parser = argparse.ArgumentParser(exit_on_error=False)
        ServerArgs.add_cli_args(parser)
        try:
            args = parser.parse_args(argv[3:])
        except (SystemExit, Exception) as exc:
            out.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        out.append({name: getattr(args, name) for name in fields})
    print(json.dumps(out, default=_plain))
    return 0


def _plain(value: object) -> object:
    """A parsed value the parser turned into an object (vLLM's KVTransferConfig): its fields, else its text."""
    fields = getattr(value, "__dict__", None)
    return {k: v for k, v in fields.items() if not k.startswith("_")} if fields else str(value)


def main() -> int:
    commands = json.loads(sys.argv[1])
    extra = tuple(json.loads(sys.argv[2])) if len(sys.argv) > 2 else ()
    if commands and commands[0].startswith("python -m sglang"):
        return sglang(commands, extra)
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM < 0.11
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef]
    import vllm.platforms as platforms
    from vllm.entrypoints.cli.serve import ServeSubcommand

    if not platforms.current_platform.device_type:
        # No GPU here: the parser reads defaults from DeviceConfig, which needs some platform.
        # The CPU platform answers that; the flags parsed and checked are the same.
        from vllm.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
    fields = ("model", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "gpu_memory_utilization",
              "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "quantization", *extra)
    out: list[dict[str, object]] = []
    for line in commands:
        argv = shlex.split(line)
        if argv[:2] != ["vllm", "serve"]:
            out.append({"error": f"not a vllm serve command: {argv[:2]}"})
            continue
        parser = FlexibleArgumentParser(prog="vllm", exit_on_error=False)
        subparsers = parser.add_subparsers(dest="subcommand")
        command = ServeSubcommand()
        command.subparser_init(subparsers)
        try:
            args = parser.parse_args(argv[1:])
            command.validate(args)
        except (SystemExit, Exception) as exc:  # argparse exits on a bad value
            out.append({"error": f"{type(exc).__name__}: {exc}"})
            continue
        if getattr(args, "model_tag", None):
            args.model = args.model_tag
        # EngineArgs(...) would resolve the model on the Hub (a download, offline here): the parser's own
        # types and choices are the check, read from its namespace
        out.append({name: getattr(args, name) for name in fields})
    print(json.dumps(out, default=_plain))
    return 0


if __name__ == "__main__":
    sys.exit(main())
