"""A parallel layout and the arithmetic that says whether it can exist.

Rank order follows Megatron-LM: tensor-parallel ranks are adjacent (inside a node), then
data-parallel, then pipeline stages outermost. A layout that cannot exist raises
:class:`gpuplan.errors.LayoutError` with the arithmetic that failed.

How the data-parallel ranks hold the model is a :data:`Sharding`, a sum type: one of
:class:`DDP`, :class:`MegatronDDP`, :class:`Zero` or :class:`FSDP2`, each carrying only the
options its engine has (offload belongs to ZeRO, resharding and HSDP to FSDP2), so a combination
no engine runs (FSDP with ZeRO, offload without ZeRO, Megatron with ZeRO-3) cannot be written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gpuplan.errors import LayoutError

SCHEDULES: tuple[str, ...] = ("1f1b", "interleaved")
FSDP_RESHARDS: tuple[str, ...] = ("default", "always", "never")
"""``--fsdp-reshard-after-forward``: torchtitan's ``parallelism.fsdp_reshard_after_forward`` values."""
FSDP_SHARDED_DTYPES: tuple[str, ...] = ("compute", "fp32")
"""``--fsdp-sharded-dtype``: the shards in the traced parameter dtype, or fp32 (FSDP2.sharded_fp32)."""
CP_COMMS: tuple[str, ...] = ("ring", "all-to-all", "hierarchical")
"""How context-parallel ranks share attention: ring (K/V chunks passed around the ring, causal
chunks load-balanced: torchtitan, Megatron ``--cp-comm-type p2p``), all-to-all (Ulysses: heads
exchanged for sequence, Megatron ``a2a``), hierarchical (all-to-all inside a node, ring across:
Megatron ``a2a+p2p``)."""
ZeroStage = Literal[1, 2, 3]


@dataclass(frozen=True, slots=True)
class DDP:
    """torch DistributedDataParallel: every rank holds the whole (fp32) model; AMP autocasts."""

    @property
    def name(self) -> str:
        return "ddp"

    @property
    def engine(self) -> str:
        return "torch"


@dataclass(frozen=True, slots=True)
class MegatronDDP:
    """Megatron-LM: 16-bit weights on the GPU, fp32 main gradients and fp32 master weights in the
    optimizer (no autocast weight copies); its own DDP over the data-parallel ranks."""

    @property
    def name(self) -> str:
        return "megatron-ddp"

    @property
    def engine(self) -> str:
        return "megatron"


@dataclass(frozen=True, slots=True)
class Zero:
    """DeepSpeed ZeRO stage 1-3 (stage 0 is plain :class:`DDP`), optionally with ZeRO-Offload."""

    stage: ZeroStage
    offload_optimizer: bool = False
    """Optimizer state (and the fp32 master) on the host, stepped by DeepSpeed's CPU Adam."""
    offload_params: bool = False
    """Parameters on the host between uses: DeepSpeed's ``offload_param``, valid with stage 3 only."""

    def __post_init__(self) -> None:
        if self.stage not in (1, 2, 3):
            raise LayoutError(
                f"ZeRO stage {self.stage!r} does not exist (allowed: 1, 2, 3); stage 0 is plain DDP: use DDP()"
            )
        if self.offload_params and self.stage != 3:
            raise LayoutError(
                f"ZeRO-{self.stage} cannot offload parameters: DeepSpeed's offload_param needs stage 3; "
                "use Zero(3, offload_params=True) or drop offload_params"
            )

    @property
    def name(self) -> str:
        return f"zero{self.stage}"

    @property
    def engine(self) -> str:
        return "deepspeed"


