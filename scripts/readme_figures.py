"""Regenerate the README's sample outputs by running them, so a figure cannot go stale (issue 18 item 8:
the README showed a 198.0 ms step while the command printed 171.1 ms).

A figure is a ```text block in README.md right after a line ``<!-- readme-figure lines=N -->`` whose first
line is ``$ gpuplan ARGS``. It is rewritten as that line, the first N lines the command prints now and, when
the output goes on, a last line ``...``. The commands run as a user types them (``python -m
gpuplan.cli.main``, the trace cache on), so a repeat after the first run takes seconds.

    python scripts/readme_figures.py            # rewrite README.md
    python scripts/readme_figures.py --check    # exit 1 naming each stale figure (what the tests run)
"""

from __future__ import annotations

import argparse
import difflib
import re
import shlex
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MARKER = re.compile(r"^<!-- readme-figure lines=(?P<lines>\d+) -->\n```text\n(?P<body>.*?)^```\n",
                    re.MULTILINE | re.DOTALL)
PROMPT = "$ gpuplan "
RUN_TIMEOUT_S = 900


@dataclass(frozen=True, slots=True)
class Figure:
    """One README figure: where its block body sits in the text, its command, how many lines it shows."""

    start: int
    end: int
    argv: tuple[str, ...]
    lines: int
    body: str


def figures(text: str) -> list[Figure]:
    found = []
    for m in MARKER.finditer(text):
        first = m.group("body").split("\n", 1)[0]
        if not first.startswith(PROMPT):
            raise ValueError(f"README figure at offset {m.start()} does not start with {PROMPT!r}: {first!r}")
        found.append(Figure(m.start("body"), m.end("body"), tuple(shlex.split(first[len(PROMPT):])),
                            int(m.group("lines")), m.group("body")))
    return found


def run_cli(argv: Sequence[str]) -> str:
    """What ``gpuplan ARGV`` prints on stdout (exit 0 or 1: a "no" is a figure too)."""
    done = subprocess.run([sys.executable, "-m", "gpuplan.cli.main", *argv], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, cwd=ROOT)
    if done.returncode not in (0, 1):
        raise RuntimeError(f"gpuplan {shlex.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def body_for(fig: Figure, output: str) -> str:
    out = output.rstrip("\n").split("\n")
    shown = out[: fig.lines] + (["..."] if len(out) > fig.lines else [])
    return "\n".join([PROMPT + shlex.join(fig.argv), *shown]) + "\n"


def regenerate(text: str, run: Callable[[Sequence[str]], str] = run_cli) -> str:
    """``text`` with every figure's body replaced by what its command prints now."""
    pieces, at = [], 0
    for fig in figures(text):
        pieces += [text[at:fig.start], body_for(fig, run(fig.argv))]
        at = fig.end
    return "".join([*pieces, text[at:]])


def stale(text: str, run: Callable[[Sequence[str]], str] = run_cli) -> list[str]:
    """A unified diff per figure whose body differs from its command's output now (empty: all current)."""
    diffs = []
    for fig in figures(text):
        new = body_for(fig, run(fig.argv))
        if new != fig.body:
            diffs.append("".join(difflib.unified_diff(fig.body.splitlines(True), new.splitlines(True),
                                                      "README.md", "now")))
    return diffs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale figures (exit 1) instead of rewriting")
    parser.add_argument("--readme", type=Path, default=README)
    args = parser.parse_args(argv)
    text = args.readme.read_text(encoding="utf-8")
    if args.check:
        diffs = stale(text)
        for d in diffs:
            print(d)
        print(f"{len(figures(text))} README figures, {len(diffs)} stale"
              + ("; run python scripts/readme_figures.py" if diffs else ""))
        return 1 if diffs else 0
    args.readme.write_text(regenerate(text), encoding="utf-8")
    print(f"{len(figures(text))} README figures regenerated")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
