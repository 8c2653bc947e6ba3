"""`gpuplan plan` through the command line: JSON contract, text, --emit, search behaviour."""

from __future__ import annotations

import json

import pytest

from gpuplan.cli.main import main

CONTRACT = (
    "per_gpu_peak_bytes",
    "step_time_s",
    "tokens_per_s_per_gpu",
    "tflops_per_gpu",
    "mfu",
    "parallelism",
    "fits",
    "alternatives",
)
PARALLELISM = ("dp", "tp", "pp", "zero", "micro_batch_size", "grad_accum", "checkpointing")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    code = main(["plan", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_json_contract_and_search(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = _json(
        capsys,
        "gpt2",
        "--gpus",
        "16",
        "--gpu",
        "H100-SXM",
        "--nodes",
        "2",
        "--batch-size",
        "8",
        "--seq-len",
        "1024",
        "--precision",
        "amp-bf16",
    )
    assert code == 0 and d["fits"] is True
    for k in CONTRACT:
        assert k in d
    for k in PARALLELISM:
        assert k in d["parallelism"]
    par = d["parallelism"]
    assert par["dp"] * par["tp"] * par["pp"] == 16
    assert par["dp"] * par["micro_batch_size"] * par["grad_accum"] == 16 * 8  # default global batch: gpus × batch
    assert d["per_gpu_peak_bytes"] == max(r["total_bytes"] for r in d["ranks"])
    assert d["layouts_considered"] > 50
    # alternatives are slower or bigger than the best, and say why
    for alt in d["alternatives"]:
        assert alt["why_not"]
        assert (alt["step_time_s"], alt["per_gpu_peak_bytes"]) >= (d["step_time_s"], 0) or not alt["fits"]
    # tokens/s per GPU is the global batch's tokens over step time and GPUs
    assert d["tokens_per_s_per_gpu"] == pytest.approx(16 * 8 * 1024 / d["step_time_s"] / 16)


def test_fixed_3d_layout_with_zero1_and_pipeline_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    code, d = _json(
        capsys,
        "gpt2",
        "--gpus",
        "16",
        "--gpu",
        "A100-80GB-SXM",
        "--dp",
        "2",
        "--tp",
        "2",
        "--pp",
        "4",
        "--zero",
        "1",
        "--global-batch-size",
        "64",
        "--micro-batch-size",
        "2",
        "--seq-len",
        "1024",
        "--precision",
        "amp-bf16",
    )
    assert code == 0
    par = d["parallelism"]
    assert (par["dp"], par["tp"], par["pp"], par["zero"], par["grad_accum"]) == (2, 2, 4, 1, 16)
    kinds = {r["kind"]: r for r in d["ranks"]}
    assert set(kinds) == {"first stage", "last stage"}

    def stage_acts(global_batch: int) -> tuple[int, int]:
        argv = ["gpt2", "--gpus", "16", "--gpu", "A100-80GB-SXM", "--dp", "2", "--tp", "2", "--pp", "4", "--zero", "1",
                "--global-batch-size", str(global_batch), "--micro-batch-size", "2", "--seq-len", "1024",
                "--precision", "amp-bf16"]
        ranks = {r["kind"]: r["activations"] for r in _json(capsys, *argv)[1]["ranks"]}
        return ranks["first stage"], ranks["last stage"]

    # 1F1B: the first stage holds min(pp, grad_accum) micro-batches of activations, the last stage one
    # (grad_accum 16, 2 and 1 at global batch 64, 8 and 4): each micro-batch in flight adds the same bytes
    (first16, last16), (first2, last2), (first1, last1) = (kinds["first stage"]["activations"],
                                                           kinds["last stage"]["activations"]), *map(stage_acts, (8, 4))
    one = first2 - first1
    assert one > 0 and first16 - first2 == pytest.approx(2 * one, abs=4)
    assert last16 == last2 == last1


def test_text_output_and_emit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            "gpt2",
            "--gpus",
            "8",
            "--gpu",
            "H100-SXM",
            "--fsdp",
            "--seq-len",
            "1024",
            "--precision",
            "amp-bf16",
            "--emit",
            "torchrun",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "best layout: dp=8 tp=1 pp=1 fsdp2" in out or "best layout: dp=8 tp=1 pp=1 hsdp" in out
    assert "torchrun --standalone --nproc-per-node 8 train.py" in out
    assert "fully_shard(block" in out


@pytest.mark.slow
def test_does_not_fit_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    # llama-3.1-8b on 2 × T4 (16 GB): 8B params × 16 bytes of AMP/Adam states = 128 GB > 2 × 15 GiB even
    # fully sharded and offloaded to the CPU (DeepSpeed keeps the 4·largest-layer buffer on the GPU).
    code, d = _json(
        capsys,
        "llama-3.1-8b",
        "--gpus",
        "2",
        "--gpu",
        "T4",
        "--seq-len",
        "2048",
        "--precision",
        "amp-fp16",
        "--dp",
        "2",
    )
    assert code == (0 if d["fits"] else 1)
    assert d["parallelism"]["checkpointing"] == "full"  # retraced with checkpointing when nothing fit


def test_ranks_hsdp_and_offload(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    from gpuplan.parallel.evaluate import memory
    from gpuplan.parallel.layout import FSDP2, Layout, Zero

    full = memory(gpt2_ctx, Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2()))[0]
    hsdp = memory(gpt2_ctx, Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1,
                                   sharding=FSDP2(hsdp_shard=8)))[0]
    # HSDP shards states 8 ways instead of 32: 4× the sharded states
    assert hsdp.optimizer_bytes == pytest.approx(4 * full.optimizer_bytes, rel=1e-6)
    z3 = memory(gpt2_ctx, Layout(dp=8, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=Zero(3)))[0]
    off = memory(
        gpt2_ctx,
        Layout(
            dp=8,
            tp=1,
            pp=1,
            micro_batch_size=4,
            grad_accum=1,
            sharding=Zero(3, offload_optimizer=True, offload_params=True),
        ),
    )[0]
    assert off.optimizer_bytes == 0 and off.params_bytes == 0 and off.total_bytes < z3.total_bytes


def test_megatron_weights_are_16bit_without_autocast_copies(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    from gpuplan.parallel.evaluate import evaluate
    from gpuplan.parallel.layout import Layout, MegatronDDP

    p = gpt2_ctx.profile
    assert p.block_weight_cast_bytes > 0  # traced under amp-bf16: autocast keeps bf16 copies of fp32 weights
    torch_ddp = evaluate(gpt2_ctx, Layout(dp=4, tp=2, pp=1, micro_batch_size=4, grad_accum=1))
    mega = evaluate(gpt2_ctx, Layout(dp=4, tp=2, pp=1, micro_batch_size=4, grad_accum=1, sharding=MegatronDDP()))
    (t,), (m,) = torch_ddp.ranks, mega.ranks
    assert t.weight_cast_bytes > 0 and m.weight_cast_bytes == 0
    # Megatron-LM mixed precision: 2 (fp16 weights) + 4 (fp32 main grads) + 4 (fp32 master) + 8 (Adam)
    rank_params = p.params_count / 2
    assert m.params_bytes == pytest.approx(2 * rank_params, rel=1e-6)
    assert m.params_bytes + m.grads_bytes + m.optimizer_bytes == pytest.approx(18 * rank_params, rel=1e-4)
    assert mega.step_time_s < torch_ddp.step_time_s  # no per-micro-batch weight casts


def test_emit_megatron_arguments(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "plan",
            "gpt2",
            "--gpus",
            "16",
            "--gpu",
            "A100-80GB-SXM",
            "--tp",
            "2",
            "--pp",
            "4",
            "--megatron",
            "--precision",
            "amp-bf16",
            "--seq-len",
            "1024",
            "--checkpointing",
            "full",
            "--emit",
            "torchrun",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    for arg in (
        "pretrain_gpt.py",
        "--tensor-model-parallel-size 2",
        "--pipeline-model-parallel-size 4",
        "--sequence-parallel",
        "--recompute-granularity full",
        "--bf16",
        "--num-attention-heads 12",
    ):
        assert arg in out
