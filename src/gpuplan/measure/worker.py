"""One rank of a multi-process measurement; torchrun starts it (``python -m gpuplan.measure.worker``).

Each rank builds the model with the layout, runs the same warm-up, timed steps and recorded step
as a single-process measurement, and writes its :class:`Measured` as JSON to ``OUT/rank<R>.json``
(rank 0 also writes the environment). Errors are written there too, so the launcher can report
one line instead of N tracebacks.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpuplan.measure.worker")
    p.add_argument("--model", required=True)
    p.add_argument("--workload", required=True, help="workload as JSON")
    p.add_argument("--layout", required=True)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--no-record", action="store_true")
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    out = Path(args.out) / f"rank{rank}.json"
    try:
        result = _run(args, rank)
    except BaseException as exc:  # reported by the launcher as one line
        out.write_text(json.dumps({"rank": rank, "error": f"{type(exc).__name__}: {exc}",
                                   "traceback": traceback.format_exc()}))
        return 1
    out.write_text(json.dumps(result))
    return 0


def _run(args: argparse.Namespace, rank: int) -> dict[str, object]:
    import torch
    import torch.distributed as dist

    from gpuplan.measure import cuda as cudamod
    from gpuplan.measure.environment import collect
    from gpuplan.measure.layouts import build_layout
    from gpuplan.measure.local import Options, run_program
    from gpuplan.measure.program import build_program
    from gpuplan.models.sources import resolve_model
    from gpuplan.workload import Workload

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    used_before = cudamod.device_used_bytes_before_init() if cuda else None
    if cuda:
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", device_id=device if cuda else None)
    try:
        env = collect("cuda" if cuda else "cpu")
        workload = Workload(**json.loads(args.workload))
        source = resolve_model(args.model)
        torch.manual_seed(1234)  # same weights on every rank (DDP would broadcast them anyway)
        layout = build_layout(args.layout, workload, device, source.layer_counts())
        program = build_program(source, workload, device, compute_capability=env.compute_capability,
                                wrap=layout.wrap, make_optimizer=layout.make_optimizer,
                                live_extra=layout.live_extra, step_class=layout.step_class)
        options = Options(steps=args.steps, warmup=args.warmup, record=not args.no_record)
        measured = run_program(program, options, used_before_bytes=used_before, rank=rank, world_size=world,
                               layout=args.layout)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return {"rank": rank, "measured": measured.to_dict(), "environment": env.to_dict()}


if __name__ == "__main__":
    sys.exit(main())
