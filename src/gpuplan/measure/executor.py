"""Where the ranks of a multi-process measurement run: the executor seam behind ``gpuplan measure`` and
``gpuplan sweep``.

An :class:`Executor` takes :class:`RankJob` s (model, workload, measured layout, rank count, options) and
returns, per job, every rank's result dict as ``python -m gpuplan.measure.worker`` wrote it, or the
:class:`LaunchError` that stopped it (a sweep keeps going past one failed layout). Two implementations:

* :class:`LocalExecutor`: ``torchrun --standalone`` on this host, one job after the other (the path
  ``measure --nproc N`` always took).
* :class:`SubmititExecutor`: the jobs submitted through submitit (``pip install 'gpuplan[cluster]'``):
  on Slurm one sbatch job per measurement, several as one job array; submitit's ``local`` cluster runs
  the same pickled job function on this host (tests). Each job runs one task per node, and that task
  starts torchrun for its node (c10d rendezvous on the first node), so the worker is the same
  everywhere. The job folder must be on a file system the nodes share (submitit's own requirement:
  its pickles and logs live there, and the ranks write their results there).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from gpuplan.errors import ConfigError, GpuplanError
from gpuplan.extras import CLUSTER, require
from gpuplan.workload import Workload

RankResults = list[dict[str, Any]]
"""Every rank's ``{"rank", "measured", "environment"}`` dict, in rank order."""

LAUNCHERS: Final = ("local", "slurm")
RENDEZVOUS_PORT: Final = 29500
"""torchrun's c10d rendezvous port on the first node (the port the emitted torchrun lines use)."""
MAX_NODES: Final = 1024
MAX_GPUS_PER_NODE: Final = 64
MAX_TIME_MIN: Final = 60 * 24 * 30
MAX_CPUS_PER_TASK: Final = 1024
"""Bounds of a Slurm request (--nodes, --gpus-per-node, --time-min, --cpus-per-task): beyond them a value is a
typo."""
_REMOTE_RANK_WAIT_S: Final = 60.0
"""After node 0's torchrun exits, how long its task waits for the other nodes' ranks to write their
results (they finish the same barrier, but write after it)."""


class LaunchError(GpuplanError):
    """A rank failed; the message is that rank's one-line error."""

    exit_code = 1


@dataclass(frozen=True, slots=True)
class RankJob:
    """One multi-process measurement: what every rank's worker needs."""

    model: str
    workload: Workload
    layout: str
    nproc: int
    """All ranks, over every node."""
    steps: int = 5
    warmup: int = 2
    record: bool = True

    def worker_args(self, out_dir: Path) -> list[str]:
        args = ["-m", "gpuplan.measure.worker", "--model", self.model, "--workload",
                json.dumps(self.workload.to_dict()), "--layout", self.layout, "--steps", str(self.steps),
                "--warmup", str(self.warmup), "--out", str(out_dir)]
        return args if self.record else [*args, "--no-record"]


def torchrun_command(job: RankJob, out_dir: Path, *, nodes: int = 1, node_rank: int = 0,
                     master: str | None = None, rdzv_id: str = "gpuplan") -> list[str]:
    """torchrun for one node of ``job``: standalone on one node, c10d rendezvous at ``master`` on several."""
    per_node = job.nproc // nodes
    cmd = [sys.executable, "-m", "torch.distributed.run"]
    if nodes == 1:
        cmd += ["--standalone", f"--nproc-per-node={per_node}"]
    else:
        cmd += [f"--nnodes={nodes}", f"--node-rank={node_rank}", f"--nproc-per-node={per_node}",
                "--rdzv-backend=c10d", f"--rdzv-endpoint={master}:{RENDEZVOUS_PORT}", f"--rdzv-id={rdzv_id}"]
    return cmd + job.worker_args(out_dir)


def gather(out_dir: Path, nproc: int, returncode: int, stderr: str, *, wait_s: float = 0.0) -> RankResults:
    """The ranks' result files, or LaunchError naming the first rank that failed or wrote nothing."""
    deadline = time.monotonic() + wait_s
    results: RankResults = []
    for rank in range(nproc):
        path = out_dir / f"rank{rank}.json"
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        if not path.exists():
            tail = stderr.strip().splitlines()[-1:] or ["no output"]
            raise LaunchError(f"rank {rank} wrote no result (torchrun exit {returncode}): {tail[0]}")
        data = json.loads(path.read_text())
        if "error" in data:
            raise LaunchError(f"rank {rank} failed: {data['error'].splitlines()[0]}")
        results.append(data)
    return sorted(results, key=lambda r: int(r["rank"]))


