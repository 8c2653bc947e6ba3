"""Launch configurations for the engines that run a layout: torchrun (+ FSDP2/TP snippet),
DeepSpeed ``ds_config.json``, an accelerate config YAML, a torchtitan job TOML
(``parallel/emit_torchtitan.py``), and the torchrun line inside a Kubernetes JobSet or a SkyPilot task
(``parallel/emit_cluster.py``). Strings only; nothing is launched."""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.parallel.emit_cluster import CLUSTER_EMITTERS, cluster_manifest
from gpuplan.parallel.emit_torchtitan import torchtitan_limit, torchtitan_toml
from gpuplan.parallel.evaluate import bucket_elements, zero3_buckets
from gpuplan.parallel.layout import (
    DDP,
    FSDP2,
    MEGATRON_ENCODER_DECODER,
    MegatronDDP,
    Zero,
    encoder_decoder_refusal,
    encoder_stages,
)

if TYPE_CHECKING:
    from gpuplan.parallel.layout import Layout
    from gpuplan.parallel.plan import EngineFilter, Plan
    from gpuplan.workload import Workload

EMITTERS: tuple[str, ...] = ("torchrun", "deepspeed", "accelerate", "torchtitan")
"""The engines' own launch configurations (``engines_for`` answers in these)."""
ALL_EMITTERS: tuple[str, ...] = (*EMITTERS, *CLUSTER_EMITTERS)
"""Every ``--emit`` value: the engines' and the cluster manifests around the torchrun line."""


def mixed_precision(precision: str) -> str:
    """accelerate's / DeepSpeed's mixed-precision name for a gpuplan precision (``no`` for fp32 / tf32)."""
    return {"amp-bf16": "bf16", "bf16": "bf16", "amp-fp16": "fp16", "fp16": "fp16"}.get(precision, "no")


