"""Uneven pipeline stages (issue 23): Llama-3.1-405B's 126 blocks on pp 8 run in Megatron-LM with
``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers`` (fewer blocks on the
first and last stages, which also hold the embeddings and the head); gpuplan plans them."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuplan.errors import LayoutError
from gpuplan.parallel.layout import Layout, MegatronDDP, check_model, uneven_stages

TINY10 = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=10, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)


def test_405b_on_pp8_splits_15_16x6_15() -> None:
    assert uneven_stages(126, 8) == (15, 15)
    check_model(1, 8, heads=128, kv_heads=8, layers=126)  # accepted: uneven stages exist
    lay = Layout(dp=1, tp=8, pp=8, micro_batch_size=1, grad_accum=8, sharding=MegatronDDP(),
                 first_stage_layers=15, last_stage_layers=15)
    assert lay.stage_layers(126) == (15.0, 16.0, 15.0)
    assert uneven_stages(128, 8) is None  # even: nothing to do
    # the interleaved schedule still needs every model chunk equal
    with pytest.raises(LayoutError, match="126 mod 16"):
        check_model(1, 8, heads=128, kv_heads=8, layers=126, virtual_stages=2)


@given(layers=st.integers(2, 200), pp=st.integers(2, 64))
def test_uneven_split_covers_every_block_once(layers: int, pp: int) -> None:
    split = uneven_stages(layers, pp)
    if split is None:
        return
    first, last = split
    mid = -(-layers // pp)
    assert first + last + (pp - 2) * mid == layers
    assert 1 <= first <= mid and 1 <= last <= mid


def _plan(tmp_path: Path, *extra: str) -> tuple[int, dict[str, object], str]:
    from gpuplan.cli.main import main

    (tmp_path / "config.json").write_text(json.dumps(TINY10))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["plan", str(tmp_path / "config.json"), "--gpus", "4", "--gpu", "H100-SXM", "--pp", "4",
                     "--seq-len", "32", "--json", "--no-cache", *extra])
    return code, json.loads(out.getvalue()) if out.getvalue() else {}, err.getvalue()


def test_plan_10_blocks_on_pp4_and_megatron_arguments(tmp_path: Path) -> None:
    code, result, err = _plan(tmp_path, "--megatron", "--emit", "torchrun")
    assert code == 0, err[-800:]
    par = result["parallelism"]
    assert isinstance(par, dict)
    # ceil(10/4) = 3 blocks on each of the 2 middle stages, 2 on the first and 2 on the last
    assert (par["first_stage_layers"], par["last_stage_layers"]) == (2, 2)
    kinds = [r["kind"] for r in result["ranks"]]  # type: ignore[union-attr]
    assert kinds == ["first stage", "middle stage", "last stage"]
    assert "--decoder-first-pipeline-num-layers 2 --decoder-last-pipeline-num-layers 2" in str(result["emit"])
