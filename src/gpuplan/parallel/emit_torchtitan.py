"""torchtitan's job config for a planned layout (``plan --emit torchtitan``): a TOML file for
``torchrun -m torchtitan.train --job.config_file FILE``.

The keys are torchtitan's ``JobConfig`` dataclasses (``torchtitan/config/job_config.py``, v0.2.2, the
last release that reads a TOML job file; 0.3 moved to Python config registries with the same
``--section.key`` overrides). What torchtitan does with them, from its ``models/llama3/infra/
parallelize.py`` and ``distributed/pipeline_parallel.py`` (v0.2.2):

* data parallelism is ``data_parallel_replicate_degree`` × ``data_parallel_shard_degree``: FSDP2 is
  shard = dp, HSDP replicate × shard, DDP replicate = dp — and DDP only when it is the only
  dimension ("DDP has not supported > 1D parallelism");
* ``local_batch_size`` is one data-parallel rank's batch; gradient accumulation is
  ``global_batch_size / (local_batch_size · dp)``; under a pipeline ``local_batch_size`` is cut into
  micro-batches of ``pipeline_parallel_microbatch_size``, so there it carries every micro-batch;
* pipeline stages are given as module names per model chunk (``module_fqns_per_model_part``), so
  uneven stages are written as planned rather than re-derived from torchtitan's weights;
* activation checkpointing ``selective`` + ``op`` is the op-level SAC gpuplan's ``selective-op``
  models; torchtitan has no attention-core (Megatron) selective mode;
* mixed precision is FSDP's ``mixed_precision_param`` (fp32 sharded parameters, bf16 compute) or
  torch.autocast when there is no sharding: gpuplan's ``amp-bf16``; ``fp32``/``tf32`` is ``float32``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError
from gpuplan.parallel.layout import DDP, FSDP2

if TYPE_CHECKING:
    from gpuplan.parallel.layout import Layout
    from gpuplan.parallel.plan import Plan

TORCHTITAN_MODELS: dict[str, tuple[str, str]] = {
    "llama-3-8b": ("llama3", "8B"),
    "llama-3.1-8b": ("llama3", "8B"),
    "llama-3.1-70b": ("llama3", "70B"),
    "llama-3.1-405b": ("llama3", "405B"),
    "qwen3-0.6b": ("qwen3", "0.6B"),
    "qwen3-8b": ("qwen3", "8B"),
}
"""Catalog models that are torchtitan built-ins (``[model] name`` and ``flavor``, v0.2.2 model registry)."""

_PARAM_DTYPE = {"amp-bf16": "bfloat16", "fp32": "float32", "tf32": "float32"}
"""gpuplan precision → torchtitan ``training.mixed_precision_param`` (its only two values)."""

_SCHEDULES = {"1f1b": "1F1B", "interleaved": "Interleaved1F1B"}

_OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam"}
"""torchtitan's optimizers (``components/optimizer.py``: Adam and AdamW only)."""


def torchtitan_limit(lay: Layout) -> str | None:
    """Why torchtitan cannot run the torch.distributed layout ``lay`` as planned (None: it can)."""
    s = lay.sharding
    if lay.engine != "torch":
        return None  # engines_for sends Megatron-LM and DeepSpeed layouts to their own emitters
    if isinstance(s, DDP) and lay.dp > 1 and lay.gpus != lay.dp:
        return "torchtitan applies DDP only when data parallelism is the only dimension; plan with --fsdp"
    sharded = (isinstance(s, FSDP2) and lay.dp > 1) or lay.cp > 1
    if not sharded and (lay.tp > 1 or lay.pp > 1):
        # torchtitan's maybe_enable_amp: mixed precision comes from fully_shard; TP/PP without it run fp32
        return "torchtitan runs TP or PP in mixed precision only under FSDP; plan with --fsdp and dp of 2 or more"
    if lay.checkpointing == "selective":
        return (
            "torchtitan's selective checkpointing is per layer or per op, not the attention core; "
            "plan with --checkpointing selective-op (its op-level SAC) or full"
        )
    if lay.ep > 1 and not isinstance(s, FSDP2):
        return "torchtitan's expert parallelism borrows FSDP ranks (dp2ep); plan with --fsdp"
    if lay.cp > 1 and lay.cp_comm != "ring":
        return f"torchtitan's context parallelism is ring attention, not {lay.cp_comm}; plan with --cp-comm ring"
    return None


