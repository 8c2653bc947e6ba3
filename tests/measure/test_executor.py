"""The executor seam behind ``measure`` and ``sweep`` (gpuplan.measure.executor).

* submitit's local executor runs a real 2-rank gloo measurement through the same job function a Slurm
  node runs (``run_on_node``), and its ranks match the per-rank accounting as the torchrun path's do: the DDP
  case of tests/measure/test_distributed.py (one real launch for both);
* the Slurm executor's sbatch file is submitit's own, written through a stand-in ``sbatch`` on PATH
  (no Slurm here): partition, nodes, GPUs per node, one task per node, time, account, and a job array
  for several jobs;
* every refusal is one line with exit 2, before any work.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from gpuplan.measure.executor import RankJob, SlurmSettings, SubmititExecutor, run_on_node, torchrun_command
from gpuplan.workload import Workload
from tests.hardware.test_support import _run  # the CLI runner (argparse exits included)


def no_result_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job the stand-in sacct reports FAILED has no result file, and never will: submitit waits 15 s per job
    for one to appear on a slow shared file system (``Job._results_timeout_s``); its own tests set it to 0 too."""
    import submitit.core.core

    monkeypatch.setattr(submitit.core.core.Job, "_results_timeout_s", 0)


def _fake_slurm(folder: Path) -> str:
    """A PATH with an ``sbatch`` that accepts any file (and an ``srun`` submitit looks for)."""
    folder.mkdir()
    for name, body in (("sbatch", 'echo "Submitted batch job 4242"'), ("srun", "exit 0")):
        path = folder / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"


def test_slurm_array_sbatch_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _fake_slurm(tmp_path / "bin"))
    settings = SlurmSettings(partition="gpu", nodes=2, gpus_per_node=8, time_min=20, account="proj", cpus_per_task=16)
    executor = SubmititExecutor(tmp_path / "jobs", cluster="slurm", slurm=settings)
    jobs = [RankJob("model.json", Workload(mode="train", batch_size=2), layout, 16) for layout in ("ddp", "fsdp")]
    handles = executor.submit(jobs)
    assert [h.job_id for h in handles] == ["4242_0", "4242_1"]  # one array, one task per job
    lines = set(handles[0].paths.submission_file.read_text().splitlines())
    for flag in ("--partition=gpu", "--nodes=2", "--gpus-per-node=8", "--ntasks-per-node=1", "--time=20",
                 "--account=proj", "--cpus-per-task=16", "--job-name=gpuplan-measure", "--array=0-1%2"):
        assert f"#SBATCH {flag}" in lines, flag
    assert any(line.startswith("srun ") and "submitit.core._submit" in line for line in lines)
    # what each array task runs: run_on_node with its own job, every node's ranks writing to a shared folder
    for handle, job in zip(handles, jobs, strict=True):
        submission = handle.submission()
        assert submission.function is run_on_node
        assert submission.args[0] == job and Path(submission.args[1]).parent == tmp_path / "jobs"
    # node 1 of 2 joins the c10d rendezvous on the first node with 8 of the 16 ranks
    cmd = torchrun_command(jobs[0], tmp_path, nodes=2, node_rank=1, master="node-a", rdzv_id="4242_0")
    for arg in ("--nnodes=2", "--node-rank=1", "--nproc-per-node=8", "--rdzv-backend=c10d",
                "--rdzv-endpoint=node-a:29500", "--rdzv-id=4242_0"):
        assert arg in cmd


