"""FSDP2's own settings in ``plan`` (issue 23): ``--fsdp-reshard-after-forward`` (torchtitan's always | never |
default) and ``--fsdp-sharded-dtype`` (compute | fp32). Memory and time go through evaluate's one FSDP2 rule
(``_states`` / ``fsdp_state_bytes`` / ``_shard_exposed_s``), checked here by exact accounting on the traced gpt2
profile; the flags run end to end on a tiny Llama, are emitted for torchtitan and torchrun, and an engine without
them (DeepSpeed ZeRO, Megatron-LM) is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import tomllib
from tests.hardware.test_support import _run  # the CLI runner (argparse exits included)
from tests.parallel.test_plan_issue9 import TINY_CONFIG

from gpuplan.parallel.evaluate import _stage_params, evaluate
from gpuplan.parallel.layout import FSDP2, Layout


def _fsdp(reshard: bool, pp: int = 1, fp32: bool = False) -> Layout:
    return Layout(dp=32 // pp, tp=1, pp=pp, micro_batch_size=4, grad_accum=4 if pp > 1 else 1,
                  sharding=FSDP2(reshard, sharded_fp32=fp32))


def test_keeping_gathered_parameters_costs_the_blocks_and_saves_the_backward_gathers(gpt2_ctx: Any) -> None:
    """Without resharding every block's compute-dtype parameters stay gathered from its forward to its backward
    (resharding holds two: the running block and the prefetched one); backward gathers nothing again."""
    p = gpt2_ctx.profile
    kept, resharded = evaluate(gpt2_ctx, _fsdp(False)), evaluate(gpt2_ctx, _fsdp(True))
    (k,), (r,) = kept.ranks, resharded.ranks
    assert k.buffers_bytes - r.buffers_bytes == pytest.approx(p.compute_bytes * p.block_params * (p.layers - 2), abs=2)
    assert (k.params_bytes, k.grads_bytes, k.optimizer_bytes) == (r.params_bytes, r.grads_bytes, r.optimizer_bytes)
    assert kept.time_parts_s["shard_comm_exposed"] < resharded.time_parts_s["shard_comm_exposed"]
    assert kept.time_parts_s["compute"] == resharded.time_parts_s["compute"]


def test_under_a_pipeline_the_stage_gradients_wait_for_the_last_micro_batch(gpt2_ctx: Any) -> None:
    """torch.distributed.pipelining reduce-scatters once after the last micro-batch: the stage's unsharded gradients
    are held (gradient bytes each) on top of its gathered parameters (kept: the whole stage; resharded: two blocks)."""
    p = gpt2_ctx.profile
    lay = _fsdp(False, pp=2)
    first = _stage_params(p, lay)[0]
    p2p = 2 * lay.micro_batch_size * p.seq_len * p.hidden * p.compute_bytes
    (rank, *_) = evaluate(gpt2_ctx, lay).ranks
    assert rank.buffers_bytes == pytest.approx(p.compute_bytes * first + p.grad_bytes_per_param * first + p2p, abs=2)
    (rank, *_) = evaluate(gpt2_ctx, _fsdp(True, pp=2)).ranks
    assert rank.buffers_bytes == pytest.approx(
        2 * p.compute_bytes * p.block_params + p.grad_bytes_per_param * first + p2p, abs=2)


def test_fp32_shards_under_amp_change_nothing(gpt2_ctx: Any) -> None:
    """Under amp-bf16 the traced parameters are fp32 already: fp32 shards are what it plans."""
    assert evaluate(gpt2_ctx, _fsdp(True, fp32=True)).ranks == evaluate(gpt2_ctx, _fsdp(True)).ranks


def _plan(tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, Any], str]:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_CONFIG))  # 4 Llama blocks, GQA
    code, out, err = _run(["plan", str(config), "--gpus", "8", "--gpu", "H100-SXM", "--seq-len", "256", "--tp", "1",
                           "--checkpointing", "none", *extra, "--json"])
    return code, (json.loads(out) if out else {}), err


def test_fp32_shards_double_the_bf16_states_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--precision bf16 traces bf16 parameters, gradients and Adam state; fp32 shards hold each in 4 bytes."""
    runs = {d: _plan(tmp_path, capsys, "--precision", "bf16", "--pp", "1", "--dp", "8",
                     "--fsdp-reshard-after-forward", "always", "--fsdp-sharded-dtype", d) for d in ("compute", "fp32")}
    (code16, half, _), (code32, full, _) = runs["compute"], runs["fp32"]
    assert code16 == code32 == 0
    assert half["parallelism"]["sharding"] == full["parallelism"]["sharding"] == "fsdp2"
    assert "fp32-shards" in full["layout"] and "fp32-shards" not in half["layout"]
    assert (half["parallelism"]["fsdp_sharded_dtype"], full["parallelism"]["fsdp_sharded_dtype"]) == ("compute", "fp32")
    (r16,), (r32,) = half["ranks"], full["ranks"]
    shard = full["params_count"] / 8  # dp 8
    assert r32["parameters"] == r32["gradients"] == pytest.approx(4 * shard, abs=1)  # 4 bytes each
    # the traced bf16 Adam state, widened as the parameters are (torch.optim keeps it in the parameter's dtype)
    assert r32["optimizer_state"] == pytest.approx(r16["optimizer_state"] * 4 * shard / r16["parameters"], abs=2)
    assert r16["parameters"] == pytest.approx(2 * shard, rel=1e-3)  # the traced bf16 parameters