def deepspeed_config(p: Plan) -> dict[str, Any]:
    """The ds_config dict for the plan's layout (ZeRO stage 0 when the layout is plain DDP)."""
    lay, prof = p.best.layout, p.profile
    rank_params = prof.params_count / lay.tp / lay.pp
    s = lay.sharding
    stage = s.stage if isinstance(s, Zero) else 0
    zero: dict[str, Any] = {"stage": stage}
    if stage in (1, 2):
        b = bucket_elements(rank_params)
        zero.update(
            overlap_comm=True,
            contiguous_gradients=True,
            reduce_scatter=True,
            reduce_bucket_size=b,
            allgather_bucket_size=b,
        )
    elif stage == 3:
        red, prefetch, persist = zero3_buckets(prof.hidden)
        zero.update(
            overlap_comm=True,
            contiguous_gradients=True,
            reduce_bucket_size=red,
            stage3_prefetch_bucket_size=prefetch,
            stage3_param_persistence_threshold=persist,
            stage3_max_live_parameters=int(1e9),
            stage3_max_reuse_distance=int(1e9),
            stage3_gather_16bit_weights_on_model_save=True,
        )
    if isinstance(s, Zero) and s.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if isinstance(s, Zero) and s.offload_params:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    cfg: dict[str, Any] = {
        "train_batch_size": lay.global_batch,
        "train_micro_batch_size_per_gpu": lay.micro_batch_size,
        "gradient_accumulation_steps": lay.grad_accum,
        "gradient_clipping": 1.0,
        "zero_optimization": zero,
        "steps_per_print": 100,
        "wall_clock_breakdown": False,
    }
    mp = mixed_precision(p.workload.precision)
    if mp == "bf16":
        cfg["bf16"] = {"enabled": True}
    elif mp == "fp16":
        cfg["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    if p.workload.optimizer in ("adam", "adamw"):
        cfg["optimizer"] = {
            "type": "AdamW" if p.workload.optimizer == "adamw" else "Adam",
            "params": {"lr": 3e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1},
        }
    if lay.checkpointing != "none":
        cfg["activation_checkpointing"] = {
            "partition_activations": lay.tp > 1,
            "contiguous_memory_optimization": False,
        }
    return cfg


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def torchrun_command(p: Plan, script: str = "train.py") -> str:
    t = p.topology
    if t.nodes == 1:
        return f"torchrun --standalone --nproc-per-node {t.gpus_per_node} {script}"
    return (
        f"torchrun --nnodes {t.nodes} --nproc-per-node {t.gpus_per_node} --rdzv-backend c10d "
        f"--rdzv-endpoint $MASTER_ADDR:29500 --rdzv-id gpuplan {script}"
    )


def torch_snippet(p: Plan) -> str:
    """Python applying the layout with torch.distributed (device mesh, TP plan, FSDP2, pipelining)."""
    lay = p.best.layout
    mp = mixed_precision(p.workload.precision)
    dtype = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}.get(mp, "torch.float32")
    s = lay.sharding
    hsdp_shard = s.hsdp_shard if isinstance(s, FSDP2) else None
    dims, names = [], []
    if lay.pp > 1:
        dims.append(lay.pp)
        names.append('"pp"')
    if hsdp_shard is not None:
        dims += [lay.dp // hsdp_shard, hsdp_shard]
        names += ['"dp_replicate"', '"dp_shard"']
    else:
        dims.append(lay.dp)
        names.append('"dp"')
    dims.append(lay.tp)
    names.append('"tp"')
    lines = [
        "def apply_layout(model: torch.nn.Module, blocks: list[torch.nn.Module]) -> torch.nn.Module:",
        f'    mesh = init_device_mesh("cuda", {_tuple([str(d) for d in dims])}, mesh_dim_names={_tuple(names)})',
    ]
    if lay.tp > 1:
        attn = "self_attn"
        lines += [
            "    # module names of Llama-style Hugging Face blocks; rename for other architectures",
            "    # Megatron-style TP: column-parallel q/k/v and up/gate, row-parallel o/down"
            + (", sequence-parallel norms" if lay.sequence_parallel else ""),
            "    for block in blocks:",
            "        plan = {",
            f'            "{attn}.q_proj": ColwiseParallel(), "{attn}.k_proj": ColwiseParallel(),',
            f'            "{attn}.v_proj": ColwiseParallel(), "{attn}.o_proj": RowwiseParallel(),',
            '            "mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),',
            '            "mlp.down_proj": RowwiseParallel(),',
        ]
        if lay.sequence_parallel:
            lines.append(
                '            "input_layernorm": SequenceParallel(),\n'
                '            "post_attention_layernorm": SequenceParallel(),'
            )
        lines += [
            "        }",
            '        parallelize_module(block, mesh["tp"], plan)',
        ]
    if isinstance(s, FSDP2):
        dp_mesh = '["dp_replicate", "dp_shard"]' if hsdp_shard is not None else '["dp"]'
        if s.sharded_fp32:
            # --fsdp-sharded-dtype fp32: fp32 shards (and so gradients and optimizer state), compute in 16 bits
            lines.append("    model.float()  # fp32 shards, gradients and optimizer state; bf16 compute after a gather")
            dtype = "torch.bfloat16" if dtype == "torch.float32" else dtype
        lines += [
            f"    mp = MixedPrecisionPolicy(param_dtype={dtype}, reduce_dtype=torch.float32)",
            "    for block in blocks:",
            f"        fully_shard(block, mesh=mesh{dp_mesh}, mp_policy=mp, "
            f"reshard_after_forward={s.reshard_after_forward})",
            f"    fully_shard(model, mesh=mesh{dp_mesh}, mp_policy=mp)",
        ]
    elif lay.pp == 1:
        lines += [
            "    from torch.nn.parallel import DistributedDataParallel as DDP",
            '    model = DDP(model, process_group=mesh["dp"].get_group(), gradient_as_bucket_view=True)',
        ]
    if lay.checkpointing != "none":
        lines += [
            "    # activation checkpointing: wrap each block before sharding, in your model code:",
            "    #   from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper",
            "    #   block = checkpoint_wrapper(block)",
        ]
        if lay.checkpointing == "selective-op":
            lines += [
                "    #   selective-op: checkpoint_wrapper(block, context_fn=..., preserve_rng_state=False) with",
                "    #   torchtitan's op-level SAC policy (odd mm outputs, SDPA outputs, reduce-scatter saved)",
            ]
    if lay.first_stage_layers:
        lines.append(
            f"    # uneven pipeline stages: {lay.first_stage_layers} blocks on the first stage, "
            f"{lay.last_stage_layers} on the last, the rest split evenly (split the model so)"
        )
    if lay.cp > 1:
        lines += [
            f"    # context parallelism over {lay.cp} ranks (ring attention, load-balanced causal chunks): torchtitan",
            f"    #   --parallelism.context_parallel_degree {lay.cp}",
            "    #   (torch.distributed.tensor.experimental.context_parallel around each step: the batch's",
            "    #   sequence dimension sharded over the cp mesh dimension)",
        ]
    lines.append("    return model")
    if lay.pp > 1:
        sched = "ScheduleInterleaved1F1B" if lay.schedule == "interleaved" else "Schedule1F1B"
        lines += [
            "",
            f"# Pipeline: {lay.pp} stages"
            + (f", {lay.virtual_stages} model chunks per rank" if lay.schedule == "interleaved" else "")
            + f", {lay.grad_accum} micro-batches of {lay.micro_batch_size}",
            f"N_MICROBATCHES = {lay.grad_accum}",
            "",
            "def build_schedule(my_chunks, num_stages, device, pp_group, loss_fn):",
            '    # my_chunks: the (stage_index, module) pairs this rank runs; pp_group: mesh["pp"].get_group()',
            "    stages = [PipelineStage(chunk, stage_index, num_stages, device, group=pp_group)",
            "              for stage_index, chunk in my_chunks]",
            f"    return {sched}(stages{'' if lay.schedule == 'interleaved' else '[0]'}, "
            "n_microbatches=N_MICROBATCHES, loss_fn=loss_fn)",
        ]
    header = ["# Generated by gpuplan: " + lay.describe(), *_imports_used(lines), ""]
    return "\n".join(header + lines) + "\n"


_SNIPPET_IMPORTS: tuple[tuple[str, str], ...] = (
    ("torch.distributed.device_mesh", "init_device_mesh"),
    ("torch.distributed.fsdp", "MixedPrecisionPolicy"),
    ("torch.distributed.fsdp", "fully_shard"),
    ("torch.distributed.tensor.parallel", "ColwiseParallel"),
    ("torch.distributed.tensor.parallel", "RowwiseParallel"),
    ("torch.distributed.tensor.parallel", "SequenceParallel"),
    ("torch.distributed.tensor.parallel", "parallelize_module"),
    ("torch.distributed.pipelining", "PipelineStage"),
    ("torch.distributed.pipelining", "Schedule1F1B"),
    ("torch.distributed.pipelining", "ScheduleInterleaved1F1B"),
)
"""Every name a torch snippet may use, by module; a snippet imports only those its code names."""


def _imports_used(code_lines: list[str]) -> list[str]:
    """The import lines for the names the code uses (comments excluded): an unused import in generated
    code is lint the user has to clean up, and hides which APIs the layout really needs."""
    # the snippet's string literals hold no '#', so everything after one is a comment
    used = set(re.findall(r"[A-Za-z_]\w*", "\n".join(line.split("#", 1)[0] for line in code_lines)))
    by_module: dict[str, list[str]] = {}
    for module, name in _SNIPPET_IMPORTS:
        if name in used:
            by_module.setdefault(module, []).append(name)
    out = ["import torch"] if "torch" in used else []
    return out + [f"from {module} import {', '.join(names)}" for module, names in by_module.items()]


def accelerate_config(p: Plan) -> dict[str, Any]:
    lay = p.best.layout
    base: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE",
        "debug": False,
        "downcast_bf16": "no",
        "machine_rank": 0,
        "main_training_function": "main",
        "mixed_precision": mixed_precision(p.workload.precision),
        "num_machines": p.topology.nodes,
        "num_processes": lay.gpus,
        "rdzv_backend": "static",
        "same_network": True,
        "tpu_env": [],
        "tpu_use_cluster": False,
        "tpu_use_sudo": False,
        "use_cpu": False,
    }
    if p.topology.nodes > 1:
        base.update(main_process_ip="MASTER_ADDR", main_process_port=29500)
    s = lay.sharding
    if isinstance(s, Zero):
        base["distributed_type"] = "DEEPSPEED"
        base["deepspeed_config"] = {
            "gradient_accumulation_steps": lay.grad_accum,
            "gradient_clipping": 1.0,
            "offload_optimizer_device": "cpu" if s.offload_optimizer else "none",
            "offload_param_device": "cpu" if s.offload_params else "none",
            "zero3_init_flag": s.stage == 3,
            "zero3_save_16bit_model": s.stage == 3,
            "zero_stage": s.stage,
        }
    elif isinstance(s, MegatronDDP):
        base["distributed_type"] = "MEGATRON_LM"
        base["megatron_lm_config"] = {
            "megatron_lm_tp_degree": lay.tp,
            "megatron_lm_sequence_parallelism": lay.tp > 1 and lay.sequence_parallel,
            "megatron_lm_pp_degree": lay.pp,
            "megatron_lm_num_micro_batches": lay.grad_accum,
            "megatron_lm_recompute_activations": lay.checkpointing != "none",
            "megatron_lm_use_distributed_optimizer": False,
            "megatron_lm_gradient_clipping": 1.0,
        }
    elif isinstance(s, FSDP2):
        base["distributed_type"] = "FSDP"
        base["fsdp_config"] = {
            "fsdp_version": 2,
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_reshard_after_forward": s.reshard_after_forward,
            "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": True,
            "fsdp_offload_params": False,
            "fsdp_activation_checkpointing": lay.checkpointing != "none",
        }
    else:
        base["distributed_type"] = "MULTI_GPU" if lay.gpus > 1 else "NO"
    if isinstance(s, DDP | FSDP2) and (lay.tp > 1 or (isinstance(s, FSDP2) and s.hsdp_shard is not None)):
        # accelerate's ParallelismConfig (launch --parallelism_config_*): TP and the FSDP dims (HSDP:
        # shard inside a group, replicate across); it has no pipeline dimension (see engines_for).
        base["parallelism_config"] = {
            "parallelism_config_tp_size": lay.tp,
            "parallelism_config_dp_shard_size": lay.shard_group,  # 1 for DDP
            "parallelism_config_dp_replicate_size": lay.dp // lay.shard_group,
        }
    return base


