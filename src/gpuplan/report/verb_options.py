"""Each verb's own options (report/options.py describes the option type and the workload's): estimate, fit,
recommend, plan, serve and rl, in ``--help`` order. Built on first use: the serving and RL choices live in
packages whose import costs a cold command time."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Final

from gpuplan.errors import ConfigError
from gpuplan.report.options import PEFT_OPTIONS, Option, positive_number, shares, whole_number, workload_fields
from gpuplan.workload import CHECKPOINTING, MODULE_LOADINGS, OPTIMIZERS, PEFT_SETTINGS, PRECISIONS, WEIGHT_QUANTS

VERBS: Final[tuple[str, ...]] = ("estimate", "fit", "recommend", "plan", "serve", "rl")
"""The verbs the web page offers (the command line has them all, with these options)."""

TAKES_WORKLOAD: Final[frozenset[str]] = frozenset({"estimate", "fit", "recommend", "plan"})
"""Verbs whose library call takes the workload options (serve: a pipeline's generations only)."""

_GPU_HELP: Final = "catalog GPU (gpuplan gpus lists them)"


def _estimate() -> tuple[Option, ...]:
    return (
        Option("gpu", "gpu", help="target GPU (adds fit, headroom, step time)",
               label="GPU (needed for fit, plan, serve and rl)"),
        Option("cuda_module_loading", "choice", choices=MODULE_LOADINGS, default="lazy",
               help="CUDA context size: lazy (CUDA >= 11.7, default) or eager (older stacks)",
               label="CUDA module loading", unset="default (lazy)"),
        Option("weight_quant", "choice", choices=(*WEIGHT_QUANTS, "fp8-storage"), default="none",
               help="weight-only quantized weights (--mode infer|generate): counted in the memory figures and the "
                    "fit, and in the matmuls' weight reads (time with --gpu); pipelines: int8 / fp8 (torchao int8 / "
                    "float8 weight-only) or fp8-storage (diffusers layerwise casting) on --quantize-components",
               label="Weight-only quantization (inference)", unset="default (none)"),
    )


def _fit() -> tuple[Option, ...]:
    return (
        Option("gpu", "gpu", required=True, help="target GPU (catalog id or name as nvidia-smi prints it)"),
        Option("target_batch_size", "int", metavar="N", label="Fit: target batch size",
               help="find the cheapest memory techniques that make this batch (samples per optimizer step) fit",
               minimum=1),
        Option("exact_batch", "switch", default=False, label="Fit: exactly the target batch",
               help="with --target-batch-size: gradient accumulation keeps micro-batch × steps equal to the target "
                    "(default: at least the target, with the fewest accumulation steps)"),
        Option("axis", "choice", choices=("batch", "seq-len", "resolution"), default="batch",
               label="Fit: what to grow until the GPU is full", unset="default (batch)",
               help="what to grow until the GPU is full: the batch (default), the sequence length at the given "
                    "--batch-size (the context-length frontier of fine-tuning tables; steps of 64 tokens), or a "
                    "diffusion pipeline's square image size (steps of its VAE factor × patch size)"),
    )


def check_fit_axis(values: Mapping[str, Any], *, seq_len_given: bool, spell: Callable[[str], str] = str) -> None:
    """fit's rule for its axis, one copy for both front ends: the batch options apply to the batch axis
    only, and the sequence-length axis searches the sequence length (a ConfigError naming the option)."""
    axis = str(values.get("axis") or "batch")
    if axis == "batch":
        return
    answers = {"seq-len": f"the largest {spell('seq_len')} only", "resolution": "the largest image size only"}[axis]
    for name in ("target_batch_size", "exact_batch"):
        if values.get(name) not in (None, False):
            raise ConfigError(f"{spell(name)} applies to {spell('axis')} batch; {spell('axis')} {axis} answers "
                              f"{answers}")
    if axis == "seq-len" and seq_len_given:
        raise ConfigError(f"{spell('axis')} seq-len searches the sequence length: drop {spell('seq_len')} (the batch "
                          f"is {spell('batch_size')})")


def _recommend() -> tuple[Option, ...]:
    return (
        Option("max_gpus", "int", default=8, metavar="N", help="most GPUs per candidate (default 8)",
               label="Most GPUs per option", minimum=1),
        Option("budget_usd", "float", parse=positive_number("an amount of US dollars"), metavar="X",
               help="drop candidates costing more: $/hour with --prices, else the purchase price",
               label="Budget (US dollars)", minimum=0),
        Option("prices", "text", metavar="FILE", web=False,
               help="your $/hour per GPU: YAML/JSON mapping or CSV 'GPU,price'"),
        Option("top", "int", default=25, metavar="K", web=False, help="rows shown in the text table"),
    )


def _plan() -> tuple[Option, ...]:
    from gpuplan.parallel.layout import CP_COMMS, FSDP_RESHARDS, FSDP_SHARDED_DTYPES

    cluster, layout = "cluster", "layout (left open: searched)"
    return (
        Option("gpus", "int", required=True, metavar="N", help="total GPUs", label="GPUs in all",
               minimum=1),
        Option("gpu", "gpu", required=True, help="GPU type (catalog name)"),
        Option("nodes", "int", metavar="M", label="Nodes", group=cluster, minimum=1),
        Option("gpus_per_node", "int", metavar="K", label="GPUs per node", group=cluster, minimum=1),
        Option("inter_node_gbps", "float", parse=positive_number("a bandwidth in Gbit/s, e.g. 400"), metavar="GBPS",
               help="network per GPU between nodes, Gbit/s per direction (default by GPU generation)",
               label="Network per GPU between nodes (Gbit/s)", group=cluster, minimum=0),
        Option("tp", "int", label="Tensor parallel", group=layout, minimum=1),
        Option("pp", "int", label="Pipeline parallel", group=layout, minimum=1),
        Option("dp", "int", label="Data parallel", group=layout, minimum=1),
        Option("ep", "int", help="expert-parallel ranks (MoE models; divides dp)", label="Expert parallel",
               group=layout, minimum=1),
        Option("cp", "int", help="context-parallel ranks (each sequence split over them); default: 1, searched when "
               "nothing fits", label="Context parallel", group=layout, minimum=1),
        Option("cp_comm", "choice", choices=CP_COMMS, default="ring",
               help="context-parallel attention: ring (torchtitan, Megatron p2p), all-to-all (Ulysses, Megatron "
                    "a2a), hierarchical (Megatron a2a+p2p); default ring",
               label="Context-parallel attention", unset="default (ring)", group=layout),
        Option("zero", "choice", choices=("0", "1", "2", "3"), parse=whole_number, help="DeepSpeed ZeRO stage",
               label="ZeRO stage", unset="searched", group=layout, exclusive="sharding"),
        Option("fsdp", "switch", help="FSDP2 (fully_shard)", label="FSDP2", group=layout, exclusive="sharding"),
        Option("megatron", "switch", help="Megatron-LM (16-bit weights, fp32 master weights and main grads, its DDP)",
               label="Megatron-LM", group=layout, exclusive="sharding"),
        Option("fsdp_reshard_after_forward", "choice", choices=FSDP_RESHARDS,
               help="FSDP2 reshard_after_forward, torchtitan's names: always, never (each block's gathered "
                    "parameters kept from its forward to its backward: one all-gather fewer, more memory), default "
                    "(torchtitan's rule: always without pipeline stages, never with them); implies --fsdp; default: "
                    "searched",
               label="FSDP2: reshard after forward", unset="searched", group=layout),
        Option("fsdp_sharded_dtype", "choice", choices=FSDP_SHARDED_DTYPES, default="compute",
               help="dtype of FSDP2's shards, their gradients and optimizer state: compute (the precision's "
                    "parameter dtype, default) or fp32 (the model built in fp32, MixedPrecisionPolicy casting to the "
                    "compute dtype at each all-gather and reducing in fp32, as torchtitan runs); fp32 implies --fsdp",
               label="FSDP2: sharded dtype", unset="default (compute)", group=layout),
        Option("sequence_parallel", "switch", flags=("--no-sequence-parallel",), store=False, default=True,
               web_name="no_sequence_parallel", help="tensor parallelism without Megatron sequence parallelism",
               label="No sequence parallelism", group=layout),
        Option("global_batch_size", "int", metavar="G", label="Global batch size", group=layout, minimum=1),
        Option("micro_batch_size", "int", metavar="m", label="Micro-batch size", group=layout, minimum=1),
    )


def _serve() -> tuple[Option, ...]:
    from gpuplan.serve.engines import ENGINES, PAGED_ENGINES
    from gpuplan.serve.kv import KV_CACHE_DTYPES
    from gpuplan.serve.speculative import SPEC_METHODS

    return (
        Option("gpu", "gpu", required=True, metavar="GPU", help=_GPU_HELP),
        Option("tp", "int", metavar="N", help="tensor-parallel size (default 1)", label="Tensor parallel",
               minimum=1),
        Option("pp", "int", default=1, metavar="N", help="pipeline-parallel size (default 1)",
               label="Pipeline parallel", minimum=1),
        Option("dp", "int", metavar="N",
               help="data-parallel attention ranks, each with --tp GPUs and its own KV cache (default 1)",
               label="Data parallel", minimum=1),
        Option("ep", "int", metavar="N", help="expert parallelism for MoE models: 1 (experts split by TP) or "
               "--tp × --dp", label="Expert parallel", minimum=1),
        Option("gpus", "int", metavar="N", web=False,
               help="search the layouts of N GPUs (tp × pp × dp = N, MoE experts TP-split or expert-parallel) "
                    "instead of giving --tp/--pp/--dp/--ep; the best one that starts and meets the target is chosen"),
        Option("engine", "choice", choices=ENGINES, web_choices=PAGED_ENGINES, default="vllm",
               help="serving engine modelled (default vllm)", label="Engine", unset="default (vllm)"),
        Option("max_model_len", "int", metavar="L",
               help="longest sequence the engine accepts (default: the model's trained context)",
               label="Max model length (tokens)", minimum=1),
        Option("context", "int", metavar="L",
               help="tokens per sequence for the concurrency answer (default --max-model-len)",
               label="Context per sequence", minimum=1),
        Option("concurrency", "int", metavar="C", help="concurrent sequences asked", label="Concurrent sequences",
               minimum=1),
        Option("input_len", "int", metavar="I", help="prompt tokens per request", label="Prompt tokens per request",
               minimum=1),
        Option("output_len", "int", metavar="O", help="generated tokens per request",
               label="Generated tokens per request", minimum=1),
        Option("rate", "float", parse=positive_number("a request rate"), metavar="R",
               help="target requests per second: replicas and GPUs needed", label="Requests per second",
               minimum=0),
        Option("gpu_memory_utilization", "float", metavar="U",
               help="vLLM's fraction of GPU memory (default 0.9); SGLang's --mem-fraction-static",
               label="GPU memory utilization (0-1)", minimum=0, maximum=1),
        Option("kv_cache_dtype", "choice", choices=KV_CACHE_DTYPES, default="auto", help="KV cache dtype",
               label="KV cache dtype", unset="default (auto)"),
        Option("max_num_batched_tokens", "int", metavar="T",
               help="token budget of one engine step (the profile run's size; default: the engine's)",
               label="Max batched tokens", minimum=1),
        Option("max_num_seqs", "int", metavar="S", help="most sequences in one step (default: the engine's)",
               label="Max sequences", minimum=1),
        Option("quantization", "choice", choices=WEIGHT_QUANTS, default="none",
               help="weight-only quantized checkpoint (layout of gpuplan.memory.weight_quant); a diffusion "
                    "pipeline's --quantize-components: int8 torchao weight-only, fp8 diffusers layerwise "
                    "casting, int4 bitsandbytes NF4",
               label="Weight quantization", unset="default (none)"),
        Option("enforce_eager", "switch", default=False,
               help="no CUDA graphs (vLLM --enforce-eager, SGLang --disable-cuda-graph): no graph pool, each decode "
                    "step dispatched kernel by kernel", label="No CUDA graphs (enforce eager)"),
        Option("ttft_slo", "float", parse=positive_number("a time to first token target"), metavar="SECONDS",
               help="time-to-first-token target: the largest concurrency (or, with --rate, the replicas) meeting "
                    "it at p99", label="Time-to-first-token target (s)", minimum=0),
        Option("itl_slo", "float", parse=positive_number("an inter-token latency target"), metavar="SECONDS",
               help="inter-token latency target: the largest decode batch meeting it",
               label="Inter-token latency target (s)", minimum=0),
        Option("max_loras", "int", metavar="N",
               help="multi-LoRA: adapters served at once (vLLM --enable-lora --max-loras; slots counted)",
               label="LoRA adapters served at once", minimum=1),
        Option("max_lora_rank", "int", metavar="R", help="largest adapter rank (vLLM's --max-lora-rank, default 16)",
               label="Largest adapter rank", minimum=1),
        Option("speculative_model", "model", metavar="NAME",
               help="speculative decoding with this draft model (catalog name or config.json)",
               label="Speculative decoding: draft model"),
        Option("speculative_method", "choice", choices=SPEC_METHODS,
               help="draft (with --speculative-model) or mtp (the model's own MTP layers)",
               label="Speculative method", unset="default (none)"),
        Option("num_speculative_tokens", "int", metavar="K",
               help="tokens drafted per step (default 1 for mtp, 4 for a draft model)",
               label="Drafted tokens per step", minimum=1),
        Option("spec_acceptance", "float", metavar="A",
               help="share of drafted tokens accepted (default 0.85 mtp, DeepSeek-V3 report; 0.7 draft)",
               label="Drafted tokens accepted (0-1)", minimum=0, maximum=1),
        Option("disaggregate", "text", metavar="P:D", web=False,
               help="prefill/decode disaggregation: P prefill and D decode instances of the layout (or auto "
                    "with --rate): KV transfer, goodput per GPU against the aggregated engine"),
        Option("prices", "text", metavar="FILE", web=False,
               help="your $/hour per GPU (YAML/JSON mapping or CSV): cost per million tokens with --rate"),
        *_local(),
    )


LOCAL_GROUP: Final = "local inference (--engine llama.cpp | ollama)"
"""serve's flags of llama.cpp / Ollama (serve/llamacpp.py); the page sizes the paged engines only."""


def _local() -> tuple[Option, ...]:
    from gpuplan.models.gguf_mix import GGUF_TYPES
    from gpuplan.serve.llamacpp import DEFAULT_HOST_BANDWIDTH_GB_PER_S, KV_CACHE_TYPES

    g = LOCAL_GROUP
    return (
        Option("gguf_type", "choice", choices=GGUF_TYPES, metavar="T", web=False, group=g,
               help=f"llama-quantize file type for a catalog / config.json model ({', '.join(GGUF_TYPES)})"),
        Option("n_gpu_layers", "int", flags=("-ngl", "--n-gpu-layers"), metavar="N", web=False, group=g,
               help="layers on the GPU (llama.cpp -ngl, Ollama num_gpu; default: the most that fit)"),
        Option("cache_type_k", "choice", choices=KV_CACHE_TYPES, default="f16", web=False, group=g,
               help="K cache type (default f16)"),
        Option("cache_type_v", "choice", choices=KV_CACHE_TYPES, default="f16", web=False, group=g,
               help="V cache type (default f16; quantized types need --flash-attn on)"),
        Option("flash_attn", "choice", choices=("on", "off"), default="off", web=False, group=g,
               help="llama.cpp -fa (default off)"),
        Option("tensor_split", "text", parse=shares, metavar="A,B,...", web=False, group=g,
               help="share of the layers per GPU, one per GPU (llama.cpp --tensor-split; default one GPU)"),
        Option("override_tensor", "text", flags=("-ot", "--override-tensor"), repeat=True, default=[],
               metavar="PATTERN=CPU", web=False, group=g,
               help="keep tensors whose name matches PATTERN in host memory (e.g. exps=CPU); repeatable"),
        Option("n_cpu_moe", "int", default=0, metavar="N", web=False, group=g,
               help="keep the MoE experts of the first N layers on the CPU"),
        Option("ubatch_size", "int", default=512, metavar="N", web=False, group=g, help="llama.cpp -ub (default 512)"),
        Option("host_memory_bandwidth", "float", parse=positive_number("a bandwidth in GB/s"),
               default=DEFAULT_HOST_BANDWIDTH_GB_PER_S, metavar="GB_PER_S", web=False, group=g,
               help=f"sustained CPU memory bandwidth (default {DEFAULT_HOST_BANDWIDTH_GB_PER_S:g} GB/s)"),
    )


def _rl() -> tuple[Option, ...]:
    from gpuplan.rl.settings import ALGORITHMS, FRAMEWORKS, OFFLOADS, PLACEMENTS, ROLLOUT_ENGINES

    batch, models, place, trainer = ("the batch (sequences = prompt + response)", "the models",
                                     "placement and the rollout engine", "trainer")
    return (
        Option("gpus", "int", required=True, metavar="N", help="total GPUs"),
        Option("nodes", "int", default=1, metavar="M", help="nodes the GPUs are on (default 1)"),
        Option("gpu", "gpu", required=True, metavar="GPU", help=_GPU_HELP),
        Option("algorithm", "choice", choices=ALGORITHMS, default="grpo", help="default grpo", label="RL algorithm",
               unset="default (grpo)"),
        Option("prompts_per_step", "int", required=True, metavar="P",
               help="prompts rolled out per step (DPO: preference pairs)", label="Prompts per step",
               group=batch, minimum=1),
        Option("samples_per_prompt", "int", metavar="K",
               help="responses per prompt (default: GRPO 8, DAPO 16, PPO 1; DPO is a pair)",
               label="Responses per prompt", group=batch, minimum=1),
        Option("prompt_len", "int", required=True, metavar="L", help="mean prompt tokens", label="Mean prompt tokens",
               group=batch, minimum=1),
        Option("response_len", "int", required=True, metavar="R", help="mean response tokens",
               label="Mean response tokens", group=batch, minimum=1),
        Option("max_response_len", "int", metavar="R",
               help="longest response (default --response-len): the engine's and the trainer's length",
               label="Longest response (tokens)", group=batch, minimum=1),
        Option("train_global_batch", "int", metavar="G",
               help="sequences per optimizer step over all trainer GPUs (default: the whole rollout batch)",
               label="Sequences per optimizer step", group=batch, minimum=1),
        Option("train_micro_batch", "int", metavar="m",
               help="sequences per forward/backward on one GPU (default 1; DPO 2)",
               label="Sequences per forward/backward", group=batch, minimum=1),
        Option("ppo_epochs", "int", default=1, metavar="E", help="passes over the batch per step",
               label="Passes over the batch per step", group=batch, minimum=1),
        *(dataclasses.replace(o, group=models) for o in PEFT_OPTIONS),
        Option("ref", "switch", flags=("--no-ref",), store=False, web_name="no_ref",
               help="no frozen reference model (default: on for GRPO, PPO, DPO; off for DAPO)",
               label="No reference model", group=models),
        Option("critic", "model", metavar="MODEL", help="PPO's value model (default: the policy's)",
               label="Critic (PPO's value model)", group=models),
        Option("reward_model", "model", metavar="MODEL",
               help="a model-based reward (default: none, rule-based rewards)", label="Reward model", group=models),
        Option("placement", "choice", choices=PLACEMENTS, default="colocate",
               help="colocate: the engine sleeps while the trainer runs; split: --rollout-gpus of their own",
               label="Placement", unset="default (colocate)", group=place),
        Option("rollout_gpus", "int", metavar="K", help="the engine's GPUs (split)", label="Rollout GPUs (split)",
               group=place, minimum=1),
        Option("rollout_engine", "choice", choices=ROLLOUT_ENGINES, default="vllm", help="default vllm",
               label="Rollout engine", unset="default (vllm)", group=place),
        Option("rollout_tp", "int", default=1, metavar="T", help="the engine's tensor parallelism",
               label="Rollout tensor parallel", group=place, minimum=1),
        Option("rollout_memory_utilization", "float", metavar="U",
               help="vLLM gpu_memory_utilization / SGLang mem_fraction_static (default 0.5 colocated, 0.9 split)",
               label="Rollout GPU memory share (0-1)", group=place, minimum=0, maximum=1),
        Option("rollout_max_num_seqs", "int", metavar="S",
               help="sequences one engine step holds (vLLM max_num_seqs; default: the engine's)",
               label="Rollout max sequences", group=place, minimum=1),
        Option("rollout_max_num_batched_tokens", "int", metavar="T",
               help="tokens one engine step processes (default: the engine's offline LLM class default)",
               label="Rollout max batched tokens", group=place, minimum=1),
        Option("rollout_enforce_eager", "switch", default=False,
               help="no CUDA graphs in the engine (verl rollout.enforce_eager, vLLM --enforce-eager, SGLang "
                    "--disable-cuda-graph): no graph pool, eager decode steps",
               label="Rollout: no CUDA graphs (enforce eager)", group=place),
        Option("framework", "choice", choices=FRAMEWORKS, library_checks=True, metavar="F",
               help="whose log-prob pass is sized: verl (16-bit full-vocabulary logits), trl (the completion's "
                    "logits only) or openrlhf (logits upcast to fp32) (default verl, or the --emit framework)",
               label="Log-prob pass as computed by", unset="default (verl)", group=trainer),
        Option("offload", "names", metavar="WHAT", choices=OFFLOADS,
               help="params,optimizer,ref: held on the host between uses (FSDP / ZeRO-3 CPU offload)",
               group=trainer),
        Option("checkpointing", "choice", choices=CHECKPOINTING, library_checks=True, metavar="C",
               help="|".join(CHECKPOINTING) + " (default full, as the RL frameworks' examples run)", group=trainer),
        Option("precision", "choice", choices=PRECISIONS, library_checks=True, metavar="P",
               help="|".join(PRECISIONS) + " (default: amp-bf16 where the GPU has bf16, else amp-fp16)",
               group=trainer),
        Option("optimizer", "choice", choices=OPTIMIZERS, library_checks=True, metavar="O",
               help="|".join(OPTIMIZERS) + " (default adamw)", group=trainer),
        Option("fit", "switch", web=False,
               help="also the longest response that fits and, when the step does not fit, the cheapest change that "
                    "does (LoRA, offload, a smaller rollout share, split placement)"),
    )


# --- command line only: real runs (measure, sweep) and the launch configurations printed after an answer ----

MEASUREMENT: Final = "measurement"
RANKS: Final = "where the ranks run"


def _store(group: str) -> tuple[Option, ...]:
    """``--store PATH`` / ``--no-store``: where measure and sweep keep their runs (cli/measure.open_store)."""
    return (
        Option("store", "text", metavar="PATH", web=False, group=group,
               help="measurements store (default: $XDG_CACHE_HOME/gpuplan/measurements.sqlite3)"),
        Option("no_store", "switch", default=False, web=False, group=group, help="do not keep the measurements"),
    )


def launcher_options(*, node_shape: bool) -> tuple[Option, ...]:
    """``--launcher local|slurm`` and the Slurm settings (cli/_launcher.executor_from_args reads them).
    ``node_shape``: measure's own ``--nodes`` / ``--gpus-per-node``; sweep takes plan's cluster flags."""
    from gpuplan.measure.executor import LAUNCHERS  # torch-free: parsing flags imports no torch

    shape = (
        Option("nodes", "int", metavar="N", web=False, group=RANKS, help="Slurm nodes (default 1)"),
        Option("gpus_per_node", "int", metavar="G", web=False, group=RANKS,
               help="GPUs (ranks) per Slurm node (default: --nproc / --nodes)"),
    ) if node_shape else ()
    return (
        Option("launcher", "choice", choices=LAUNCHERS, default="local", web=False, group=RANKS,
               help="local: torchrun on this host (default); slurm: jobs through submitit (a job array when "
                    "several), pip install 'gpuplan[cluster]'"),
        Option("partition", "text", metavar="P", web=False, group=RANKS,
               help="Slurm partition (needed with --launcher slurm)"),
        *shape,
        Option("time_min", "int", metavar="T", web=False, group=RANKS,
               help="Slurm time limit in minutes (default 30)"),
        Option("account", "text", metavar="A", web=False, group=RANKS, help="Slurm account to charge"),
        Option("cpus_per_task", "int", metavar="C", web=False, group=RANKS,
               help="Slurm CPU cores for each node's task, shared by its ranks (default: the partition's)"),
        Option("job_dir", "text", metavar="DIR", web=False, group=RANKS,
               help="submitit's folder, shared with the nodes (default ./gpuplan-jobs)"),
    )


MEASURE_LAYOUTS: Final[tuple[str, ...]] = ("ddp", "fsdp", "zero1", "zero2", "zero3")
"""measure's ``--layout`` values (measure/layouts.LAYOUTS, which imports torch, is tested equal)."""


def _measure() -> tuple[Option, ...]:
    return (
        Option("steps", "int", default=5, metavar="N", web=False, group=MEASUREMENT, help="timed steps (default 5)"),
        Option("warmup", "int", default=2, metavar="N", web=False, group=MEASUREMENT,
               help="untimed warm-up steps (default 2)"),
        Option("force", "switch", default=False, web=False, group=MEASUREMENT,
               help="run even if the estimate says it will not fit"),
        Option("no_record", "switch", default=False, web=False, group=MEASUREMENT,
               help="skip the extra recorded step that gives the storage-tracked bytes"),
        Option("nproc", "int", default=1, metavar="N", web=False, group=MEASUREMENT,
               help="processes (GPUs, or CPU processes with gloo) launched through torchrun"),
        # checked by measure/launch (one line naming the layouts), so --help shows them instead of enforcing them
        Option("layout", "choice", choices=MEASURE_LAYOUTS, library_checks=True, metavar="L", web=False,
               group=MEASUREMENT, help="|".join(MEASURE_LAYOUTS) + " (with --nproc > 1)"),
        *_store(MEASUREMENT),
        *launcher_options(node_shape=True),
    )


def _sweep() -> tuple[Option, ...]:
    """sweep's own flags (beside plan's, cli/plan.add_plan_arguments)."""
    return (
        Option("top", "int", default=3, metavar="K", web=False, group="sweep",
               help="the plan's best K layouts to measure (default 3)"),
        Option("steps", "int", default=3, metavar="S", web=False, group="sweep",
               help="timed steps per layout, after one warm-up step (default 3)"),
        *_store("sweep"),
        # --nodes / --gpus-per-node are plan's cluster flags: the Slurm job asks for that node shape
        *launcher_options(node_shape=False),
    )


RL_EMIT_FRAMEWORKS: Final[tuple[str, ...]] = ("trl", "verl", "openrlhf")
"""rl's ``--emit`` values: RLSettings' frameworks (rl/settings.FRAMEWORKS, tested equal), in --help's order."""


def emit_options(verb: str) -> tuple[Option, ...]:
    """``--emit`` of plan (the launch configuration of the best layout, and ``--queue`` for a JobSet) and of rl
    (the framework's configuration): printed after the answer, so the command line's only."""
    if verb == "rl":
        return (Option("emit", "choice", choices=RL_EMIT_FRAMEWORKS, web=False,
                       help="print the framework's configuration for this step"),)
    from gpuplan.parallel.emit import ALL_EMITTERS

    return (
        Option("emit", "choice", choices=ALL_EMITTERS, web=False,
               help="print the launch configuration for this engine (torchtitan: a job TOML for torchtitan.train; "
                    "jobset: a Kubernetes JobSet around the torchrun line; skypilot: a SkyPilot task YAML)"),
        Option("queue", "text", metavar="NAME", web=False,
               help="with --emit jobset: the Kueue LocalQueue (label kueue.x-k8s.io/queue-name)"),
    )


_BUILDERS: Final[Mapping[str, Callable[[], tuple[Option, ...]]]] = {
    "estimate": _estimate, "fit": _fit, "recommend": _recommend, "plan": _plan, "serve": _serve, "rl": _rl,
    "measure": _measure, "sweep": _sweep}
_BUILT: dict[str, tuple[Option, ...]] = {}


def verb_options(verb: str) -> tuple[Option, ...]:
    """``verb``'s own options (beside the workload's, for the verbs in TAKES_WORKLOAD and measure; sweep's beside
    plan's), in ``--help`` order; ``--emit`` is :func:`emit_options`'s."""
    if verb not in _BUILT:
        _BUILT[verb] = _BUILDERS[verb]()
    return _BUILT[verb]


def rl_settings_fields(model: str, values: Mapping[str, Any], *, spell: Callable[[str], str] = str) -> dict[str, Any]:
    """The RLSettings fields of rl's option values (None: not given, RLSettings' default applies); the one
    mapping from rl's flags to its settings, for the command line and the web page."""
    from gpuplan.hardware.support import default_precision_on

    names = {o.name for o in verb_options("rl") if o.name != "fit"}
    fields = {k: v for k, v in values.items() if k in names and v is not None}
    fields["model"] = model
    fields["offload"] = frozenset(fields.get("offload") or ())
    fields["precision"] = fields.get("precision") or default_precision_on("train", fields.get("gpu"))
    peft = workload_fields({k: v for k, v in fields.items() if k in ("peft", *PEFT_SETTINGS)}, spell=spell)
    return {**{k: v for k, v in fields.items() if k not in PEFT_SETTINGS}, **peft}


__all__ = [
    "LOCAL_GROUP",
    "MEASUREMENT",
    "MEASURE_LAYOUTS",
    "RANKS",
    "RL_EMIT_FRAMEWORKS",
    "TAKES_WORKLOAD",
    "VERBS",
    "check_fit_axis",
    "emit_options",
    "launcher_options",
    "rl_settings_fields",
    "verb_options",
]
