"""The executor that ``measure``'s and ``sweep``'s ``--launcher local|slurm`` flags name (the flags themselves are
described in report/verb_options.launcher_options).

``--launcher slurm`` submits through submitit (``pip install 'gpuplan[cluster]'``); every refusal
(submitit missing, no ``--partition``, no sbatch here, a Slurm-only flag without ``--launcher slurm``)
is one line before any tracing. The node shape (``--nodes``, ``--gpus-per-node``) is the verb's own:
``measure`` has its own, ``sweep`` takes plan's cluster flags.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gpuplan.errors import ConfigError

if TYPE_CHECKING:
    from gpuplan.measure.executor import Executor

_SLURM_ONLY = ("partition", "time_min", "account", "cpus_per_task", "job_dir")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def executor_from_args(args: argparse.Namespace, *, nproc: int | None, nodes: int | None,
                       gpus_per_node: int | None) -> tuple[Executor | None, int | None]:
    """The executor for ``--launcher`` (None: the local torchrun default) and the ranks of one job on it
    (Slurm: nodes × GPUs per node). ``nproc`` / ``nodes`` / ``gpus_per_node``: the ranks the verb asks
    for and its node shape, checked against each other here."""
    given = [d for d in _SLURM_ONLY if getattr(args, d, None) is not None]
    if args.launcher == "local":
        if given:
            raise ConfigError(f"{_flag(given[0])} applies to --launcher slurm only; add --launcher slurm or drop it")
        return None, nproc
    if args.partition is None:
        raise ConfigError("--launcher slurm needs --partition P (the Slurm partition to run on; sinfo lists them)")
    nodes = nodes or 1
    if gpus_per_node is None:
        if nproc is None or nproc < 2:
            raise ConfigError("--launcher slurm needs the ranks: give --nproc N (all ranks) or --gpus-per-node G")
        if nproc % nodes:
            raise ConfigError(f"--nproc {nproc} does not split over --nodes {nodes}; give a multiple of {nodes}")
        gpus_per_node = nproc // nodes
    elif nproc is not None and nproc > 1 and nproc != nodes * gpus_per_node:
        raise ConfigError(f"--nproc {nproc} is not --nodes {nodes} × --gpus-per-node {gpus_per_node} = "
                          f"{nodes * gpus_per_node}; give one of them or make them agree")
    from gpuplan.measure.executor import SlurmSettings, make_executor

    settings = SlurmSettings(partition=args.partition, nodes=nodes, gpus_per_node=gpus_per_node,
                             time_min=args.time_min if args.time_min is not None else 30, account=args.account,
                             cpus_per_task=args.cpus_per_task)
    return make_executor("slurm", folder=args.job_dir, slurm=settings), nodes * gpus_per_node