def megatron_args(p: Plan) -> list[str]:
    """Megatron-LM ``pretrain_gpt.py`` arguments for the layout (Megatron-LM's argument names); for an
    encoder-decoder model ``pretrain_t5.py``'s (NVIDIA/Megatron-LM @8af3dae7: ``--encoder-num-layers``,
    ``--decoder-num-layers``, ``--encoder-seq-length``, ``--decoder-seq-length``, the encoder's pipeline stages
    as ``--encoder-pipeline-model-parallel-size``, which replaced ``--pipeline-model-parallel-split-rank``)."""
    lay, prof = p.best.layout, p.profile
    if prof.stacks:
        enc, dec = prof.stacks
        shape = [
            f"--encoder-num-layers {enc.layers}",
            f"--decoder-num-layers {dec.layers}",
            f"--hidden-size {prof.hidden}",
            f"--ffn-hidden-size {prof.ffn}",
            f"--num-attention-heads {prof.heads}",
            f"--encoder-seq-length {prof.seq_len}",
            f"--decoder-seq-length {prof.seq_len}",
            f"--max-position-embeddings {prof.seq_len}",
        ]
        if prof.head_dim and prof.head_dim * prof.heads != prof.hidden:
            shape.append(f"--kv-channels {prof.head_dim}")  # T5's d_kv (t5-3b: 32 × 128 on 1024)
        if lay.pp > 1:
            shape.append(f"--encoder-pipeline-model-parallel-size {encoder_stages(lay.pp, enc.layers, dec.layers)}")
    else:
        shape = [
            f"--num-layers {prof.layers}",
            f"--hidden-size {prof.hidden}",
            f"--num-attention-heads {prof.heads}",
            f"--seq-length {prof.seq_len}",
            f"--max-position-embeddings {prof.seq_len}",
        ]
    args = [
        f"--tensor-model-parallel-size {lay.tp}",
        f"--pipeline-model-parallel-size {lay.pp}",
        f"--micro-batch-size {lay.micro_batch_size}",
        f"--global-batch-size {lay.global_batch}",
        *shape,
    ]
    if prof.kv_heads and prof.kv_heads != prof.heads:
        args.append(f"--group-query-attention --num-query-groups {prof.kv_heads}")
    if lay.tp > 1 and lay.sequence_parallel:
        args.append("--sequence-parallel")
    if prof.experts:
        args.append(f"--num-experts {prof.experts} --moe-router-topk {prof.experts_per_token}")
    if lay.ep > 1:
        args.append(f"--expert-model-parallel-size {lay.ep}")
    if lay.first_stage_layers:
        args.append(
            f"--decoder-first-pipeline-num-layers {lay.first_stage_layers} "
            f"--decoder-last-pipeline-num-layers {lay.last_stage_layers}"
        )
    if lay.cp > 1:
        cp_type = {"ring": "p2p", "all-to-all": "a2a", "hierarchical": "a2a+p2p"}[lay.cp_comm]
        args.append(f"--context-parallel-size {lay.cp} --cp-comm-type {cp_type}")
    if lay.pp > 1 and lay.schedule == "interleaved":
        args.append(f"--num-layers-per-virtual-pipeline-stage {prof.layers // (lay.pp * lay.virtual_stages)}")
    if lay.checkpointing == "full":
        args.append("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1")
    elif lay.checkpointing == "selective":
        args.append("--recompute-granularity selective")
    mp = mixed_precision(p.workload.precision)
    if mp in ("bf16", "fp16"):
        args.append(f"--{mp}")
    return args


