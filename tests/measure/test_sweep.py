"""``gpuplan sweep`` (issue 23 item 6): the plan's top layouts measured for a few steps, predicted next to
measured, each run stored as ``measure`` stores it. End to end here with ``--launcher local`` (2 gloo ranks
on the tiny GPT-2); the Slurm submission it shares with measure is tests/measure/test_executor.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuplan.measure.store import Store
from gpuplan.measure.sweep import measured_layout
from gpuplan.parallel.layout import DDP, FSDP2, Layout, MegatronDDP, Zero
from tests.hardware.test_support import _run  # the CLI runner (argparse exits included)

TOLERANCE = 0.02  # test_distributed.py's per-rank bound


def _lay(**kw: object) -> Layout:
    base: dict[str, object] = dict(dp=2, tp=1, pp=1, micro_batch_size=2, grad_accum=1)
    return Layout(**{**base, **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(("lay", "name", "why"), [
    (_lay(sharding=DDP()), "ddp", None),
    (_lay(sharding=FSDP2()), "fsdp", None),
    (_lay(sharding=Zero(1)), "zero1", None),
    (_lay(sharding=Zero(3)), "zero3", None),
    (_lay(sharding=FSDP2(reshard_after_forward=False)), None, "without resharding"),
    (_lay(dp=4, sharding=FSDP2(hsdp_shard=2)), None, "HSDP"),
    (_lay(sharding=FSDP2(sharded_fp32=True)), None, "fp32 shards"),
    (_lay(sharding=Zero(3, offload_optimizer=True)), None, "ZeRO-Offload"),
    (_lay(dp=1, tp=2, sharding=DDP()), None, "data-parallel layouts only"),
    (_lay(grad_accum=4, sharding=DDP()), None, "one micro-batch per step"),
    (_lay(dp=1, pp=2, sharding=MegatronDDP()), None, "data-parallel layouts only"),
    (_lay(sharding=MegatronDDP()), None, "measure has no megatron-ddp layout"),
])
def test_which_planned_layouts_measure_runs(lay: Layout, name: str | None, why: str | None) -> None:
    got_name, got_why = measured_layout(lay)
    assert got_name == name
    assert (got_why is None) if why is None else (got_why is not None and why in got_why)


@pytest.mark.parametrize(("argv", "message"), [
    (["--top", "0"], "--top 0 is out of range: allowed 1..16"),
    (["--top", "17"], "--top 17 is out of range"),
    (["--steps", "0"], "--steps 0 is out of range: allowed 1..10000"),
    (["--gpus", "1"], "--gpus 1: sweep measures multi-GPU layouts"),
    (["--gpus", "4096"], "--gpus 4096 is more than the"),
    (["--launcher", "slurm"], "--launcher slurm needs --partition P"),
    (["--partition", "gpu"], "--partition applies to --launcher slurm only"),
    (["--store", "x.db", "--no-store"], "cannot be combined"),
    (["--mode", "infer"], "--layout ddp shards a training step; use --mode train"),
])
def test_sweep_refusals_before_any_work(tiny_gpt2: str, monkeypatch: pytest.MonkeyPatch, argv: list[str],
                                        message: str) -> None:
    def no_trace(*_: object, **__: object) -> None:
        raise AssertionError("traced before refusing")

    monkeypatch.setattr("gpuplan.trace.step._trace_source", no_trace)
    gpus = [] if "--gpus" in argv else ["--gpus", "2"]
    code, out, err = _run(["sweep", tiny_gpt2, "--gpu", "H100-SXM", *gpus, *argv])
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow
def test_sweep_local_end_to_end(tiny_gpt2: str, tmp_path: Path) -> None:
    """--fsdp --top 2 on 2 CPU ranks: the plan's best FSDP2 layout (no resharding) cannot be measured and says
    why; the resharding one runs, its ranks match the per-rank accounting within 2%, and both ranks are stored."""
    store = tmp_path / "m.sqlite3"
    code, out, err = _run(["sweep", tiny_gpt2, "--gpus", "2", "--gpu", "H100-SXM", "--batch-size", "2",
                           "--seq-len", "32", "--precision", "fp32", "--fsdp", "--top", "2", "--steps", "2",
                           "--store", str(store)])
    assert code == 0, err
    assert "top 2 planned layouts, 2 timed steps each (local launcher); 1 measured" in out
    assert "dp=2 tp=1 pp=1 fsdp2 no-reshard mbs=2 ga=1: FSDP2 without resharding after forward" in out
    assert f"stored in {store}" in out and "measured on CPU ranks (gloo)" in out
    with Store(store) as s:
        rows = list(s.records())
    assert [(r.layout, r.rank, r.world_size, r.device) for r in rows] == [("fsdp", 0, 2, "cpu"), ("fsdp", 1, 2, "cpu")]
    for r in rows:
        assert r.measured["steps"] == 2 and r.measured["warmup"] == 1
        # the plan's prediction for the layout, stored for calibrate (gpuplan.measure.calibration.step_times)
        planned = r.estimated["sweep_plan"]
        assert planned["gpu"] == "H100-SXM" and planned["layout"].startswith("dp=2 tp=1 pp=1 fsdp2 mbs=2")
        low_s, high_s = planned["step_time_interval_s"]
        assert planned["step_time_s"] > 0 and low_s <= planned["step_time_s"] < high_s
        estimated = r.estimated["per_rank"]["tensor_peak_bytes"][r.rank]
        measured = r.measured["tracked_peak_bytes"]
        assert abs(estimated - measured) <= TOLERANCE * measured, (estimated, measured)
    # the measured column is the largest rank's tracked peak, as stored
    peak = max(r.measured["tracked_peak_bytes"] for r in rows)
    from gpuplan.units import format_bytes

    line = next(x for x in out.splitlines() if x.startswith("2  dp=2 tp=1 pp=1 fsdp2 mbs=2"))
    assert format_bytes(peak) in line and line.rstrip().endswith("cpu")


@pytest.mark.slow
def test_sweep_on_slurm_submits_one_array(tiny_gpt2: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``sweep --launcher slurm`` with its Slurm flags: the measurable layouts go out as one job array (a stand-in
    sbatch; sacct reports both tasks FAILED), each failure is a row's reason, nothing measured: exit 1."""
    import stat

    from tests.measure.test_executor import _fake_slurm, no_result_grace

    no_result_grace(monkeypatch)
    path = _fake_slurm(tmp_path / "bin")
    sacct = tmp_path / "bin" / "sacct"
    sacct.write_text("#!/bin/sh\nprintf 'JobID|State|NodeList\\n4242_0|FAILED|n1\\n4242_1|FAILED|n2\\n'\n")
    sacct.chmod(sacct.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", path)
    jobs = tmp_path / "jobs"
    code, out, err = _run(["sweep", tiny_gpt2, "--gpus", "16", "--nodes", "2", "--gpu", "H100-SXM", "--dp", "16",
                           "--batch-size", "2", "--seq-len", "32", "--precision", "fp32", "--top", "2", "--steps", "1",
                           "--launcher", "slurm", "--partition", "h100", "--time-min", "10", "--account", "team",
                           "--cpus-per-task", "24", "--job-dir", str(jobs), "--no-store"])
    assert code == 1, err
    assert "top 2 planned layouts" in out and "; 0 measured" in out
    assert out.count("run failed: job 4242_") == 2 and "did not finish (Slurm state FAILED)" in out
    (sbatch,) = jobs.glob("*_submission.sh")
    text = sbatch.read_text()
    for flag in ("--array=0-1%2", "--partition=h100", "--nodes=2", "--gpus-per-node=8", "--time=10",
                 "--account=team", "--cpus-per-task=24"):
        assert f"#SBATCH {flag}" in text, flag