@dataclass(frozen=True, slots=True)
class FSDP2:
    """torch FSDP2 (``fully_shard``): parameters, gradients and optimizer state sharded over dp;
    HSDP when ``hsdp_shard`` is set (shard inside groups of that many dp ranks, replicate across)."""

    reshard_after_forward: bool = True
    """False: each block's gathered (compute-dtype) parameters stay from its forward to its backward, one
    all-gather fewer per micro-batch (torchtitan ``--parallelism.fsdp_reshard_after_forward never``)."""
    hsdp_shard: int | None = None
    sharded_fp32: bool = False
    """The model holds fp32 parameters, so the shards, their gradients and the optimizer state are fp32;
    ``MixedPrecisionPolicy(param_dtype=<compute>, reduce_dtype=float32)`` casts at each all-gather and
    reduces in fp32 (how torchtitan builds every model: fp32 on the meta device, whatever the precision).
    False: the shards are in the parameter dtype the precision traces (bf16 for --precision bf16/fp8)."""

    def __post_init__(self) -> None:
        if self.hsdp_shard is not None and (isinstance(self.hsdp_shard, bool) or self.hsdp_shard < 2):
            raise LayoutError(
                f"HSDP shard group {self.hsdp_shard!r} must be at least 2 ranks; "
                "leave hsdp_shard None to shard over every dp rank"
            )

    @property
    def name(self) -> str:
        return "fsdp2" if self.hsdp_shard is None else "hsdp"

    @property
    def engine(self) -> str:
        return "torch"


Sharding = DDP | MegatronDDP | Zero | FSDP2
"""How the data-parallel ranks hold parameters, gradients and optimizer state."""


def check_zero_pipeline(stage: int, pp: int) -> None:
    """ZeRO-2/3 do not run under a pipeline."""
    if stage >= 2 and pp > 1:
        # DeepSpeed's pipeline engine asserts stage < 2 ("ZeRO-2 and ZeRO-3 are incompatible with
        # pipeline parallelism"), and Megatron pairs PP with the distributed optimizer (ZeRO-1).
        raise LayoutError(
            f"ZeRO-{stage} with pp({pp}) > 1 is not supported by DeepSpeed's pipeline engine; "
            "use --zero 1 with pipeline parallelism"
        )