def test_reshard_flag_end_to_end_and_torchtitans_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    def reshard(*extra: str) -> bool:
        code, d, err = _plan(tmp_path, capsys, "--precision", "amp-bf16", *extra)
        assert code == 0, err
        assert d["parallelism"]["sharding"] == "fsdp2"  # the flag alone makes the plan FSDP2's
        return bool(d["parallelism"]["reshard_after_forward"])

    assert reshard("--pp", "1", "--fsdp-reshard-after-forward", "never") is False
    assert reshard("--pp", "1", "--fsdp-reshard-after-forward", "always") is True
    # torchtitan's default: reshard without pipeline stages, keep gathered with them
    assert reshard("--pp", "1", "--fsdp-reshard-after-forward", "default") is True
    assert reshard("--pp", "2", "--fsdp-reshard-after-forward", "default") is False


@pytest.mark.parametrize(("extra", "message"), [
    (["--zero", "3", "--fsdp-reshard-after-forward", "never"], "DeepSpeed ZeRO has no equivalent"),
    (["--zero", "2", "--fsdp-sharded-dtype", "fp32"], "--fsdp-sharded-dtype fp32 is an FSDP2 setting"),
    (["--megatron", "--fsdp-reshard-after-forward", "always"], "Megatron-LM's DDP keeps whole parameters"),
    (["--fsdp-reshard-after-forward", "sometimes"], "invalid choice: 'sometimes'"),
    (["--fsdp-sharded-dtype", "fp16"], "invalid choice: 'fp16'"),
])
def test_refusals_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                               message: str) -> None:
    code, _, err = _plan(tmp_path, capsys, *extra)
    assert code == 2 and message in err and err.strip().count("\n") == 0, err


def test_emitted_for_torchtitan_and_torchrun(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, d, err = _plan(tmp_path, capsys, "--precision", "amp-bf16", "--pp", "1", "--fsdp-reshard-after-forward",
                         "never", "--emit", "torchtitan")
    assert code == 0, err
    assert tomllib.loads(d["emit"]["text"])["parallelism"]["fsdp_reshard_after_forward"] == "never"
    code, d, err = _plan(tmp_path, capsys, "--precision", "bf16", "--pp", "1", "--fsdp-reshard-after-forward",
                         "never", "--fsdp-sharded-dtype", "fp32", "--emit", "torchrun")
    assert code == 0, err
    text = d["emit"]["text"]
    assert "reshard_after_forward=False" in text and "model.float()" in text
    assert "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)" in text
