"""``gpuplan`` entry point: parse, dispatch to a verb module, turn GpuplanError into one line.

Verb modules are imported only when their verb runs, so ``gpuplan doctor`` or ``gpuplan gpus``
never pay for importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence

from gpuplan.errors import GpuplanError

# verb -> (module under gpuplan.cli, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "estimate": ("estimate", "peak GPU memory (and time, with --gpu) of a training or inference step"),
    "fit": ("fit", "largest batch and cheapest memory techniques that fit a GPU"),
    "plan": ("plan", "multi-GPU layout, per-GPU memory, step time and launch configuration"),
    "recommend": ("recommend", "rank GPUs (and counts of them) for a workload"),
    "gpus": ("gpus", "list, show and compare catalog GPUs"),
    "doctor": ("doctor", "diagnose this machine's driver / CUDA / PyTorch setup"),
    "install": ("install", "print the right PyTorch install command"),
    "explain": ("explain", "explain a pasted CUDA / PyTorch error message"),
    "measure": ("measure", "run the workload for real here and compare with the estimate"),
    "calibrate": ("calibrate", "fit calibration factors from stored measurements"),
}


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line with exit code 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"gpuplan {self.prog.split(' ', 1)[-1] if ' ' in self.prog else ''}: error: {message}\n"
                  .replace("gpuplan : ", "gpuplan: "))


def _available_verbs() -> dict[str, tuple[str, str]]:
    found = {}
    for verb, (module, help_text) in VERBS.items():
        if importlib.util.find_spec(f"gpuplan.cli.{module}") is not None:
            found[verb] = (module, help_text)
    return found


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``verb``'s module is imported to add its flags."""
    parser = _Parser(prog="gpuplan", description="What your PyTorch workload needs from a GPU.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for name, (module, help_text) in _available_verbs().items():
        if name == verb:
            mod = importlib.import_module(f"gpuplan.cli.{module}")
            verb_parser = sub.add_parser(name, help=help_text, description=help_text)
            mod.add_parser(verb_parser)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug (tracebacks instead of one-line errors) is accepted anywhere on the line
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    verb = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(verb)
    args = parser.parse_args(argv)
    args.debug = debug
    if args.verb is None:
        parser.print_help()
        return 2
    module = importlib.import_module(f"gpuplan.cli.{VERBS[args.verb][0]}")
    try:
        code: int = module.run(args)
    except GpuplanError as exc:
        if args.debug:
            raise
        print(f"gpuplan {args.verb}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("gpuplan: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug, not bad input: still one line unless --debug
        if args.debug:
            raise
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(f"gpuplan {args.verb}: internal error: {type(exc).__name__}: {first} "
              "(rerun with --debug for the traceback, and please report it)", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