def engines_for(lay: Layout) -> tuple[str, ...]:
    """The ``--emit`` values whose output implements ``lay`` as planned (may be empty)."""
    base = _launchers_for(lay)
    if lay.engine == "torch" and torchtitan_limit(lay) is None:
        return (*base, "torchtitan")
    return base


def _launchers_for(lay: Layout) -> tuple[str, ...]:
    """engines_for without torchtitan (which runs the torch.distributed layouts it can express)."""
    if lay.ep > 1:
        # Megatron-LM has --expert-model-parallel-size; a ds_config, accelerate's plugins and the
        # torch snippet have no expert-parallel setting (DeepSpeed-MoE / torchtitan need model code).
        return ("torchrun",) if lay.engine == "megatron" else ()
    if lay.engine == "deepspeed":
        # a ds_config (and accelerate's DeepSpeed plugin) carries ZeRO, offload and batching only:
        # tensor parallelism needs Megatron-DeepSpeed, pipelines a PipelineModule in user code.
        return ("deepspeed", "accelerate") if lay.tp == 1 and lay.pp == 1 else ()
    if lay.engine == "megatron" and lay.checkpointing == "selective-op":
        return ()  # Megatron-LM's --recompute-granularity selective recomputes the attention core only
    if lay.cp > 1:
        # Megatron-LM: --context-parallel-size (every --cp-comm-type); torch: torchtitan's ring
        # (context_parallel_degree), with FSDP2 over dp·cp; no accelerate / DeepSpeed setting
        return ("torchrun",) if lay.engine == "megatron" or lay.cp_comm == "ring" else ()
    if lay.engine == "megatron":
        # accelerate's Megatron-LM plugin has no virtual-pipeline (interleaved) setting
        return ("torchrun",) if lay.pp > 1 and lay.schedule == "interleaved" else ("torchrun", "accelerate")
    # torch.distributed: DDP, FSDP2/HSDP, TP; accelerate has no pipeline dimension
    return ("torchrun",) if lay.pp > 1 else ("torchrun", "accelerate")


