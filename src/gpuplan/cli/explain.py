"""``gpuplan explain [TEXT | -]``: name a pasted CUDA / PyTorch error, its cause and fix.

Out-of-memory messages are parsed for their numbers and answered with numbers. With no TEXT (or
``-``) the message is read from standard input. Exit codes: 0 recognised, 1 not recognised, 2 no text.
"""

from __future__ import annotations

import argparse
import json
import sys

from gpuplan.compat.explain import explain_error
from gpuplan.compat.render import explain_json, explain_text
from gpuplan.errors import ConfigError
from gpuplan.units import MIB
from gpuplan.userio import read_user_stdin

# A pasted traceback is kilobytes; a whole training log a few MiB. More is the wrong stream (`yes |`).
MAX_ERROR_TEXT_BYTES = 4 * MIB


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", nargs="*", metavar="TEXT",
                        help="the error message (quote it), or - / nothing to read standard input")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")


def run(args: argparse.Namespace) -> int:
    words = list(args.text)
    if not words or words == ["-"]:
        if sys.stdin is None or sys.stdin.isatty():
            raise ConfigError("no error text: pass it as an argument (quoted) or pipe it in, "
                              "e.g. `pbpaste | gpuplan explain -`")
        text = read_user_stdin(limit_bytes=MAX_ERROR_TEXT_BYTES, lenient=True,
                               hint="; pipe the end of the log, e.g. `tail -c 100000 log | gpuplan explain -`")
    else:
        text = " ".join(words)
    if not text.strip():
        raise ConfigError("the error text is empty: paste the message (or the whole traceback)")
    expl = explain_error(text)
    if args.json:
        print(json.dumps(explain_json(expl), indent=2))
    else:
        print(explain_text(expl), end="")
    return 0 if expl is not None else 1