class Executor(Protocol):
    """Runs measurement jobs somewhere and returns each one's rank results (or its error)."""

    name: str
    remote: bool
    """The ranks run on other machines: this host's memory says nothing about whether they fit."""

    def run(self, jobs: Sequence[RankJob], timeout_s: float | None = None) -> list[RankResults | LaunchError]:
        ...


def _local_env() -> dict[str, str]:
    # one BLAS thread per rank unless the user chose: more gloo ranks × threads than cores time-slice
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}


class LocalExecutor:
    """torchrun on this host, one job at a time."""

    name = "local"
    remote = False

    def run(self, jobs: Sequence[RankJob], timeout_s: float | None = None) -> list[RankResults | LaunchError]:
        return [self._run_one(job, timeout_s) for job in jobs]

    @staticmethod
    def _run_one(job: RankJob, timeout_s: float | None) -> RankResults | LaunchError:
        with tempfile.TemporaryDirectory(prefix="gpuplan-measure-") as tmp:
            out_dir = Path(tmp)
            try:
                proc = subprocess.run(torchrun_command(job, out_dir), capture_output=True, text=True,
                                      env=_local_env(), timeout=timeout_s, check=False)
            except subprocess.TimeoutExpired:
                return LaunchError(f"the {job.nproc}-process run did not finish within {timeout_s:.0f} s")
            try:
                return gather(out_dir, job.nproc, proc.returncode, proc.stderr or "")
            except LaunchError as exc:
                return exc


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    """The sbatch request of every job: ``--partition``, ``--nodes``, ``--gpus-per-node``, ``--time``,
    ``--account``, ``--cpus-per-task``; one task per node (that task starts torchrun for the node's GPUs)."""

    partition: str
    nodes: int = 1
    gpus_per_node: int = 8
    time_min: int = 30
    account: str | None = None
    cpus_per_task: int | None = None
    """CPU cores for the node's one task, shared by its torchrun ranks (data loading, the launcher); None:
    the partition's default (often 1 core, which starves eight ranks)."""

    def check(self) -> None:
        if not self.partition.strip():
            raise ConfigError("--partition is empty: give the Slurm partition to run on (sinfo lists them)")
        for flag, value, top in (("--nodes", self.nodes, MAX_NODES), ("--gpus-per-node", self.gpus_per_node,
                                  MAX_GPUS_PER_NODE), ("--time-min", self.time_min, MAX_TIME_MIN),
                                 ("--cpus-per-task", self.cpus_per_task, MAX_CPUS_PER_TASK)):
            if value is not None and not 1 <= value <= top:
                raise ConfigError(f"{flag} {value} is out of range: allowed 1..{top}")

    def submitit_parameters(self) -> dict[str, Any]:
        """``AutoExecutor.update_parameters`` keywords (submitit's generic names, ``slurm_`` for the rest)."""
        params: dict[str, Any] = {"nodes": self.nodes, "tasks_per_node": 1, "gpus_per_node": self.gpus_per_node,
                                  "timeout_min": self.time_min, "slurm_partition": self.partition}
        if self.account:
            params["slurm_account"] = self.account
        if self.cpus_per_task is not None:
            params["cpus_per_task"] = self.cpus_per_task  # submitit's generic name: sbatch --cpus-per-task
        return params


def run_on_node(job: RankJob, out_dir: str) -> dict[str, Any]:
    """The function each submitit task runs: torchrun for this node; node 0 gathers every rank.
    Errors come back as ``{"error": line}``: submitit would otherwise raise the remote traceback."""
    import submitit

    env = submitit.JobEnvironment()
    nodes, node = env.num_nodes, env.node
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cmd = torchrun_command(job, out, nodes=nodes, node_rank=node, master=env.hostnames[0], rdzv_id=env.job_id)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_local_env(), check=False)
    if node != 0:
        return {"node": node, "returncode": proc.returncode}
    try:
        ranks = gather(out, job.nproc, proc.returncode, proc.stderr or "",
                       wait_s=_REMOTE_RANK_WAIT_S if nodes > 1 else 0.0)
    except LaunchError as exc:
        return {"error": str(exc)}
    return {"ranks": ranks}


