"""Multi-GPU planning: layouts (DDP, ZeRO-1/2/3, FSDP2/HSDP, Megatron TP/SP/PP, offload), per-rank
memory and step time from one traced step, layout search, launch configurations.

``plan(model, gpus=, gpu=, ...)`` is the entry point (``gpuplan plan`` on the command line).
Submodules import nothing heavy; torch and transformers load when a model is traced.
"""

from __future__ import annotations

from gpuplan.parallel.emit import EMITTERS, accelerate_config, deepspeed_config, emit, megatron_args, torch_snippet
from gpuplan.parallel.evaluate import Evaluation, RankMemory
from gpuplan.parallel.layout import Layout
from gpuplan.parallel.plan import Plan, plan
from gpuplan.parallel.topology import Topology, make_topology
from gpuplan.parallel.zero import (
    deepspeed_zero2_gpu_bytes,
    deepspeed_zero2_gpu_bytes_docs,
    deepspeed_zero3_gpu_bytes,
    model_states_bytes,
)

__all__ = [
    "EMITTERS",
    "Evaluation",
    "Layout",
    "Plan",
    "RankMemory",
    "Topology",
    "accelerate_config",
    "deepspeed_config",
    "deepspeed_zero2_gpu_bytes",
    "deepspeed_zero2_gpu_bytes_docs",
    "deepspeed_zero3_gpu_bytes",
    "emit",
    "make_topology",
    "megatron_args",
    "model_states_bytes",
    "plan",
    "torch_snippet",
]