def _stage_fqns(lay: Layout, layers: int) -> list[list[str]]:
    """Module names of each pipeline model chunk, in stage order (torchtitan's LLM module names)."""
    chunks = lay.pp * (lay.virtual_stages if lay.schedule == "interleaved" else 1)
    if chunks == lay.pp:
        first, mid, last = lay.stage_layers(layers)  # the planner's one rule for uneven stages
        sizes = [int(first)] + [int(mid)] * (lay.pp - 2) + [int(last)]
    else:
        sizes = [layers // chunks] * chunks
    out, start = [], 0
    for i, n in enumerate(sizes):
        names = [f"layers.{j}" for j in range(start, start + n)]
        start += n
        if i == 0:
            names.insert(0, "tok_embeddings")
        if i == len(sizes) - 1:
            names += ["norm", "output"]
        out.append(names)
    return out


def torchtitan_sections(p: Plan) -> dict[str, dict[str, Any]]:
    """The job config as TOML sections; ConfigError (one line) for a precision torchtitan lacks."""
    lay, prof, w = p.best.layout, p.profile, p.workload
    param_dtype = _PARAM_DTYPE.get(w.precision)
    if param_dtype is None:
        raise ConfigError(
            f"--emit torchtitan cannot express --precision {w.precision}: torchtitan trains with fp32 "
            "parameters and bf16 (or fp32) compute; plan with --precision amp-bf16 or fp32"
        )
    if w.uses_peft or w.load_in != "none":
        raise ConfigError(
            "--emit torchtitan cannot express PEFT or quantized base weights (torchtitan trains every "
            "parameter); use --emit torchrun or --emit accelerate"
        )
    optimizer = _OPTIMIZERS.get(w.optimizer)
    if optimizer is None:
        raise ConfigError(
            f"--emit torchtitan cannot express --optimizer {w.optimizer}: torchtitan builds Adam or AdamW; "
            "plan with --optimizer adamw or adam"
        )
    name, flavor = TORCHTITAN_MODELS.get(p.model, (p.model, "custom"))
    s = lay.sharding
    replicate, shard = lay.dp, 1
    if isinstance(s, FSDP2):
        replicate, shard = (1, lay.dp) if s.hsdp_shard is None else (lay.dp // s.hsdp_shard, s.hsdp_shard)
    per_rank = lay.micro_batch_size * (lay.grad_accum if lay.pp > 1 else 1)
    parallelism: dict[str, Any] = {
        "data_parallel_replicate_degree": replicate,
        "data_parallel_shard_degree": shard,
        "tensor_parallel_degree": lay.tp,
        "pipeline_parallel_degree": lay.pp,
        "context_parallel_degree": lay.cp,
        "expert_parallel_degree": lay.ep,
    }
    if isinstance(s, FSDP2):
        parallelism["fsdp_reshard_after_forward"] = "always" if s.reshard_after_forward else "never"
    if lay.tp > 1 and not lay.sequence_parallel:
        parallelism["disable_loss_parallel"] = True
    if lay.pp > 1:
        parallelism["pipeline_parallel_schedule"] = _SCHEDULES[lay.schedule]
        parallelism["pipeline_parallel_microbatch_size"] = lay.micro_batch_size
        parallelism["module_fqns_per_model_part"] = _stage_fqns(lay, prof.layers)
    ac: dict[str, Any] = {"mode": {"none": "none", "full": "full"}.get(lay.checkpointing, "selective")}
    if lay.checkpointing == "selective-op":
        ac["selective_ac_option"] = "op"
    return {
        "job": {"description": f"gpuplan: {p.model}, {lay.describe()}"},
        "model": {"name": name, "flavor": flavor},
        "optimizer": {"name": optimizer},
        "training": {
            "local_batch_size": per_rank,
            "global_batch_size": lay.global_batch,
            "seq_len": prof.seq_len,
            "mixed_precision_param": param_dtype,
        },
        "parallelism": parallelism,
        "activation_checkpoint": ac,
    }


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    # ints, basic strings and (nested) arrays of strings are written alike in JSON and TOML
    return json.dumps(v, ensure_ascii=False)


def torchtitan_toml(p: Plan, launch: str) -> str:
    """The job file, with the launch line and what it leaves to the user as comments."""
    sections = torchtitan_sections(p)
    lines = [f"# launch: {launch} -m torchtitan.train --job.config_file gpuplan.toml"]
    if p.model not in TORCHTITAN_MODELS:
        lines.append(
            f"# {p.model} is not a torchtitan built-in model: register its model and parallelize "
            "functions (a TrainSpec) under this name, or pick a built-in [model] name and flavor"
        )
    for section, values in sections.items():
        lines += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in values.items()]
    return "\n".join(lines) + "\n"
