"""The measured parallel layouts: the DDP setting is the planner's, and every ``measure --layout``
value and every ``measure`` flag runs end to end on a tiny model (CPU, gloo through torchrun)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from gpuplan.cli.main import main
from gpuplan.measure.layouts import LAYOUTS, build_layout
from gpuplan.measure.per_rank import ParamLayout, account
from gpuplan.workload import Workload
from tests.measure.test_distributed import LAYOUTS_RUN_HERE

_HAS_DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


def test_ddp_layout_keeps_gradients_as_bucket_views(one_rank_group: None) -> None:
    """Issue 9 item 4: the planner plans (and plan --emit writes) DDP with
    gradient_as_bucket_view=True; the measured run used torch's default (False), one more
    gradient-sized copy per rank than the figure it was compared with."""
    layout = build_layout("ddp", Workload(mode="train"), torch.device("cpu"), {})
    torch.manual_seed(0)
    ddp = layout.wrap(nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 4)))
    assert ddp.gradient_as_bucket_view is True
    ddp(torch.randn(2, 8)).sum().backward()
    buckets = {b.untyped_storage().data_ptr() for b in layout.buckets.values()}
    grads = [p.grad for p in ddp.parameters()]
    assert buckets and all(g is not None and g.untyped_storage().data_ptr() in buckets for g in grads)
    # the buckets hold every gradient once: no second copy
    assert sum(b.numel() for b in layout.buckets.values()) == sum(p.numel() for p in ddp.parameters())


def test_ddp_accounting_replaces_the_gradients_at_the_peak_by_the_buckets() -> None:
    """With bucket views the gradients live at the peak are inside the buckets: per rank = single-
    process peak − gradients at the peak + one flat gradient of every parameter (2010 fp32 here)."""
    p = ParamLayout(shapes=((100, 10), (10,), (50, 10), (50, 10)), root_numel=1010, block_numels=(500, 500),
                    element_bytes=4)
    est = account("ddp", 2, 1_000_000, {"optimizer_state": 16_080, "gradients": 3_000}, p)
    assert est.tensor_peak_bytes == (1_000_000 - 3_000 + 2010 * 4,) * 2
    # ZeRO-1 wraps the same DDP: the same bucket term, optimizer state split as ZeroRedundancyOptimizer does
    # (1000 and 1010 elements: (100,10) to one rank, the rest to the other)
    z = account("zero1", 2, 1_000_000, {"optimizer_state": 16_080, "gradients": 3_000}, p)
    assert sorted(z.tensor_peak_bytes) == sorted(1_000_000 - 3_000 + 2010 * 4 - 16_080 + 16_080 * n // 2010
                                                 for n in (1000, 1010))


def test_measure_help_advertises_every_layout(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["measure", "--help"])
    assert "|".join(LAYOUTS) in capsys.readouterr().out


@pytest.mark.slow
def test_every_local_flag_end_to_end(tiny_gpt2: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--steps, --warmup, --no-record, --force, --store, --json on one local run; --no-store and
    the text output on another."""
    store = tmp_path / "m.sqlite3"
    flags = ["--mode", "train", "--batch-size", "2", "--seq-len", "32"]
    assert main(["measure", tiny_gpt2, *flags, "--steps", "3", "--warmup", "1", "--no-record", "--force",
                 "--store", str(store), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    m = out["measured"]
    assert (m["steps"], m["warmup"], len(m["step_times_s"])) == (3, 1, 3)
    assert m["tracked_peak_bytes"] is None  # --no-record: no recorded step
    assert "--force: the fit check was skipped" in out["notes"]
    assert out["store"] == {"path": str(store), "id": 1} and store.exists()
    assert main(["measure", tiny_gpt2, *flags, "--steps", "1", "--warmup", "1", "--no-store"]) == 0
    text = capsys.readouterr().out
    assert "1 timed steps after 1 warm-up" in text and "stored as" not in text
    assert "tracked peak (host semantics)" in text


@pytest.fixture(scope="session")
def extensions_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where DeepSpeed builds its CPU communication op (about a minute): pytest's own cache folder of this
    checkout (.pytest_cache, never the user's cache), so it is built once, not once per session; shared by the
    zero2 and zero3 runs (torch's extension builder locks the folder while it builds)."""
    cache = getattr(request.config, "cache", None)
    return cache.mkdir("torch_extensions") if cache is not None else tmp_path_factory.mktemp("torch_extensions")


E2E_LAYOUTS = tuple(layout for layout in LAYOUTS if layout not in LAYOUTS_RUN_HERE)
"""The layouts measured here through the CLI; the others run for real in test_distributed.py (same model, same
step, same 2% bound): one real 2-rank launch per layout in the suite."""


def test_every_layout_runs_end_to_end_somewhere() -> None:
    assert set(E2E_LAYOUTS) | set(LAYOUTS_RUN_HERE) == set(LAYOUTS) and E2E_LAYOUTS


@pytest.mark.slow
@pytest.mark.parametrize("layout", E2E_LAYOUTS)
def test_every_layout_end_to_end(tiny_gpt2: str, layout: str, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch, extensions_dir: Path) -> None:
    """``gpuplan measure --nproc 2 --layout L`` for the DeepSpeed layouts: two ranks measured, each with its
    tracked peak; where an accounting exists it matches within 2% (the bound of test_distributed.py)."""
    if layout in ("zero2", "zero3"):
        if not _HAS_DEEPSPEED:
            pytest.skip("DeepSpeed is not installed (its absence is tested in test_measure_cpu.py)")
        monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(extensions_dir))
    code = main(["measure", tiny_gpt2, "--mode", "train", "--batch-size", "2", "--seq-len", "32", "--nproc", "2",
                 "--layout", layout, "--steps", "1", "--warmup", "1", "--no-store", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out
    assert out["layout"] == layout and out["nproc"] == 2
    ranks = out["measured"]["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1] and all(r["tracked_peak_bytes"] > 0 for r in ranks)
    per_rank = out["estimated"]["per_rank"]
    if per_rank["tensor_peak_bytes"]:
        for r in ranks:
            estimated = per_rank["tensor_peak_bytes"][r["rank"]]
            assert abs(estimated - r["tracked_peak_bytes"]) <= 0.02 * r["tracked_peak_bytes"], (layout, r)


def test_measured_zero3_buckets_are_the_ones_plan_emits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The measured ZeRO-3 run sets DeepSpeed's buckets as ``plan --emit deepspeed`` writes them (h², 0.9·h²,
    10·h of the hidden size); it used 0.9 × the ZeRO-1/2 bucket before, so measure compared another engine
    setting than the plan's (found while making measure run what the planner plans, issue 9 item 4)."""
    from gpuplan.measure.deepspeed_layout import _zero_config
    from tests.fixtures.tiny_models import TINY_GPT2

    (tmp_path / "config.json").write_text(json.dumps(TINY_GPT2))
    code = main(["plan", str(tmp_path / "config.json"), "--gpus", "4", "--gpu", "H100-SXM", "--zero", "3",
                 "--tp", "1", "--pp", "1", "--seq-len", "32", "--emit", "deepspeed", "--json"])
    assert code == 0
    emitted = json.loads(json.loads(capsys.readouterr().out)["emit"]["text"])["zero_optimization"]
    measured = _zero_config(3, 10**6, TINY_GPT2["n_embd"])
    assert measured["stage"] == emitted["stage"] == 3
    for key in ("reduce_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold"):
        assert measured[key] == emitted[key], key
