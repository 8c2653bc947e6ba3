"""Enumerate the layouts that can exist for N GPUs and rank them (fits, step time, memory)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from gpuplan.errors import LayoutError
from gpuplan.parallel.evaluate import Context, Evaluation, evaluate
from gpuplan.parallel.layout import (
    DDP,
    FSDP2,
    Layout,
    MegatronDDP,
    Sharding,
    Zero,
    ZeroStage,
    check_batch,
    check_context,
    check_degrees,
    check_experts,
    check_model,
    check_sharding,
    encoder_decoder_stages,
    uneven_stages,
)

MAX_MICRO_BATCH = 32
MAX_VIRTUAL_STAGES = 4


@dataclass(frozen=True, slots=True)
class Constraints:
    """What the user fixed; None leaves the degree open."""

    gpus: int
    global_batch: int
    dp: int | None = None
    tp: int | None = None
    pp: int | None = None
    zero: int | None = None
    fsdp: bool | None = None
    micro_batch: int | None = None
    checkpointing: str = "none"
    offload: bool = False
    offload_fixed: tuple[bool, bool] | None = None
    """``--offload params,optimizer``: (offload_optimizer, offload_params) of every layout (DeepSpeed ZeRO, stage
    ``zero``); None: offload only in the escalation (``offload``)."""
    sequence_parallel: bool = True
    ep: int | None = None
    """Expert-parallel degree (MoE models); None searches the divisors of dp that divide the experts."""
    megatron: bool | None = None
    """Megatron-LM layouts (16-bit weights, fp32 master in the optimizer): None searches them for
    tp > 1 or pp > 1; True: only them; False: never."""
    """Megatron sequence parallelism with tp > 1 (Korthikanti et al. 2022); off: the 2021 baseline."""
    cp: int | None = None
    """Context-parallel degree; None: 1, or searched when ``search_cp`` (the plan's escalation)."""
    cp_comm: str = "ring"
    search_cp: bool = False
    seq_len: int = 0
    """Tokens per sample (context parallelism splits them into 2·cp chunks)."""
    encoder_layers: int = 0
    """Encoder-decoder models: the encoder's blocks (the decoder's are the rest of ``layers``); 0 for one stack."""
    fsdp_reshard: str | None = None
    """``--fsdp-reshard-after-forward``: always | never | default (torchtitan's rule: resharded without pipeline
    stages, kept gathered with them); None: both searched where FSDP2 runs without a pipeline."""
    fsdp_sharded_fp32: bool = False
    """``--fsdp-sharded-dtype fp32``: FSDP2's shards, gradients and optimizer state in fp32 (FSDP2.sharded_fp32)."""


def fsdp_reshards(c: Constraints, pp: int) -> tuple[bool, ...]:
    """The ``reshard_after_forward`` values FSDP2 layouts take: the user's, or searched (both without a
    pipeline, resharding with one, as gpuplan searched before the flag existed). torchtitan's ``default``
    (torchtitan/parallelisms/parallelize_llama.py ``apply_fsdp`` @9dec370: ``reshard_after_forward = False``
    when ``pp_enabled``, "to avoid per-microbatch all-gathers")."""
    if c.fsdp_reshard == "always":
        return (True,)
    if c.fsdp_reshard == "never":
        return (False,)
    if c.fsdp_reshard == "default":
        return (pp == 1,)
    return (True, False) if pp == 1 else (True,)


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def validate(c: Constraints, *, heads: int, kv_heads: int, layers: int, experts: int = 0) -> None:
    """Refuse fixed degrees that cannot exist, with the arithmetic (before any search)."""
    if c.ep is not None:
        if c.ep < 1:
            raise LayoutError(f"ep must be at least 1, got {c.ep}")
        check_experts(c.ep, experts)
        if c.dp is not None and c.dp % c.ep:
            raise LayoutError(
                f"ep({c.ep}) does not divide dp({c.dp}) ({c.dp} mod {c.ep} = {c.dp % c.ep}): experts are split "
                "over groups of data-parallel ranks; use an ep that divides dp"
            )
    if c.encoder_layers and (c.cp or 1) > 1:
        raise LayoutError(
            f"context parallelism (cp={c.cp}) for an encoder-decoder model is not run by Megatron-LM or torchtitan "
            "(their context parallelism splits decoder-only and encoder-only stacks); use --cp 1"
        )
    if c.cp is not None:
        check_context(c.cp, c.cp_comm, seq_len=c.seq_len, heads=heads, tp=c.tp or 1)
        if c.cp > 1 and c.zero is not None:
            raise LayoutError(
                f"context parallelism (cp={c.cp}) with --zero {c.zero} is not run by any engine gpuplan models; "
                "torchtitan runs it with FSDP2 (--fsdp), Megatron-LM with its DDP (--megatron)"
            )
    if c.dp is not None and c.tp is not None and c.pp is not None and c.cp in (None, 1):
        check_degrees(c.gpus, c.dp, c.tp, c.pp)
    if (
        None not in (c.dp, c.tp, c.pp, c.cp)
        and c.cp != 1
        and (c.dp or 1) * (c.tp or 1) * (c.pp or 1) * (c.cp or 1) != c.gpus
    ):
        raise LayoutError(f"dp({c.dp})·tp({c.tp})·pp({c.pp})·cp({c.cp}) ≠ {c.gpus} GPUs")
    fixed = [(n, v) for n, v in (("dp", c.dp), ("tp", c.tp), ("pp", c.pp), ("cp", c.cp)) if v is not None]
    prod = 1
    for _, v in fixed:
        if v < 1:
            raise LayoutError(f"parallel degrees must be at least 1, got {fixed}")
        prod *= v
    if c.gpus % prod:
        expr = "·".join(f"{n}({v})" for n, v in fixed)
        raise LayoutError(f"{expr} = {prod} does not divide {c.gpus} GPUs ({c.gpus} mod {prod} = {c.gpus % prod})")
    if c.tp is not None and c.tp > 1 and not heads:
        raise LayoutError(f"tp({c.tp}) needs a transformer to split (attention heads); this model has none: use --tp 1")
    if c.tp is not None or c.pp is not None:
        # encoder-decoder: every stage runs blocks of one stack (each stack split by the decoder-only rule)
        check_model(c.tp or 1, 1 if c.encoder_layers else c.pp or 1, heads=heads, kv_heads=kv_heads, layers=layers)
        if c.encoder_layers and c.pp and c.pp > 1:
            if c.pp > layers:
                raise LayoutError(f"pp({c.pp}) > {layers} layers: a pipeline stage needs at least one layer")
            encoder_decoder_stages(c.pp, c.encoder_layers, layers - c.encoder_layers)
    check_sharding(c.zero or 0, bool(c.fsdp), c.tp or 1, c.pp or 1, bool(c.megatron))
    if c.dp is not None and c.micro_batch is not None:
        check_batch(c.global_batch, c.dp, c.micro_batch)
    elif c.dp is not None and c.global_batch % c.dp:
        raise LayoutError(
            f"global batch {c.global_batch} is not divisible by dp({c.dp}) "
            f"({c.global_batch} mod {c.dp} = {c.global_batch % c.dp})"
        )


def candidates(
    c: Constraints, *, heads: int, kv_heads: int, layers: int, gpus_per_node: int, experts: int = 0
) -> Iterator[Layout]:
    # Megatron TP splits attention heads and MLPs: only transformers (heads > 0) get tp > 1.
    tps = [c.tp] if c.tp else [t for t in divisors(c.gpus) if t <= gpus_per_node and (heads or t == 1)]
    for tp in tps:
        if (heads and heads % tp) or (kv_heads and kv_heads % tp and tp % kv_heads):
            continue
        for cp in _context_degrees(c, tp, heads):
            yield from _layouts(c, tp, cp, heads=heads, layers=layers, gpus_per_node=gpus_per_node, experts=experts)


def _context_degrees(c: Constraints, tp: int, heads: int) -> list[int]:
    if c.encoder_layers:
        return [1] if c.cp in (None, 1) else []
    if c.cp is not None:
        return [c.cp] if (c.gpus // tp) % c.cp == 0 else []
    if not c.search_cp:
        return [1]
    a2a = c.cp_comm == "all-to-all"
    return [
        d
        for d in divisors(c.gpus // tp)
        if d > 1 and c.seq_len % (2 * d) == 0 and not (a2a and heads and heads % (tp * d))
    ]


def _layouts(
    c: Constraints, tp: int, cp: int, *, heads: int, layers: int, gpus_per_node: int, experts: int
) -> Iterator[Layout]:
    rest = c.gpus // tp // cp
    pps = [c.pp] if c.pp else [p for p in divisors(rest) if p <= layers and layers % p == 0]
    if c.encoder_layers:
        pps = [p for p in ([c.pp] if c.pp else divisors(rest)) if _stacks_split(p, c.encoder_layers, layers)]
    for pp in pps:
        if rest % pp:
            continue
        dp = rest // pp
        if c.dp is not None and dp != c.dp:
            continue
        if c.global_batch % dp:
            continue
        if c.ep is not None:
            eps = [c.ep] if dp % c.ep == 0 else []
        else:  # MoE: every expert-parallel degree that splits both dp and the experts
            eps = [e for e in divisors(dp) if experts and experts % e == 0] if experts else [1]
        per_rank = c.global_batch // dp
        mbs = [c.micro_batch] if c.micro_batch else [m for m in divisors(per_rank) if m <= MAX_MICRO_BATCH]
        for m in mbs:
            if per_rank % m:
                continue
            ga = per_rank // m
            # a pp the user fixed that does not divide the layers: uneven stages, 1F1B only
            # encoder-decoder: stages by stack (evaluate's encoder_decoder_stages), 1F1B only (Megatron's T5)
            uneven = uneven_stages(layers, pp) if layers % pp and not c.encoder_layers else None
            plain = uneven is None and not c.encoder_layers
            for sched, v in _schedules(pp, layers, ga) if plain else [("1f1b", 1)]:
                for shard in _shardings(c, dp, tp, pp, gpus_per_node, cp):
                    for ep in eps:
                        if ep > 1 and isinstance(shard, FSDP2) and shard.hsdp_shard is not None:
                            continue  # not modelled (Layout refuses it)
                        if cp > 1 and ep > 1:
                            continue  # not modelled (Layout refuses it)
                        yield Layout(
                            dp=dp,
                            tp=tp,
                            pp=pp,
                            micro_batch_size=m,
                            grad_accum=ga,
                            schedule=sched,
                            virtual_stages=v,
                            checkpointing=c.checkpointing,
                            sequence_parallel=tp > 1 and c.sequence_parallel,
                            sharding=shard,
                            ep=ep,
                            cp=cp,
                            cp_comm=c.cp_comm,
                            first_stage_layers=uneven[0] if uneven else 0,
                            last_stage_layers=uneven[1] if uneven else 0,
                        )


def _stacks_split(pp: int, encoder_layers: int, layers: int) -> bool:
    """Whether an encoder-decoder model's two stacks split over ``pp`` stages (each stage one stack)."""
    if pp > layers:
        return False
    try:
        encoder_decoder_stages(pp, encoder_layers, layers - encoder_layers)
    except LayoutError:
        return False
    return True


def _schedules(pp: int, layers: int, ga: int) -> list[tuple[str, int]]:
    if pp == 1:
        return [("1f1b", 1)]
    out = [("1f1b", 1)]
    per_stage = layers // pp
    # Megatron's interleaved schedule needs the micro-batch count to be a multiple of pp.
    if ga % pp == 0:
        out += [("interleaved", v) for v in (2, MAX_VIRTUAL_STAGES) if per_stage % v == 0]
    return out


def _shardings(c: Constraints, dp: int, tp: int, pp: int, gpn: int, cp: int = 1) -> list[Sharding]:
    if cp > 1:
        # the engines that run context parallelism: Megatron-LM, and torchtitan with FSDP2 over dp·cp
        megatron = [MegatronDDP()] if not c.fsdp and c.zero in (None, 0) and c.megatron is not False else []
        # FSDP2 with pipeline stages only when --fsdp is given, as without context parallelism (torchtitan runs
        # FSDP + TP + PP + CP: benchmarks/llama3_h100_202412_torchtitan.md @31a17bfd, Table 6)
        runs = not c.megatron and c.zero is None and c.fsdp is not False and (pp == 1 or c.fsdp)
        fsdp = [FSDP2(r, sharded_fp32=c.fsdp_sharded_fp32) for r in fsdp_reshards(c, pp)] if runs else []
        return [*megatron, *fsdp]
    opts: list[Sharding] = []
    if c.offload_fixed is not None and c.zero is not None:
        optimizer, params = c.offload_fixed
        return [] if c.zero >= 2 and pp > 1 else [Zero(_ZERO_STAGES[c.zero], offload_optimizer=optimizer,
                                                          offload_params=params)]
    if c.megatron:
        return [MegatronDDP()]
    want_zero = c.zero is not None and not c.fsdp
    if not c.fsdp and (c.zero in (None, 0)) and c.megatron is None and (tp > 1 or pp > 1):
        opts.append(MegatronDDP())
    if not c.fsdp:
        stages = [c.zero] if want_zero else ([0, 1] + ([2, 3] if pp == 1 else []) if dp > 1 else [0])
        for z in stages:
            if z is None or (z >= 2 and pp > 1):
                continue
            if z == 0:
                opts.append(DDP())
                continue
            stage = _ZERO_STAGES[z]
            opts.append(Zero(stage))
            if c.offload and z >= 2:
                opts.append(Zero(stage, offload_optimizer=True))
                if z == 3:
                    opts.append(Zero(stage, offload_optimizer=True, offload_params=True))
    fp32 = c.fsdp_sharded_fp32
    if (c.fsdp or (c.zero is None and c.fsdp is None)) and dp > 1 and pp == 1:
        opts.extend(FSDP2(r, sharded_fp32=fp32) for r in fsdp_reshards(c, pp))
        node_shard = max(1, gpn // tp)
        if 1 < node_shard < dp and dp % node_shard == 0:
            opts.extend(FSDP2(r, hsdp_shard=node_shard, sharded_fp32=fp32) for r in fsdp_reshards(c, pp)[:1])
    if c.fsdp and not opts:
        opts.extend(FSDP2(r, sharded_fp32=fp32) for r in fsdp_reshards(c, pp))
    return opts


# the stages Zero accepts, by the user's --zero value (0 is DDP; validate() refused anything else)
_ZERO_STAGES: dict[int, ZeroStage] = {1: 1, 2: 2, 3: 3}


def rank(ctx: Context, layouts: Iterator[Layout]) -> tuple[list[Evaluation], int]:
    """Evaluate every layout; best first (fits, then step time, then peak memory)."""
    evals = [evaluate(ctx, lay) for lay in layouts]
    evals.sort(key=ranking(ctx.usable_bytes))
    return evals, len(evals)


def ranking(usable_bytes: int) -> Callable[[Evaluation], tuple[bool, float, int]]:
    """The order of layouts, best first: those that fit in ``usable_bytes``, then by step time, then by peak
    memory per GPU (each layout's peak read once)."""

    def key(e: Evaluation) -> tuple[bool, float, int]:
        peak = e.per_gpu_peak_bytes
        return peak > usable_bytes, e.step_time_s, peak

    return key


def why_loses(best: Evaluation, other: Evaluation, usable_bytes: int) -> str:
    from gpuplan.parallel.evaluate import time_part_name
    from gpuplan.units import format_bytes, format_seconds

    if other.per_gpu_peak_bytes > usable_bytes:
        return f"does not fit: {format_bytes(other.per_gpu_peak_bytes)} per GPU > {format_bytes(usable_bytes)} usable"
    if other.step_time_s <= best.step_time_s * 1.0005:
        return (
            f"same step time, more memory: {format_bytes(other.per_gpu_peak_bytes)} vs "
            f"{format_bytes(best.per_gpu_peak_bytes)}"
        )
    deltas = {k: other.time_parts_s.get(k, 0.0) - best.time_parts_s.get(k, 0.0) for k in other.time_parts_s}
    worst = max(deltas, key=lambda k: deltas[k])
    pct = (other.step_time_s / best.step_time_s - 1) * 100
    return f"{pct:+.1f}% step time, mostly {time_part_name(worst)} (+{format_seconds(deltas[worst])})"
