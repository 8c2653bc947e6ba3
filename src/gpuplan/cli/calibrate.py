"""``gpuplan calibrate [--store PATH] [--out FILE] [--json]``: fit the CUDA context size and a
step-time factor per (GPU, torch, CUDA) from stored measurements (``measure`` and ``sweep`` runs) into the
calibration file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from gpuplan.cli._workload import add_json_argument


def add_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", default=None, metavar="PATH",
                        help="measurements store (default: $XDG_CACHE_HOME/gpuplan/measurements.sqlite3)")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="calibration file (default: $XDG_CONFIG_HOME/gpuplan/calibration.json)")
    add_json_argument(parser)


def run(args: argparse.Namespace) -> int:
    from gpuplan.errors import ConfigError
    from gpuplan.measure.calibration import default_calibration_path, fit, write
    from gpuplan.measure.store import Store, default_store_path

    path = Path(args.store) if args.store else default_store_path()
    if not path.exists():
        raise ConfigError(f"no measurements store at {str(path)!r}; run gpuplan measure on a GPU first "
                          "(or pass --store PATH)")
    from gpuplan.cli.progress import Progress, wanted

    with Progress(f"calibrate: fitting the measurements in {path}", enabled=wanted(args.json)), Store(path) as store:
        entries = fit(store.records(device="cuda"))
        total = store.count()
    out = Path(args.out) if args.out else default_calibration_path()
    if out is None:
        raise ConfigError("GPUPLAN_CALIBRATION=off and no --out FILE: nowhere to write the calibration")
    if entries:
        write(entries, out, store=str(path))
    if args.json:
        from dataclasses import asdict

        print(json.dumps({"store": str(path), "measurements": total,
                          "calibration_file": str(out) if entries else None,
                          "entries": [asdict(e) for e in entries]}, indent=2))
    elif not entries:
        print(f"{total} measurement(s) in {path}, none from a CUDA run (gpuplan measure on one GPU, or gpuplan sweep): "
              "nothing to calibrate")
    else:
        for e in entries:
            print(e.describe().replace("calibration applied for", "fitted"))
        print(f"written to {out}")
    return 0 if entries else 1
