"""``plan --emit torchtitan`` (issue 23 item 4): a job TOML that torchtitan's own ConfigManager reads
back as the planned layout, uneven pipeline stages written as module lists, and one-line refusals for
what torchtitan cannot run."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest
import tomllib
from tests.fixtures.plans import single_layout_plan
from tests.parallel.test_plan_issue9 import TINY_CONFIG

from gpuplan.cli.main import main
from gpuplan.errors import ConfigError
from gpuplan.parallel.emit import emit, engines_for, refusal
from gpuplan.parallel.layout import FSDP2, Layout

TITAN_LAYOUTS: dict[str, Layout] = {
    "fsdp2": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=2, sharding=FSDP2()),
    "hsdp-op-sac": Layout(
        dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2(hsdp_shard=8), checkpointing="selective-op"
    ),
    "fsdp2-tp-pp": Layout(dp=4, tp=4, pp=2, micro_batch_size=1, grad_accum=8, sharding=FSDP2(), checkpointing="full"),
    "fsdp2-uneven-pp": Layout(
        dp=8, tp=1, pp=4, micro_batch_size=1, grad_accum=8, sharding=FSDP2(), first_stage_layers=2, last_stage_layers=2
    ),
    "fsdp2-cp": Layout(dp=8, tp=2, pp=1, micro_batch_size=1, grad_accum=1, sharding=FSDP2(), cp=2),
}


def test_uneven_stages_are_written_as_planned(gpt2_ctx: Any) -> None:
    """gpt2's 12 blocks on pp 4 with 2 on the first and last stage: 2 + 4 + 4 + 2, embeddings first, head last."""
    cfg = tomllib.loads(emit(single_layout_plan(gpt2_ctx, TITAN_LAYOUTS["fsdp2-uneven-pp"]), "torchtitan"))
    chunks = cfg["parallelism"]["module_fqns_per_model_part"]
    assert [sum(n.startswith("layers.") for n in c) for c in chunks] == [2, 4, 4, 2]
    assert chunks[0][0] == "tok_embeddings" and chunks[-1][-2:] == ["norm", "output"]
    assert [n for c in chunks for n in c if n.startswith("layers.")] == [f"layers.{i}" for i in range(12)]


@pytest.mark.parametrize(
    ("layout", "why"),
    [
        (Layout(dp=8, tp=4, pp=1, micro_batch_size=4, grad_accum=1), "DDP only when data parallelism"),
        (
            Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2(), checkpointing="selective"),
            "selective-op",
        ),
        (
            Layout(dp=8, tp=2, pp=1, micro_batch_size=1, grad_accum=1, sharding=FSDP2(), cp=2, cp_comm="all-to-all"),
            "ring attention",
        ),
    ],
)
def test_layouts_torchtitan_cannot_run_are_refused_in_one_line(gpt2_ctx: Any, layout: Layout, why: str) -> None:
    assert "torchtitan" not in engines_for(layout)
    msg = refusal(layout, "torchtitan")
    assert msg is not None and "\n" not in msg and why in msg and msg.startswith("--emit torchtitan")


def test_cli_emits_torchtitan_and_refuses_what_it_cannot_express(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_CONFIG))  # a user config.json: 4 Llama blocks, GQA
    base = [
        "plan",
        str(config),
        "--gpus",
        "8",
        "--gpu",
        "H100-SXM",
        "--seq-len",
        "256",
        "--fsdp",
        "--tp",
        "1",
        "--pp",
        "1",
        "--checkpointing",
        "none",
        "--emit",
        "torchtitan",
    ]
    assert main([*base, "--precision", "amp-bf16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    cfg = tomllib.loads(out["emit"]["text"])
    assert out["emit"]["engine"] == "torchtitan" and cfg["parallelism"]["data_parallel_shard_degree"] == 8
    assert cfg["model"]["flavor"] == "custom" and "not a torchtitan built-in model" in out["emit"]["text"]
    for extra, what in (
        (["--precision", "amp-fp16"], "--precision amp-fp16"),
        (["--precision", "amp-bf16", "--optimizer", "sgd"], "--optimizer sgd"),
    ):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and what in err and "Traceback" not in err


@pytest.mark.slow
@pytest.mark.skipif(find_spec("torchtitan") is None, reason="torchtitan is not installed (scripts/test installs it)")
def test_torchtitans_config_manager_reads_every_emitted_layout(gpt2_ctx: Any, tmp_path: Path) -> None:
    """torchtitan 0.2.2's ConfigManager (it rejects any key its JobConfig lacks) parses each emitted file;
    the parallel degrees, batch sizes, schedule and checkpointing it reads back are the plan's."""
    files = {}
    for name, lay in TITAN_LAYOUTS.items():
        path = tmp_path / f"{name}.toml"
        path.write_text(emit(single_layout_plan(gpt2_ctx, lay), "torchtitan"))
        files[name] = str(path)
    script = (
        "import json, sys\n"
        "from torchtitan.config.manager import ConfigManager\n"
        "out = {}\n"
        "for name, path in json.loads(sys.argv[1]).items():\n"
        "    c = ConfigManager().parse_args(['--job.config_file', path])\n"
        "    p = c.parallelism\n"
        "    out[name] = [p.data_parallel_replicate_degree, p.data_parallel_shard_degree, p.tensor_parallel_degree,\n"
        "                 p.pipeline_parallel_degree, p.context_parallel_degree, c.training.local_batch_size,\n"
        "                 c.training.global_batch_size, c.activation_checkpoint.mode,\n"
        "                 c.activation_checkpoint.selective_ac_option, p.pipeline_parallel_schedule]\n"
        "print(json.dumps(out))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, json.dumps(files)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr[-2000:]
    read = json.loads(run.stdout.strip().splitlines()[-1])
    for name, lay in TITAN_LAYOUTS.items():
        replicate, shard, tp, pp, cp, local, global_, mode, option, schedule = read[name]
        assert replicate * shard * tp * pp * cp == lay.gpus and (tp, pp, cp) == (lay.tp, lay.pp, lay.cp), name
        assert global_ == lay.global_batch and global_ // (local * lay.dp) == (1 if lay.pp > 1 else lay.grad_accum)
        assert mode == {"none": "none", "full": "full", "selective-op": "selective"}[lay.checkpointing]
        assert (option == "op") == (lay.checkpointing == "selective-op")
        assert schedule == "1F1B" or lay.pp > 1


def test_refusals_name_torchtitan_for_fsdp_layouts(gpt2_ctx: Any) -> None:
    """An FSDP2 layout any engine can run lists torchtitan among those that can (the refusal of another)."""
    lay = TITAN_LAYOUTS["fsdp2"]
    assert engines_for(lay) == ("torchrun", "accelerate", "torchtitan")
    with pytest.raises(ConfigError, match="--emit torchtitan"):
        emit(single_layout_plan(gpt2_ctx, lay), "deepspeed")
