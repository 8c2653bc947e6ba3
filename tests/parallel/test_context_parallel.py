"""Context parallelism in the planner (issue 23): layouts, per-GPU memory, K/V exchange time,
emission, refusals. Sources of the engines' rules: torchtitan ``--parallelism.context_parallel_degree``
(ring attention, load-balanced causal chunks: sequence divisible by 2·cp; FSDP2 over dp·cp), Megatron-LM
``--context-parallel-size`` / ``--cp-comm-type p2p|a2a|a2a+p2p``."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.fixtures.plans import single_layout_plan

from gpuplan.errors import ConfigError, LayoutError
from gpuplan.parallel.emit import emit, megatron_args
from gpuplan.parallel.evaluate import evaluate
from gpuplan.parallel.layout import CP_COMMS, DDP, FSDP2, Layout, MegatronDDP, Zero
from gpuplan.parallel.search import Constraints, candidates

TINY = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)


def _lay(cp: int, comm: str = "ring", sharding: object = None, dp: int = 1, tp: int = 1) -> Layout:
    return Layout(dp=dp, tp=tp, pp=1, micro_batch_size=4, grad_accum=1, cp=cp, cp_comm=comm,
                  sharding=sharding if sharding is not None else MegatronDDP())  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cp=st.sampled_from([1, 2, 4, 8]), more=st.sampled_from([2, 4]), comm=st.sampled_from(CP_COMMS),
       fsdp=st.booleans(), tp=st.sampled_from([1, 2, 4]))
def test_more_cp_never_more_activation_memory_per_gpu(gpt2_ctx, cp: int, more: int, comm: str, fsdp: bool,
                                                      tp: int) -> None:  # type: ignore[no-untyped-def]
    # gpt2: 12 heads, 1024 tokens; activations plus the K/V exchange buffers of one rank
    def act(c: int) -> int:
        s = FSDP2() if fsdp else MegatronDDP()
        r = evaluate(gpt2_ctx, _lay(c, comm if c > 1 else "ring", s, dp=2, tp=tp)).ranks[0]
        return r.activations_bytes + r.buffers_bytes

    assert act(cp * more) <= act(cp)


def test_cp_splits_activations_and_compute_and_pays_kv_exchange(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    one, four = evaluate(gpt2_ctx, _lay(1)), evaluate(gpt2_ctx, _lay(4))
    a1, a4 = one.ranks[0].activations_bytes, four.ranks[0].activations_bytes
    assert abs(a4 * 4 - a1) <= 8  # each rank holds a quarter of each sequence (int truncation)
    assert four.time_parts_s["compute"] < one.time_parts_s["compute"] / 3
    assert one.time_parts_s["cp_comm"] == 0.0
    # Ulysses' all-to-alls sit on the critical path: never cheaper than the overlapped ring here
    a2a = evaluate(gpt2_ctx, _lay(4, "all-to-all"))
    assert a2a.time_parts_s["cp_comm"] > 0 and a2a.time_parts_s["cp_comm"] >= four.time_parts_s["cp_comm"]
    assert four.layout.gpus == 4 and "cp=4" in four.layout.describe()


def test_fsdp_shards_over_dp_times_cp(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    r2 = evaluate(gpt2_ctx, _lay(1, sharding=FSDP2(), dp=8)).ranks[0]
    r8 = evaluate(gpt2_ctx, _lay(4, sharding=FSDP2(), dp=2)).ranks[0]
    assert abs(r2.params_bytes - r8.params_bytes) <= 1 and abs(r2.optimizer_bytes - r8.optimizer_bytes) <= 1


def test_layouts_engines_cannot_run_are_refused() -> None:
    for s in (DDP(), Zero(1), Zero(3), FSDP2(hsdp_shard=2)):
        with pytest.raises(LayoutError, match="context parallelism") as err:
            Layout(dp=4, tp=1, pp=1, micro_batch_size=1, grad_accum=1, cp=2, sharding=s)
        assert "\n" not in str(err.value)
    with pytest.raises(LayoutError, match="is not one of"):
        Layout(dp=1, tp=1, pp=1, micro_batch_size=1, grad_accum=1, cp=2, cp_comm="star", sharding=MegatronDDP())


def test_search_offers_cp_only_when_asked_and_only_where_the_sequence_splits() -> None:
    base = dict(gpus=8, global_batch=8, seq_len=96)
    never = list(candidates(Constraints(**base), heads=4, kv_heads=2, layers=2, gpus_per_node=8))  # type: ignore[arg-type]
    assert {lay.cp for lay in never} == {1}
    searched = list(candidates(Constraints(**base, search_cp=True), heads=4, kv_heads=2, layers=2,  # type: ignore[arg-type]
                               gpus_per_node=8))
    # 96 tokens split into 2·cp chunks: cp 2, 4 and 8 divide 48
    assert {lay.cp for lay in searched} == {2, 4, 8}
    assert all(isinstance(lay.sharding, MegatronDDP | FSDP2) for lay in searched)
    assert all(lay.gpus == 8 for lay in searched)


def test_emitted_for_megatron_and_torchtitan_refused_elsewhere(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    meg = single_layout_plan(gpt2_ctx, _lay(4, "hierarchical"))
    assert "--context-parallel-size 4 --cp-comm-type a2a+p2p" in " ".join(megatron_args(meg))
    torch_ring = single_layout_plan(gpt2_ctx, _lay(2, sharding=FSDP2(), dp=2))
    assert "--parallelism.context_parallel_degree 2" in emit(torch_ring, "torchrun")
    with pytest.raises(ConfigError, match="cannot implement"):
        emit(torch_ring, "accelerate")
    ulysses_fsdp = single_layout_plan(gpt2_ctx, _lay(2, "all-to-all", FSDP2(), dp=2))
    with pytest.raises(ConfigError, match="only Megatron-LM's arguments express") as err:
        emit(ulysses_fsdp, "torchrun")
    assert "\n" not in str(err.value)


def _plan_cli(tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    from gpuplan.cli.main import main

    (tmp_path / "config.json").write_text(json.dumps(TINY))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["plan", str(tmp_path / "config.json"), "--gpus", "8", "--gpu", "H100-SXM", "--seq-len",
                         "64", "--json", "--no-cache", *extra])
        except SystemExit as exc:  # argparse's own refusals (a choice not offered) exit 2 with usage
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("comm", CP_COMMS)
def test_plan_cli_cp(tmp_path: Path, comm: str) -> None:
    code, out, err = _plan_cli(tmp_path, "--cp", "2", "--cp-comm", comm)
    assert code == 0, err[-800:]
    par = json.loads(out)["parallelism"]
    assert (par["cp"], par["cp_comm"]) == (2, comm)
    assert par["sharding"] in ("megatron-ddp", "fsdp2")


@pytest.mark.parametrize(("extra", "says"), [
    (("--cp", "3"), "2·cp = 6 chunks"),
    (("--cp", "0"), "at least 1"),
    (("--cp", "8", "--cp-comm", "all-to-all"), "heads"),
    (("--cp", "2", "--zero", "1"), "context parallelism"),
    (("--cp-comm", "star"), "invalid choice"),
])
def test_plan_cli_bad_cp_is_one_line_exit_2(tmp_path: Path, extra: tuple[str, ...], says: str) -> None:
    code, _, err = _plan_cli(tmp_path, *extra)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and says in err, err[-800:]
    assert len(lines) <= 2  # argparse prints its usage line before the error


def test_fsdp_with_pipeline_and_cp_is_searched_when_asked() -> None:
    # torchtitan runs FSDP + TP + PP + CP (benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd, Table 6): with
    # --fsdp the search offers FSDP2 on pipelined CP layouts too; left open, cp > 1 with pp > 1 stays Megatron-LM's
    shape = dict(heads=4, kv_heads=2, layers=4, gpus_per_node=8)
    fixed = dict(gpus=8, global_batch=8, seq_len=96, cp=2, pp=2, tp=1)
    asked = list(candidates(Constraints(**fixed, fsdp=True), **shape))  # type: ignore[arg-type]
    assert asked and all(isinstance(lay.sharding, FSDP2) and lay.pp == 2 and lay.cp == 2 for lay in asked)
    left_open = list(candidates(Constraints(**fixed), **shape))  # type: ignore[arg-type]
    assert left_open and all(isinstance(lay.sharding, MegatronDDP) for lay in left_open)