def test_slurm_single_job_is_no_array(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", _fake_slurm(tmp_path / "bin"))
    executor = SubmititExecutor(tmp_path / "jobs", cluster="slurm", slurm=SlurmSettings(partition="a100"))
    (handle,) = executor.submit([RankJob("model.json", Workload(mode="train"), "ddp", 8)])
    text = handle.paths.submission_file.read_text()
    assert "#SBATCH --partition=a100" in text and "#SBATCH --gpus-per-node=8" in text
    assert "--array" not in text and "--account" not in text  # no account asked, none written
    assert "--cpus-per-task" not in text  # no cores asked: the partition's default, not a number of ours


@pytest.mark.parametrize(("argv", "message"), [
    (["--launcher", "slurm", "--layout", "ddp", "--nproc", "2"], "--launcher slurm needs --partition P"),
    (["--partition", "gpu"], "--partition applies to --launcher slurm only"),
    (["--time-min", "5"], "--time-min applies to --launcher slurm only"),
    (["--account", "a"], "--account applies to --launcher slurm only"),
    (["--cpus-per-task", "8"], "--cpus-per-task applies to --launcher slurm only"),
    (["--job-dir", "d"], "--job-dir applies to --launcher slurm only"),
    (["--nodes", "2"], "--nodes applies to --launcher slurm only"),
    (["--gpus-per-node", "2"], "--gpus-per-node applies to --launcher slurm only"),
    (["--launcher", "slurm", "--partition", "p", "--layout", "ddp"], "--launcher slurm needs the ranks"),
    (["--launcher", "slurm", "--partition", "p", "--layout", "ddp", "--nproc", "3", "--nodes", "2"],
     "--nproc 3 does not split"),
    (["--launcher", "slurm", "--partition", "p", "--layout", "ddp", "--nproc", "4", "--gpus-per-node", "8"],
     "--nproc 4 is not --nodes 1 × --gpus-per-node 8 = 8"),
    (["--launcher", "slurm", "--partition", "p", "--nproc", "2"], "give --layout L"),
    (["--launcher", "slurm", "--partition", "p", "--gpus-per-node", "2", "--layout", "ddp", "--time-min", "0"],
     "--time-min 0 is out of range: allowed 1..43200"),
    (["--launcher", "slurm", "--partition", "p", "--gpus-per-node", "2", "--layout", "ddp", "--cpus-per-task", "0"],
     "--cpus-per-task 0 is out of range: allowed 1..1024"),
    (["--launcher", "slurm", "--partition", "p", "--gpus-per-node", "2", "--layout", "ddp", "--cpus-per-task", "x"],
     "argument --cpus-per-task: expected a whole number, got 'x'"),
    (["--launcher", "slurm", "--partition", "p", "--gpus-per-node", "65", "--layout", "ddp"],
     "--gpus-per-node 65 is out of range: allowed 1..64"),
    (["--launcher", "slurm", "--partition", "p", "--gpus-per-node", "2", "--layout", "ddp"],
     "no sbatch on this host's PATH"),
    (["--launcher", "mpi"], "invalid choice: 'mpi'"),
])
def test_measure_launcher_refusals(tiny_gpt2: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   argv: list[str], message: str) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch anywhere
    code, out, err = _run(["measure", tiny_gpt2, "--no-store", *argv])
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_missing_submitit_is_one_line_before_any_work(tiny_gpt2: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import gpuplan.extras

    monkeypatch.setattr(gpuplan.extras, "installed", lambda module: module != "submitit")
    code, _, err = _run(["measure", tiny_gpt2, "--no-store", "--launcher", "slurm", "--partition", "p",
                         "--nproc", "2", "--layout", "ddp"])
    assert code == 2
    assert err.strip().endswith("pip install 'gpuplan[cluster]'") and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_measure_on_slurm_end_to_end_with_a_failed_job(tiny_gpt2: str, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``measure --launcher slurm`` with every Slurm flag, through a stand-in sbatch and an sacct that reports
    the job FAILED: the submission carries the flags, and the failure is one line with exit 1."""
    no_result_grace(monkeypatch)
    bin_dir = tmp_path / "bin"
    path = _fake_slurm(bin_dir)
    sacct = bin_dir / "sacct"
    sacct.write_text("#!/bin/sh\nprintf 'JobID|State|NodeList\\n4242|FAILED|n1\\n'\n")
    sacct.chmod(sacct.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", path)
    jobs = tmp_path / "jobs"
    code, out, err = _run(["measure", tiny_gpt2, "--no-store", "--mode", "train", "--layout", "fsdp",
                           "--launcher", "slurm", "--partition", "h100", "--nodes", "2", "--gpus-per-node", "4",
                           "--time-min", "15", "--account", "team", "--cpus-per-task", "32", "--job-dir", str(jobs)])
    assert code == 1 and out == ""
    assert "job 4242 (fsdp, 8 ranks) did not finish" in err and "FAILED" in err
    assert len(err.strip().splitlines()) == 1
    (sbatch,) = jobs.glob("*_submission.sh")
    text = sbatch.read_text()
    for flag in ("--partition=h100", "--nodes=2", "--gpus-per-node=4", "--time=15", "--account=team",
                 "--cpus-per-task=32"):
        assert f"#SBATCH {flag}" in text, flag