@dataclass(frozen=True, slots=True)
class Layout:
    """How one training step is spread over ``dp·tp·pp`` GPUs."""

    dp: int
    tp: int
    pp: int
    micro_batch_size: int
    grad_accum: int
    """Micro-batches per data-parallel rank per optimizer step (the pipeline's micro-batch count)."""
    sharding: Sharding = field(default_factory=DDP)
    sequence_parallel: bool = True
    schedule: str = "1f1b"
    virtual_stages: int = 1
    """Model chunks per pipeline rank for the interleaved schedule (1 for 1F1B)."""
    checkpointing: str = "none"
    ep: int = 1
    """Expert-parallel degree (MoE): each block's experts are split over groups of ``ep``
    consecutive data-parallel ranks (``ep`` divides ``dp``) and replicated over ``dp/ep`` groups;
    tokens reach their experts by an all-to-all (dispatch) and come back by another (combine)."""
    cp: int = 1
    """Context-parallel degree: each sample's sequence split over ``cp`` ranks (ranks tp → cp → dp → pp,
    Megatron's order); the model is replicated over them and FSDP2 shards it over dp·cp."""
    cp_comm: str = "ring"
    """One of :data:`CP_COMMS`."""
    first_stage_layers: int = 0
    """Uneven pipeline stages (Megatron-LM ``--decoder-first-pipeline-num-layers``, torchtitan's
    manual split): blocks on the first stage; 0 when every stage holds layers/pp."""
    last_stage_layers: int = 0
    """Blocks on the last stage (uneven stages); the middle stages split the rest evenly."""

    def __post_init__(self) -> None:
        s = self.sharding
        if isinstance(self.cp, bool) or self.cp < 1:
            raise LayoutError(
                f"cp({self.cp!r}) must be a whole number of at least 1; use --cp 1 for no context parallelism"
            )
        if self.cp_comm not in CP_COMMS:
            raise LayoutError(f"context-parallel communication {self.cp_comm!r} is not one of {', '.join(CP_COMMS)}")
        if self.cp > 1 and not (isinstance(s, MegatronDDP) or (isinstance(s, FSDP2) and s.hsdp_shard is None)):
            raise LayoutError(
                f"context parallelism (cp={self.cp}) with {s.name} is not run by any engine gpuplan models; "
                "torchtitan runs it with FSDP2 (--fsdp), Megatron-LM with its DDP (--megatron)"
            )
        if self.cp > 1 and self.ep > 1:
            raise LayoutError(
                f"context parallelism (cp={self.cp}) with expert parallelism (ep={self.ep}) is not modelled"
            )
        if isinstance(self.ep, bool) or self.ep < 1 or self.dp % self.ep:
            raise LayoutError(
                f"ep({self.ep}) must be at least 1 and divide dp({self.dp}) "
                f"(experts are split over groups of data-parallel ranks); use a divisor of dp"
            )
        if self.ep > 1 and isinstance(s, FSDP2) and s.hsdp_shard is not None:
            raise LayoutError(
                f"expert parallelism (ep={self.ep}) with HSDP (shard={s.hsdp_shard}) is not modelled; "
                "use FSDP2 over all of dp, or ep 1"
            )
        if not isinstance(s, DDP | MegatronDDP | Zero | FSDP2):
            raise LayoutError(f"sharding {s!r} is not a Sharding (allowed: DDP(), MegatronDDP(), Zero(stage), FSDP2())")
        if isinstance(s, Zero):
            check_zero_pipeline(s.stage, self.pp)
        if isinstance(s, FSDP2) and s.hsdp_shard is not None and (s.hsdp_shard >= self.dp or self.dp % s.hsdp_shard):
            raise LayoutError(
                f"HSDP shard group {s.hsdp_shard} must divide dp({self.dp}) and be smaller than it "
                f"({self.dp} mod {s.hsdp_shard} = {self.dp % s.hsdp_shard}); "
                "use a divisor of dp, or hsdp_shard None to shard over all of dp"
            )

    def stage_layers(self, layers: int) -> tuple[float, float, float]:
        """Blocks on the (first, middle, last) pipeline stage of a model with ``layers`` blocks."""
        if not self.first_stage_layers:
            return (layers / self.pp,) * 3
        mid = (layers - self.first_stage_layers - self.last_stage_layers) / (self.pp - 2) if self.pp > 2 else 0.0
        return float(self.first_stage_layers), mid, float(self.last_stage_layers)

    @property
    def gpus(self) -> int:
        return self.dp * self.tp * self.pp * self.cp

    @property
    def global_batch(self) -> int:
        return self.dp * self.micro_batch_size * self.grad_accum

    @property
    def engine(self) -> str:
        """``deepspeed`` for ZeRO (and its offload), ``megatron`` for Megatron-LM, ``torch`` (DDP /
        FSDP2 / TP / PP with torch.distributed) otherwise."""
        return self.sharding.engine

    @property
    def shard_group(self) -> int:
        """Ranks that parameters/gradients/optimizer state are split over (1: replicated)."""
        s = self.sharding
        if isinstance(s, FSDP2):
            return (s.hsdp_shard or self.dp) * self.cp
        return self.dp if isinstance(s, Zero) else 1

    # Read-only views of the sharding under the ``plan --json`` ``parallelism`` key names.
    @property
    def zero(self) -> int:
        """The ZeRO stage; 0 when the layout is not ZeRO."""
        return self.sharding.stage if isinstance(self.sharding, Zero) else 0

    @property
    def fsdp(self) -> bool:
        return isinstance(self.sharding, FSDP2)

    @property
    def offload_optimizer(self) -> bool:
        return isinstance(self.sharding, Zero) and self.sharding.offload_optimizer

    @property
    def offload_params(self) -> bool:
        return isinstance(self.sharding, Zero) and self.sharding.offload_params

    @property
    def fp32_weights_with_autocast(self) -> bool:
        """The rank holds fp32 weights and autocast casts them per use (plain torch AMP programs);
        FSDP2's MixedPrecisionPolicy, DeepSpeed and Megatron hold the 16-bit copy themselves."""
        return isinstance(self.sharding, DDP)

    def describe(self) -> str:
        s = self.sharding
        parts = [f"dp={self.dp}", f"tp={self.tp}", f"pp={self.pp}", s.name]
        if self.ep > 1:
            parts.insert(3, f"ep={self.ep}")
        if self.cp > 1:
            parts.insert(3, f"cp={self.cp}" + ("" if self.cp_comm == "ring" else f"({self.cp_comm})"))
        if isinstance(s, FSDP2) and not s.reshard_after_forward:
            parts.append("no-reshard")
        if isinstance(s, FSDP2) and s.hsdp_shard is not None:
            parts.append(f"shard={s.hsdp_shard}")
        if isinstance(s, FSDP2) and s.sharded_fp32:
            parts.append("fp32-shards")
        if self.tp > 1 and self.sequence_parallel:
            parts.append("sp")
        if self.pp > 1:
            parts.append(self.schedule if self.schedule == "1f1b" else f"interleaved×{self.virtual_stages}")
        if self.first_stage_layers:
            parts.append(f"stages={self.first_stage_layers}…{self.last_stage_layers}")
        parts.append(f"mbs={self.micro_batch_size}")
        parts.append(f"ga={self.grad_accum}")
        if self.checkpointing != "none":
            parts.append(f"ckpt={self.checkpointing}")
        if isinstance(s, Zero) and s.offload_optimizer:
            parts.append("offload-opt")
        if isinstance(s, Zero) and s.offload_params:
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
    if layers % (pp * virtual_stages) and virtual_stages == 1 and uneven_stages(layers, pp) is not None:
        return  # fewer blocks on the first and last stages (Megatron-LM, torchtitan run it)
    if layers % (pp * virtual_stages):
        chunks = pp * virtual_stages
        raise LayoutError(
            f"{layers} layers do not split into pp({pp})·chunks({virtual_stages}) = {chunks} stages "
            f"({layers} mod {chunks} = {layers % chunks})"
        )