def engine_filter(kind: str) -> EngineFilter:
    """``--emit kind`` as the planner's search filter (``plan(..., emit=engine_filter(kind))``)."""
    from gpuplan.parallel.plan import EngineFilter

    if kind not in ALL_EMITTERS:
        raise ConfigError(f"unknown --emit {kind!r} (allowed: {', '.join(ALL_EMITTERS)})")
    return EngineFilter(kind, lambda lay, before: refusal(lay, kind, before_search=before))


def refusal(lay: Layout, kind: str, *, before_search: bool = False) -> str | None:
    """One line saying why ``--emit kind`` cannot implement ``lay`` and which engine can, or None.
    ``before_search``: ``lay`` stands for every layout the flags allow (plan refuses before tracing)."""
    if kind in CLUSTER_EMITTERS:  # a manifest around the torchrun line: what torchrun cannot run, it cannot
        why = refusal(lay, "torchrun", before_search=before_search)
        return None if why is None else f"--emit {kind} runs the torchrun line, and " + why
    can = engines_for(lay)
    if kind in can:
        return None
    limit = torchtitan_limit(lay) if kind == "torchtitan" else None
    if limit is not None:
        others = " or ".join(f"--emit {k}" for k in can)
        return f"--emit torchtitan cannot implement it: {limit}" + (f"; or use {others}" if can else "")
    what = (f"the flags allow only layouts like {lay.describe()}, which run on {_ENGINE_NAMES[lay.engine]}"
            if before_search else f"the planned layout ({lay.describe()}) runs on {_ENGINE_NAMES[lay.engine]}")
    if can:
        return f"--emit {kind} cannot implement it: {what}; use " + " or ".join(f"--emit {k}" for k in can)
    if lay.cp > 1:
        return (
            f"no --emit value implements it: {what} with {lay.cp_comm} context parallelism (cp={lay.cp}), "
            "which only Megatron-LM's arguments express; use --megatron, or --cp-comm ring"
        )
    if lay.engine == "megatron" and lay.checkpointing == "selective-op":
        return (
            f"no --emit value implements it: {what}, which has no op-level selective checkpointing "
            "(torchtitan's); use --checkpointing selective (Megatron's) or full, or --fsdp for torch.distributed"
        )
    if lay.ep > 1:
        return (
            f"no --emit value implements it: {what} with expert parallelism (ep={lay.ep}), which only "
            "Megatron-LM's arguments express; use --megatron for Megatron-LM arguments, or --ep 1"
        )
    return (
        f"no --emit value implements it: {what} with tp={lay.tp} pp={lay.pp}, which needs Megatron-DeepSpeed; "
        "fix --tp 1 --pp 1 for a DeepSpeed config, or --megatron for Megatron-LM arguments"
    )