class SubmititExecutor:
    """The jobs through submitit: ``cluster="slurm"`` (sbatch; several jobs as one array) or ``"local"``
    (submitit's local executor on this host, one node)."""

    remote: bool

    def __init__(self, folder: str | Path, *, cluster: str = "slurm", slurm: SlurmSettings | None = None,
                 cpu_ranks: bool = False) -> None:
        require(CLUSTER)
        if cluster not in ("slurm", "local"):
            raise ConfigError(f"unknown submitit cluster {cluster!r} (allowed: slurm, local)")
        if cluster == "slurm":
            if slurm is None:
                raise ConfigError("--launcher slurm needs --partition P (the Slurm partition to run on)")
            slurm.check()
            if shutil.which("sbatch") is None:
                raise ConfigError("--launcher slurm: no sbatch on this host's PATH; run from a Slurm login node, "
                                  "or use --launcher local")
        self.name = cluster
        self.remote = cluster == "slurm"
        self.folder = Path(folder)
        self.slurm = slurm
        self.cpu_ranks = cpu_ranks
        """Local cluster only: request no GPU (gloo ranks on CPU)."""

    def parameters(self, nproc: int, timeout_s: float | None) -> dict[str, Any]:
        if self.slurm is not None and self.name == "slurm":
            return {**self.slurm.submitit_parameters(), "name": "gpuplan-measure"}
        minutes = max(1, math.ceil((timeout_s or 600.0) / 60.0))
        return {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": 0 if self.cpu_ranks else nproc,
                "timeout_min": minutes, "name": "gpuplan-measure"}

    def submit(self, jobs: Sequence[RankJob], timeout_s: float | None = None) -> list[Any]:
        """Submit ``jobs`` (several: one Slurm job array) and return submitit's job handles."""
        import submitit

        if not jobs:
            return []
        executor = submitit.AutoExecutor(folder=self.folder, cluster=self.name)
        executor.update_parameters(**self.parameters(max(j.nproc for j in jobs), timeout_s))
        out_dirs = [str(self.folder / f"ranks-{uuid.uuid4().hex}") for _ in jobs]
        return list(executor.map_array(run_on_node, list(jobs), out_dirs))

    def run(self, jobs: Sequence[RankJob], timeout_s: float | None = None) -> list[RankResults | LaunchError]:
        handles = self.submit(jobs, timeout_s)
        return [self._outcome(job, handle) for job, handle in zip(jobs, handles, strict=True)]

    @staticmethod
    def _outcome(job: RankJob, handle: Any) -> RankResults | LaunchError:
        import submitit

        try:
            result = handle.result()
        except submitit.core.utils.UncompletedJobError as exc:  # no result: killed, timed out, never started
            state = re.search(r"\(state: ([A-Z_]+)", str(exc))
            return LaunchError(f"job {handle.job_id} ({job.layout}, {job.nproc} ranks) did not finish (Slurm state "
                               f"{state.group(1) if state else 'unknown'}); its logs are in {handle.paths.folder}")
        except submitit.core.utils.FailedJobError as exc:  # the job function raised: its last line says what
            lines = [line for line in str(exc).strip().splitlines() if line.strip()]
            return LaunchError(f"job {handle.job_id} ({job.layout}, {job.nproc} ranks) failed: "
                               f"{lines[-1] if lines else type(exc).__name__}")
        if "error" in result:
            return LaunchError(str(result["error"]))
        ranks: RankResults = result["ranks"]
        return ranks


def make_executor(launcher: str, *, folder: str | Path | None = None, slurm: SlurmSettings | None = None
                  ) -> Executor:
    """The executor ``--launcher`` names; every refusal (submitit missing, no partition, no sbatch) happens
    here, before any tracing or measuring."""
    if launcher == "local":
        return LocalExecutor()
    if launcher == "slurm":
        return SubmititExecutor(folder if folder is not None else Path("gpuplan-jobs"), cluster="slurm",
                                slurm=slurm)
    raise ConfigError(f"unknown --launcher {launcher!r} (allowed: {', '.join(LAUNCHERS)})")


__all__ = ["LAUNCHERS", "MAX_GPUS_PER_NODE", "MAX_NODES", "MAX_TIME_MIN", "Executor", "LaunchError", "LocalExecutor",
           "RankJob", "RankResults", "SlurmSettings", "SubmititExecutor", "gather", "make_executor", "run_on_node",
           "torchrun_command"]
