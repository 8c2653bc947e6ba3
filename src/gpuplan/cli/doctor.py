"""``gpuplan doctor``: probe this machine's driver / CUDA / PyTorch setup and report findings.

    gpuplan doctor [--json] [--import-torch] [--facts FILE] [--record FILE]

Prints a markdown report ready to paste into a bug report. Exit codes: 0 no error-level finding,
1 at least one error-level finding, 2 bad input (unreadable --facts file).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpuplan.compat.facts import FactsSource, LiveFacts, RecordedFacts, RecordingFacts
from gpuplan.compat.findings import Severity
from gpuplan.compat.probe import probe
from gpuplan.compat.render import doctor_json, doctor_markdown
from gpuplan.compat.rules import diagnose
from gpuplan.errors import ConfigError


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--import-torch", action="store_true",
                        help="also import torch for facts only it knows (arch list, cuDNN as loaded); slower")
    parser.add_argument("--facts", metavar="FILE",
                        help="diagnose a recorded environment (YAML from --record) instead of this machine")
    parser.add_argument("--record", metavar="FILE",
                        help="also write the raw facts read from this machine to FILE (YAML) for replay")


def run(args: argparse.Namespace) -> int:
    if args.facts and args.record:
        raise ConfigError("--facts and --record cannot be combined (record reads this machine)")
    source: FactsSource
    label = "live"
    recorder = None
    if args.facts:
        source, label = RecordedFacts.from_file(args.facts), Path(args.facts).name
        notes = getattr(args, "notes", None)
        if args.import_torch and isinstance(notes, list):
            notes.append("--import-torch reads this machine; ignored with --facts (the file has what was recorded)")
    else:
        source = LiveFacts(import_torch=args.import_torch)
        if args.record:
            recorder = RecordingFacts(source)
            source = recorder
    env = probe(source, label)
    findings = diagnose(env)
    if recorder is not None:
        try:
            Path(args.record).write_text(recorder.dump(), encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot write --record file {args.record!r}: {exc.strerror}") from exc
    if args.json:
        print(json.dumps(doctor_json(env, findings), indent=2))
    else:
        print(doctor_markdown(env, findings), end="")
    return 1 if any(f.severity is Severity.ERROR for f in findings) else 0
