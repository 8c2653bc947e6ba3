"""Emitted launch configurations, loaded by the engines' own parsers where they install here."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from tests.fixtures.plans import single_layout_plan

from gpuplan.parallel.emit import accelerate_config, deepspeed_config, emit, torch_snippet
from gpuplan.parallel.layout import FSDP2, Layout, MegatronDDP, Zero


class _MPU:
    """The model-parallel unit DeepSpeedConfig asks for the data-parallel world size."""

    def __init__(self, dp: int) -> None:
        self.dp = dp

    def get_data_parallel_world_size(self) -> int:
        return self.dp

    def get_model_parallel_world_size(self) -> int:
        return 1


@pytest.mark.parametrize("zero,offload", [(1, False), (2, False), (2, True), (3, False), (3, True)])
def test_deepspeed_config_parses(gpt2_ctx, zero: int, offload: bool, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    # No process group here: DeepSpeedConfig reads the rank from deepspeed.comm, then dp from the mpu.
    monkeypatch.setattr(ds_config.dist, "get_rank", lambda *a, **k: 0)
    lay = Layout(
        dp=8,
        tp=1,
        pp=1,
        micro_batch_size=4,
        grad_accum=2,
        sharding=Zero(zero, offload_optimizer=offload, offload_params=offload and zero == 3),
    )
    cfg = json.loads(emit(single_layout_plan(gpt2_ctx, lay), "deepspeed"))
    parsed = ds_config.DeepSpeedConfig(cfg, mpu=_MPU(8))
    assert parsed.zero_optimization_stage == zero
    assert parsed.train_batch_size == 64 and parsed.train_micro_batch_size_per_gpu == 4
    assert parsed.gradient_accumulation_steps == 2
    assert parsed.bfloat16_config.enabled
    zc = parsed.zero_config
    if zero == 3:
        h = gpt2_ctx.profile.hidden
        assert zc.reduce_bucket_size == h * h and zc.prefetch_bucket_size == int(0.9 * h * h)
        assert zc.param_persistence_threshold == 10 * h
    else:
        assert zc.reduce_bucket_size == cfg["zero_optimization"]["reduce_bucket_size"]
    assert (zc.offload_optimizer is not None) == offload


def test_accelerate_config_loads(gpt2_ctx, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    for lay, kind in (
        (
            Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2(reshard_after_forward=False)),
            "FSDP",
        ),
        (Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=Zero(2)), "DEEPSPEED"),
        (Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1), "MULTI_GPU"),
    ):
        path = tmp_path / f"{kind}.yaml"
        path.write_text(emit(single_layout_plan(gpt2_ctx, lay), "accelerate"))
        cfg = config_args.load_config_from_file(str(path))
        assert str(cfg.distributed_type).endswith(kind)
        assert cfg.num_processes == 32 and cfg.num_machines == 4
        assert cfg.mixed_precision == "bf16"
        if kind == "FSDP":
            assert cfg.fsdp_config["fsdp_version"] == 2 and cfg.fsdp_config["fsdp_reshard_after_forward"] is False
        if kind == "DEEPSPEED":
            assert cfg.deepspeed_config["zero_stage"] == 2
        assert accelerate_config(single_layout_plan(gpt2_ctx, lay))["num_processes"] == 32


def test_accelerate_megatron_config_loads(gpt2_ctx, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    config_args = pytest.importorskip("accelerate.commands.config.config_args")
    lay = Layout(dp=2, tp=4, pp=4, micro_batch_size=1, grad_accum=8, sharding=MegatronDDP(), checkpointing="full")
    path = tmp_path / "megatron.yaml"
    path.write_text(emit(single_layout_plan(gpt2_ctx, lay), "accelerate"))
    cfg = config_args.load_config_from_file(str(path))
    assert str(cfg.distributed_type).endswith("MEGATRON_LM")
    m = cfg.megatron_lm_config
    assert (m["megatron_lm_tp_degree"], m["megatron_lm_pp_degree"], m["megatron_lm_num_micro_batches"]) == (4, 4, 8)
    assert m["megatron_lm_sequence_parallelism"] and m["megatron_lm_recompute_activations"]


def test_torch_snippet_uses_real_apis(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    import importlib

    lay = Layout(dp=8, tp=4, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2(hsdp_shard=2))
    text = torch_snippet(single_layout_plan(gpt2_ctx, lay))
    tree = ast.parse(text)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            mod = importlib.import_module(node.module)
            for alias in node.names:
                assert hasattr(mod, alias.name), f"{node.module}.{alias.name}"
    assert 'mesh_dim_names=("dp_replicate", "dp_shard", "tp")' in text
    assert 'init_device_mesh("cuda", (4, 2, 4)' in text
    assert "reshard_after_forward=True" in text


def test_torchrun_command_and_pipeline(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    lay = Layout(dp=2, tp=4, pp=4, micro_batch_size=1, grad_accum=8, schedule="interleaved", virtual_stages=3)
    text = emit(single_layout_plan(gpt2_ctx, lay), "torchrun")
    assert "torchrun --nnodes 4 --nproc-per-node 8" in text
    assert "ScheduleInterleaved1F1B" in text and "N_MICROBATCHES = 8" in text
    ast.parse(text.split("\n", 2)[2])
    cfg = deepspeed_config(single_layout_plan(gpt2_ctx, lay))
    assert cfg["train_batch_size"] == 2 * 1 * 8


_SNIPPET_LAYOUTS = {
    "fsdp2 dp only": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2()),
    "ddp dp only": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1),
    "hsdp + tp + sp": Layout(dp=8, tp=4, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2(hsdp_shard=2)),
    "tp without sp": Layout(dp=8, tp=4, pp=1, micro_batch_size=4, grad_accum=1, sequence_parallel=False),
    "pp 1f1b": Layout(dp=8, tp=1, pp=4, micro_batch_size=1, grad_accum=8),
    "pp interleaved + tp": Layout(dp=2, tp=4, pp=4, micro_batch_size=1, grad_accum=8, schedule="interleaved",
                                  virtual_stages=3),
    "fsdp2 + checkpointing": Layout(dp=32, tp=1, pp=1, micro_batch_size=4, grad_accum=1, sharding=FSDP2(),
                                    checkpointing="full"),
}


@pytest.mark.parametrize("name", list(_SNIPPET_LAYOUTS))
def test_torch_snippet_imports_only_what_it_uses(gpt2_ctx, name: str) -> None:  # type: ignore[no-untyped-def]
    """Every name the generated snippet imports is used in its code (the F401 rule, by AST walk), and
    every name its code calls from torch is imported (compiles and names nothing undefined at top level)."""
    text = torch_snippet(single_layout_plan(gpt2_ctx, _SNIPPET_LAYOUTS[name]))
    tree = ast.parse(text)
    compile(tree, "<snippet>", "exec")
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    assert imported - used == set(), f"{name}: unused imports {sorted(imported - used)}\n{text}"
    known_apis = {"ColwiseParallel", "RowwiseParallel", "SequenceParallel", "parallelize_module", "fully_shard",
                  "MixedPrecisionPolicy", "init_device_mesh", "PipelineStage", "Schedule1F1B",
                  "ScheduleInterleaved1F1B", "DDP", "torch"}
    assert (used & known_apis) - imported == set(), f"{name}: used but not imported\n{text}"


def test_selective_op_checkpointing_emitted_or_refused(gpt2_ctx) -> None:  # type: ignore[no-untyped-def]
    from gpuplan.errors import ConfigError

    torch_lay = Layout(dp=4, tp=2, pp=4, micro_batch_size=1, grad_accum=8, checkpointing="selective-op")
    assert "op-level SAC" in torch_snippet(single_layout_plan(gpt2_ctx, torch_lay))
    # Megatron-LM has no op-level selective recompute: refused in one line naming what can run it
    meg = Layout(
        dp=4, tp=2, pp=4, micro_batch_size=1, grad_accum=8, sharding=MegatronDDP(), checkpointing="selective-op"
    )
    with pytest.raises(ConfigError, match="no op-level selective checkpointing") as err:
        emit(single_layout_plan(gpt2_ctx, meg), "torchrun")
    assert "\n" not in str(err.value)
