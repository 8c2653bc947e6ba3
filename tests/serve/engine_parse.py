"""Parse a ``vllm serve ...`` command line with vLLM's own parser (run by the engine's Python, not gpuplan's).

Usage: ``python engine_parse.py 'vllm serve MODEL --flag value ...'``; prints one JSON object of the
parsed engine arguments, or exits non-zero with the parser's message. Kept free of gpuplan imports:
the engine's environment does not have gpuplan installed.
"""

from __future__ import annotations

import json
import shlex
import sys


def main() -> int:
    argv = shlex.split(sys.argv[1])
    if argv[:2] != ["vllm", "serve"]:
        print(f"not a vllm serve command: {argv[:2]}", file=sys.stderr)
        return 2
    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM < 0.11
        from vllm.utils import FlexibleArgumentParser  # type: ignore[no-redef]
    import vllm.platforms as platforms
    from vllm.engine.arg_utils import EngineArgs

    if not platforms.current_platform.device_type:
        # No GPU here: the parser reads defaults from DeviceConfig, which needs some platform.
        # The CPU platform answers that; the flags parsed and checked are the same.
        from vllm.platforms.cpu import CpuPlatform

        platforms._current_platform = CpuPlatform()
    from vllm.entrypoints.cli.serve import ServeSubcommand

    parser = FlexibleArgumentParser(prog="vllm")
    subparsers = parser.add_subparsers(dest="subcommand")
    command = ServeSubcommand()
    command.subparser_init(subparsers)
    args = parser.parse_args(argv[1:])
    command.validate(args)
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    engine = EngineArgs.from_cli_args(args)
    fields = ("model", "tensor_parallel_size", "pipeline_parallel_size", "max_model_len", "gpu_memory_utilization",
              "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "quantization")
    print(json.dumps({name: getattr(engine, name) for name in fields}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