def uneven_stages(layers: int, pp: int) -> tuple[int, int] | None:
    """(first, last) stage blocks when ``layers`` do not split evenly over ``pp`` stages: the middle
    stages take ceil(layers/pp) each and the first and last share the rest (they also hold the
    embeddings and the head), as Megatron-LM's --decoder-first/last-pipeline-num-layers express.
    None when the layers split evenly or no such split exists."""
    if pp < 2 or layers % pp == 0 or layers < pp:
        return None
    k = -(-layers // pp)
    rest = layers - (pp - 2) * k
    first = rest // 2
    return (first, rest - first) if first >= 1 else None


def encoder_stages(pp: int, encoder_layers: int, decoder_layers: int) -> int:
    """Pipeline stages of an encoder-decoder model that run the encoder (Megatron-LM's
    ``--encoder-pipeline-model-parallel-size``, formerly ``--pipeline-model-parallel-split-rank``: every
    stage runs blocks of one stack, the encoder on the first stages): the stages in proportion to the
    blocks, at least one for each stack. 0 when pp is 1 (one stage runs both)."""
    if pp < 2:
        return 0
    share = int(pp * encoder_layers / (encoder_layers + decoder_layers) + 0.5)
    return min(max(share, 1), pp - 1)


def stack_stage_blocks(layers: int, stages: int) -> list[int]:
    """Blocks of one stack on each of its ``stages`` consecutive pipeline stages: evenly, else by the
    decoder-only rule (:func:`uneven_stages`: the middle stages take ceil(layers/stages), the first and
    last the rest). LayoutError when the stack has fewer blocks than stages."""
    if stages < 1 or layers < stages:
        raise LayoutError(f"{stages} pipeline stages for a stack of {layers} blocks: a stage needs at least one "
                          "block; use a smaller --pp")
    if layers % stages == 0:
        return [layers // stages] * stages
    split = uneven_stages(layers, stages)
    if split is None:
        raise LayoutError(f"{layers} blocks do not split over {stages} pipeline stages; use a smaller --pp")
    mid = -(-layers // stages)
    return [split[0], *([mid] * (stages - 2)), split[1]]


def encoder_decoder_stages(pp: int, encoder_layers: int, decoder_layers: int) -> list[tuple[int, int]]:
    """(encoder blocks, decoder blocks) on each pipeline stage, in stage order (one stage holds both at pp 1)."""
    if pp < 2:
        return [(encoder_layers, decoder_layers)]
    enc = encoder_stages(pp, encoder_layers, decoder_layers)
    return ([(n, 0) for n in stack_stage_blocks(encoder_layers, enc)]
            + [(0, n) for n in stack_stage_blocks(decoder_layers, pp - enc)])


MEGATRON_ENCODER_DECODER = ("t5", "mt5", "umt5")
"""Encoder-decoder model types Megatron-LM runs (``pretrain_t5.py``); BART-style models it has not."""


def encoder_decoder_refusal(kind: str, model: str, model_type: str = "t5", megatron: bool = False) -> str:
    """One line: ``--emit kind`` has no encoder-decoder program for ``model`` (torchtitan has no such model; the
    torch snippet's pipeline passes one hidden state between stages, not the encoder's output as well; Megatron-LM's
    only encoder-decoder model is T5)."""
    t5 = model_type in MEGATRON_ENCODER_DECODER
    if megatron and not t5:
        return (f"--emit {kind} cannot implement it for {model}: Megatron-LM's encoder-decoder model is T5, not "
                f"{model_type or 'this one'}; drop --megatron (--emit deepspeed for ZeRO, --pp 1)")
    what = ("torchtitan has no encoder-decoder model" if kind == "torchtitan"
            else "its pipeline passes one hidden state between stages, not the encoder's output too")
    other = ("or --megatron with --emit torchrun (Megatron-LM's pretrain_t5.py)" if t5
             else "(no engine it emits pipelines it)")
    return f"--emit {kind} cannot implement it for {model}: {what}; use --emit deepspeed (ZeRO, --pp 1) {other}"


def check_context(cp: int, cp_comm: str, *, seq_len: int, heads: int, tp: int) -> None:
    """Context parallelism splits each sequence into 2·cp load-balanced causal chunks (torchtitan and
    Megatron-LM both need the sequence to divide); Ulysses all-to-all also splits the heads cp ways."""
    if cp < 1:
        raise LayoutError(f"cp must be at least 1, got {cp}; use --cp 1 for no context parallelism")
    if cp_comm not in CP_COMMS:
        raise LayoutError(f"--cp-comm {cp_comm!r} is not one of {', '.join(CP_COMMS)}")
    if cp > 1 and seq_len % (2 * cp):
        raise LayoutError(
            f"cp({cp}) needs the sequence length to split into 2·cp = {2 * cp} chunks "
            f"({seq_len} mod {2 * cp} = {seq_len % (2 * cp)}); use a cp that divides seq_len/2"
        )
    if cp > 1 and cp_comm == "all-to-all" and heads and heads % (tp * cp):
        raise LayoutError(
            f"all-to-all context parallelism splits the {heads} heads over tp({tp})·cp({cp}) = {tp * cp} ranks "
            f"({heads} mod {tp * cp} = {heads % (tp * cp)}); use --cp-comm ring or a cp that divides the heads"
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


def check_experts(ep: int, experts: int) -> None:
    """Expert parallelism needs an MoE model whose expert count ``ep`` divides."""
    if ep > 1 and not experts:
        raise LayoutError(f"ep({ep}) needs a mixture-of-experts model; this model has no experts: use --ep 1")
    if ep > 1 and experts % ep:
        raise LayoutError(
            f"ep({ep}) does not divide the {experts} experts per layer ({experts} mod {ep} = {experts % ep}); "
            "use an ep that divides the expert count"
        )


def check_sharding(zero: int, fsdp: bool, tp: int, pp: int, megatron: bool = False) -> None:
    if megatron and (zero or fsdp):
        raise LayoutError("--megatron models Megatron-LM's own DDP; it does not combine with --zero or --fsdp")
    if zero not in (0, 1, 2, 3):
        raise LayoutError(f"ZeRO stage {zero} does not exist (allowed: 0, 1, 2, 3)")
    if fsdp and zero:
        raise LayoutError(f"--fsdp and --zero {zero} are two ways to shard; pick one")
    check_zero_pipeline(zero, pp)
