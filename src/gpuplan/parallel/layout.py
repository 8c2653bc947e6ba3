"""A parallel layout and the arithmetic that says whether it can exist.

Rank order follows Megatron-LM: tensor-parallel ranks are adjacent (inside a node), then
data-parallel, then pipeline stages outermost. A layout that cannot exist raises
:class:`gpuplan.errors.LayoutError` with the arithmetic that failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuplan.errors import LayoutError

SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved")


@dataclass(frozen=True, slots=True)
class Layout:
    """How one training step is spread over ``dp·tp·pp`` GPUs."""

    dp: int
    tp: int
    pp: int
    micro_batch_size: int
    grad_accum: int
    """Micro-batches per data-parallel rank per optimizer step (the pipeline's micro-batch count)."""
    zero: int = 0
    """DeepSpeed ZeRO stage 0-3 (0 with ``fsdp`` False: plain DDP)."""
    fsdp: bool = False
    """FSDP2 (``fully_shard``): parameters, gradients and optimizer state sharded over dp."""
    hsdp_shard: int = 0
    """HSDP: shard inside groups of this many dp ranks, replicate across them (0: shard over all dp)."""
    reshard_after_forward: bool = True
    sequence_parallel: bool = True
    schedule: str = "1f1b"
    virtual_stages: int = 1
    """Model chunks per pipeline rank for the interleaved schedule (1 for 1F1B)."""
    checkpointing: str = "none"
    offload_optimizer: bool = False
    offload_params: bool = False
    megatron: bool = False
    """Megatron-LM: 16-bit weights on the GPU, fp32 main gradients and fp32 master weights in the
    optimizer (no autocast weight copies); DDP over the data-parallel ranks."""

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp

    @property
    def global_batch(self) -> int:
        return self.dp * self.micro_batch_size * self.grad_accum

    @property
    def engine(self) -> str:
        """``deepspeed`` for ZeRO stages and offload, ``megatron`` for Megatron-LM, ``torch`` (DDP /
        FSDP2 / TP / PP with torch.distributed) otherwise."""
        if self.zero > 0 or self.offload_optimizer or self.offload_params:
            return "deepspeed"
        return "megatron" if self.megatron else "torch"

    @property
    def shard_group(self) -> int:
        """Ranks that parameters/gradients/optimizer state are split over (1: replicated)."""
        if self.fsdp:
            return self.hsdp_shard or self.dp
        return self.dp if self.zero > 0 else 1

    @property
    def sharding(self) -> str:
        if self.fsdp:
            return "hsdp" if self.hsdp_shard and self.hsdp_shard < self.dp else "fsdp2"
        return f"zero{self.zero}" if self.zero else ("megatron-ddp" if self.megatron else "ddp")

    @property
    def fp32_weights_with_autocast(self) -> bool:
        """The rank holds fp32 weights and autocast casts them per use (plain torch AMP programs);
        FSDP2's MixedPrecisionPolicy, DeepSpeed and Megatron hold the 16-bit copy themselves."""
        return self.engine == "torch" and not self.fsdp

    def describe(self) -> str:
        parts = [f"dp={self.dp}", f"tp={self.tp}", f"pp={self.pp}", self.sharding]
        if self.fsdp and not self.reshard_after_forward:
            parts.append("no-reshard")
        if self.hsdp_shard and self.fsdp and self.hsdp_shard < self.dp:
            parts.append(f"shard={self.hsdp_shard}")
        if self.tp > 1 and self.sequence_parallel:
            parts.append("sp")
        if self.pp > 1:
            parts.append(self.schedule if self.schedule == "1f1b" else f"interleaved×{self.virtual_stages}")
        parts.append(f"mbs={self.micro_batch_size}")
        parts.append(f"ga={self.grad_accum}")
        if self.checkpointing != "none":
            parts.append(f"ckpt={self.checkpointing}")
        if self.offload_optimizer:
            parts.append("offload-opt")
        if self.offload_params:
            parts.append("offload-params")
        return " ".join(parts)


def check_degrees(gpus: int, dp: int, tp: int, pp: int) -> None:
    """``dp·tp·pp`` must equal the GPU count."""
    for name, v in (("dp", dp), ("tp", tp), ("pp", pp)):
        if v < 1:
            raise LayoutError(f"{name} must be at least 1, got {v}")
    if dp * tp * pp != gpus:
        raise LayoutError(f"dp({dp})·tp({tp})·pp({pp}) = {dp * tp * pp} ≠ {gpus} GPUs")


def check_model(tp: int, pp: int, *, heads: int, kv_heads: int, layers: int, virtual_stages: int = 1) -> None:
    """Megatron's divisibility rules: heads split over tp, layers over pp (and model chunks)."""
    if heads and heads % tp:
        raise LayoutError(
            f"tp({tp}) does not divide the {heads} attention heads ({heads} mod {tp} = {heads % tp}); "
            "use a tp that divides the head count"
        )
    if kv_heads and kv_heads % tp and tp % kv_heads:
        raise LayoutError(
            f"tp({tp}) and the {kv_heads} key/value heads do not divide one another; "
            "use a tp that divides (or is a multiple of) the KV head count"
        )
    if pp > layers:
        raise LayoutError(f"pp({pp}) > {layers} layers: a pipeline stage needs at least one layer")
    if layers % (pp * virtual_stages):
        chunks = pp * virtual_stages
        raise LayoutError(
            f"{layers} layers do not split into pp({pp})·chunks({virtual_stages}) = {chunks} stages "
            f"({layers} mod {chunks} = {layers % chunks})"
        )


def check_batch(global_batch: int, dp: int, micro_batch: int) -> int:
    """The gradient-accumulation count: global batch = dp · micro-batch · accumulation."""
    per = dp * micro_batch
    if global_batch % per:
        raise LayoutError(
            f"global batch {global_batch} is not divisible by dp({dp})·micro-batch({micro_batch}) = "
            f"{per} ({global_batch} mod {per} = {global_batch % per})"
        )
    return global_batch // per


def check_sharding(zero: int, fsdp: bool, tp: int, pp: int, megatron: bool = False) -> None:
    if megatron and (zero or fsdp):
        raise LayoutError("--megatron models Megatron-LM's own DDP; it does not combine with --zero or --fsdp")
    if zero not in (0, 1, 2, 3):
        raise LayoutError(f"ZeRO stage {zero} does not exist (allowed: 0, 1, 2, 3)")
    if fsdp and zero:
        raise LayoutError(f"--fsdp and --zero {zero} are two ways to shard; pick one")
    if zero >= 2 and pp > 1:
        # DeepSpeed's pipeline engine asserts stage < 2 ("ZeRO-2 and ZeRO-3 are incompatible with
        # pipeline parallelism"), and Megatron pairs PP with the distributed optimizer (ZeRO-1).
        raise LayoutError(
            f"ZeRO-{zero} with pp({pp}) > 1 is not supported by DeepSpeed's pipeline engine; "
            "use --zero 1 with pipeline parallelism"
        )