_ENGINE_NAMES = {
    "deepspeed": "DeepSpeed",
    "megatron": "Megatron-LM",
    "torch": "torch.distributed (DDP / FSDP2 / TP / pipelining)",
}


def launch_line(p: Plan) -> str:
    """The plan's launch as one shell line: torchrun with the user's script applying the layout, or
    Megatron-LM's pretrain_gpt.py with its arguments."""
    if p.best.layout.engine == "megatron":
        return " ".join([torchrun_command(p, "pretrain_gpt.py"), *megatron_args(p)])
    return torchrun_command(p)


def emit(p: Plan, kind: str, *, queue: str | None = None) -> str:
    """The launch configuration ``kind`` (torchrun | deepspeed | accelerate | torchtitan | jobset | skypilot)
    as text; ConfigError (one line naming the engines that can) when that engine cannot implement the plan's
    layout. ``queue``: the Kueue LocalQueue label of a JobSet."""
    if kind not in ALL_EMITTERS:
        raise ConfigError(f"unknown --emit {kind!r} (allowed: {', '.join(ALL_EMITTERS)})")
    refused = refusal(p.best.layout, kind)
    lay = p.best.layout
    prof = p.profile
    meg_missing = lay.engine == "megatron" and prof.model_type not in MEGATRON_ENCODER_DECODER
    if prof.stacks and (kind == "torchtitan" or (kind == "torchrun" and (meg_missing or (
            lay.engine == "torch" and lay.pp > 1)))):
        refused = encoder_decoder_refusal(kind, p.model, prof.model_type, megatron=meg_missing)
    if refused is not None:
        raise ConfigError(refused)
    if kind == "torchrun":
        if p.best.layout.engine == "megatron":
            cmd = torchrun_command(p, "pretrain_t5.py" if p.profile.stacks else "pretrain_gpt.py")
            return "# launch (Megatron-LM)\n" + cmd + " \\\n    " + " \\\n    ".join(megatron_args(p)) + "\n"
        return "# launch\n" + torchrun_command(p) + "\n\n" + torch_snippet(p)
    if kind == "deepspeed":
        return json.dumps(deepspeed_config(p), indent=2) + "\n"
    if kind == "accelerate":
        import yaml

        return str(yaml.safe_dump(accelerate_config(p), sort_keys=True))
    if kind == "torchtitan":
        return torchtitan_toml(p, torchrun_command(p, "").rstrip())
    if kind in CLUSTER_EMITTERS:
        return cluster_manifest(p, kind, launch_line(p), queue=queue)
    raise ConfigError(f"unknown --emit {kind!r} (allowed: {', '.join(ALL_EMITTERS)})")


