"""``gpuplan`` entry point: parse, dispatch to a verb module, turn GpuplanError into one line.

Verb modules are imported only when their verb runs, so ``gpuplan doctor`` or ``gpuplan gpus``
never pay for importing torch.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import gc
import importlib
import importlib.util
import logging
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

from gpuplan import errors
from gpuplan.errors import GpuplanError
from gpuplan.trace.cache import TraceCache, use_trace_cache
from gpuplan.version import VERSION

# verb -> (module under gpuplan.cli, one-line help)
VERBS: dict[str, tuple[str, str]] = {
    "estimate": ("estimate", "peak GPU memory (and time, with --gpu) of a training or inference step"),
    "fit": ("fit", "largest batch and cheapest memory techniques that fit a GPU"),
    "plan": ("plan", "multi-GPU layout, per-GPU memory, step time and launch configuration"),
    "recommend": ("recommend", "rank GPUs (and counts of them) for a workload"),
    "gpus": ("gpus", "list, show and compare catalog GPUs"),
    "models": ("models", "list the built-in catalog models (names MODEL accepts)"),
    "doctor": ("doctor", "diagnose this machine's driver / CUDA / PyTorch setup"),
    "install": ("install", "print the right PyTorch install command"),
    "explain": ("explain", "explain a pasted CUDA / PyTorch error message"),
    "measure": ("measure", "run the workload for real here and compare with the estimate"),
    "calibrate": ("calibrate", "fit calibration factors from stored measurements"),
    "sweep": ("sweep", "measure the plan's top layouts for a few steps (Slurm or here): predicted vs measured"),
    "serve": ("serve", "serving capacity with vLLM / SGLang: KV cache, concurrency, launch command"),
    "rl": ("rl", "RL post-training (GRPO / PPO / DAPO / DPO): memory per GPU and time of every phase"),
    "ui": ("ui", "local web page (loopback) over the same library calls"),
}


# An error longer than this is cut: one readable line, whatever a model or a file put in the message.
MAX_ERROR_CHARS = 300


def one_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``message`` on one line of at most ``limit`` characters (the library's rule, the CLI's limit)."""
    return errors.one_line(message, limit)


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors in one line with exit code 2 (no usage dump)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        verb = self.prog.split(" ", 1)[-1] if " " in self.prog else ""
        prefix = f"gpuplan {verb}" if verb else "gpuplan"
        self.exit(2, one_line(f"{prefix}: error: {message}") + "\n")


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every ``--flag`` a parser (and the verb it dispatches to, once added) accepts."""
    names = [s for a in parser._actions for s in a.option_strings if s.startswith("--")]
    for action in parser._actions:  # argparse has no public walk of its actions
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                names += _option_strings(sub)
    return names


def _unknown_flags_message(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    flags = [e.split("=", 1)[0] for e in extras if e.startswith("-") and e != "-"]
    if not flags:
        return f"unexpected argument(s) {' '.join(extras)}"
    known = sorted(set(_option_strings(parser)))
    parts = []
    for flag in flags:
        hits = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        parts.append(f"unknown flag {flag}" + (f"; did you mean {hits[0]}?" if hits else ""))
    return "; ".join(parts) + " (--help lists the flags)"


def _available_verbs() -> dict[str, tuple[str, str]]:
    found = {}
    for verb, (module, help_text) in VERBS.items():
        if importlib.util.find_spec(f"gpuplan.cli.{module}") is not None:
            found[verb] = (module, help_text)
    return found


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``verb``'s module is imported to add its flags."""
    parser = _Parser(prog="gpuplan", description="What your PyTorch workload needs from a GPU.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and library logging")
    parser.add_argument("--version", action="version", version=f"gpuplan {VERSION}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for name, (module, help_text) in _available_verbs().items():
        if name == verb:
            mod = importlib.import_module(f"gpuplan.cli.{module}")
            verb_parser = sub.add_parser(name, help=help_text, description=help_text)
            mod.add_parser(verb_parser)
        else:
            sub.add_parser(name, help=help_text)
    return parser


def _check_argv(argv: list[str]) -> tuple[str | None, str | None]:
    """-> (verb, usage error). Catches what argparse would turn into a crash or a vague message."""
    verb = next((a for a in argv if not a.startswith("-")), None)
    if verb is not None and verb not in VERBS:
        hits = difflib.get_close_matches(verb, list(VERBS), n=1, cutoff=0.6)
        hint = f"; did you mean {hits[0]}?" if hits else ""
        return None, (f"gpuplan: error: unknown command {verb!r}{hint} (commands: {', '.join(VERBS)}; "
                      "`gpuplan --help` says what each does)")
    for arg in argv:
        if arg == "--":
            break
        flag, sep, value = arg.partition("=")
        # argparse drops a '--' value and hands the flag an empty list (a TypeError later)
        if arg.startswith("-") and sep and value == "--":
            prefix = f"gpuplan {verb}" if verb else "gpuplan"
            return None, f"{prefix}: error: {flag} needs a value, got '--'"
    return verb, None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # --debug (tracebacks instead of one-line errors) is accepted anywhere on the line
    debug = "--debug" in argv
    argv = [a for a in argv if a != "--debug"]
    verb, usage_error = _check_argv(argv)
    if usage_error is not None:
        print(one_line(usage_error), file=sys.stderr)
        return 2
    parser = build_parser(verb)
    args, extras = parser.parse_known_args(argv)
    if extras:
        prefix = f"gpuplan {args.verb}" if args.verb else "gpuplan"
        print(one_line(f"{prefix}: error: {_unknown_flags_message(parser, extras)}"), file=sys.stderr)
        return 2
    args.debug = debug
    if args.verb is None:
        parser.print_help()
        return 2
    args.notes = []  # filled by the verb (flags its mode ignores); said once it has answered
    module = importlib.import_module(f"gpuplan.cli.{VERBS[args.verb][0]}")
    # verbs that trace read and keep traced steps in the user's trace cache unless told not to
    cache = None if getattr(args, "no_cache", True) else TraceCache.default()
    with use_trace_cache(cache), fewer_full_collections(args.verb not in LONG_RUNNING_VERBS):
        if debug:
            code: int = module.run(args)
        else:
            with _quiet_libraries():
                code = _run(module, args)
    if code in (0, 1):  # an error is the one line on stderr: a note beside it would only distract
        for note in args.notes:
            print(f"gpuplan {args.verb}: note: {note}", file=sys.stderr)
    return code


# Verbs whose process lives on after answering (a server): they keep Python's default collector settings.
LONG_RUNNING_VERBS: frozenset[str] = frozenset({"ui"})
# How much rarer full (oldest-generation) collections are during a command.
FULL_COLLECTION_SPACING = 10


@contextlib.contextmanager
def fewer_full_collections(enabled: bool = True) -> Iterator[None]:
    """Full collections of the cyclic GC put off ``FULL_COLLECTION_SPACING`` times longer while a command runs.

    Importing torch and transformers makes millions of long-lived objects, and each full collection walks all
    of them: a cold ``estimate gpt2`` ran 9 of them, 0.6 s of its 9.7 s of CPU (2 busy cores; docs/speed.md).
    Young objects are still collected as often as before, and a recorded step sets the collector itself
    (trace/runner.py ``step_gc``), so no traced figure depends on this. Restored on return: ``main()`` runs
    inside tests."""
    previous = gc.get_threshold()
    if enabled:
        gc.set_threshold(previous[0], previous[1], previous[2] * FULL_COLLECTION_SPACING)
    try:
        yield
    finally:
        gc.set_threshold(*previous)


@contextlib.contextmanager
def _quiet_libraries() -> Iterator[None]:
    """No library logging or warnings on stderr: the CLI's stderr holds gpuplan's own lines only, so
    an error is the one line a user sees (torch logs a 20-line traceback when a model fails under
    fake tensors). ``--debug`` shows everything. Restored on return: ``main()`` runs inside tests."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def _fail(verb: str, message: str, code: int = 2, kind: str = "error") -> int:
    print(one_line(f"gpuplan {verb}: {kind}: {message}"), file=sys.stderr)
    return code


def _run(module: Any, args: argparse.Namespace) -> int:
    """Run a verb; every exception becomes one line on stderr with the contract's exit code."""
    verb = args.verb
    try:
        code: int = module.run(args)
    except GpuplanError as exc:
        return _fail(verb, str(exc), exc.exit_code)
    except KeyboardInterrupt:
        print("gpuplan: interrupted", file=sys.stderr)
        return 130
    except SystemExit as exc:  # user code called sys.exit: its code must not become gpuplan's
        return _fail(verb, f"code run by gpuplan called sys.exit({exc.code!r}); gpuplan stopped there "
                           "(a model factory must return a model, not exit)")
    except RecursionError:
        return _fail(verb, "recursion too deep (a model or an input file nested too deeply); "
                           "rerun with --debug for the traceback")
    except MemoryError:
        return _fail(verb, "this machine ran out of host memory; try a smaller model or batch, "
                           "or rerun with --debug for the traceback")
    except BrokenPipeError:  # the reader of stdout went away (`gpuplan gpus | head -1`): nothing to say
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:
        where = f" {exc.filename!r}" if exc.filename else ""
        return _fail(verb, f"cannot use{where}: {exc.strerror or exc}")
    except Exception as exc:  # a bug, not bad input: still one line unless --debug
        first = str(exc).splitlines()[0] if str(exc) else ""
        return _fail(verb, f"{type(exc).__name__}: {first} "
                           "(rerun with --debug for the traceback, and please report it)", kind="internal error")
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