def layout_engine_note(lay: Layout, kind: str, workload: Workload | None = None) -> str | None:
    """What the emitted text leaves to the user's training script (None: nothing)."""
    notes = []
    if kind in CLUSTER_EMITTERS and lay.engine != "megatron":
        notes.append("train.py applies the layout (gpuplan plan --emit torchrun prints the torch.distributed code)")
    if lay.checkpointing != "none" and kind not in ("torchrun", "torchtitan", *CLUSTER_EMITTERS) \
            and lay.engine != "megatron":
        notes.append(f"activation checkpointing ({lay.checkpointing}) is applied in the training script, per block")
    s = lay.sharding
    four_bit = workload is not None and (workload.peft == "qlora" or workload.load_in == "4bit")
    if four_bit and (isinstance(s, FSDP2) or (isinstance(s, Zero) and s.stage == 3)):
        # FSDP and ZeRO-3 shard floating-point storages only: bitsandbytes' quant_storage lets the
        # packed 4-bit weights sit in a 16-bit tensor (bitsandbytes docs, "FSDP-QLoRA"; PEFT docs,
        # "Use PEFT QLoRA and DeepSpeed with ZeRO3")
        notes.append(
            "load the 4-bit base with BitsAndBytesConfig(bnb_4bit_quant_storage=torch.bfloat16) so "
            f"{'FSDP2' if isinstance(s, FSDP2) else 'ZeRO-3'} can shard the packed weights"
        )
    return "; ".join(notes) or None
