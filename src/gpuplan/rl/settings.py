"""What one RL post-training step runs: the algorithm, the batch, the models and where they sit.

``RLSettings`` is frozen and checked once, when it is made: every bad value is one ConfigError line (exit 2 on
the command line) naming the value, what is allowed and what to pass. Defaults left as ``None`` are resolved
in ``__post_init__`` so that every reader (the estimator, the config emitters) sees concrete values.

Units: batches count *sequences* (one prompt + one response) except ``prompts_per_step``; lengths are tokens.
A DPO pair is two sequences (chosen, rejected) forwarded together, as TRL's ``concatenated_forward`` does.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Final, Literal

from gpuplan.errors import ConfigError, require_choice
from gpuplan.workload import (
    CHECKPOINTING,
    MAX_BATCH_SIZE,
    MAX_SEQ_LEN,
    OPTIMIZERS,
    PRECISIONS,
    Checkpointing,
    Optimizer,
    Peft,
    Precision,
    Workload,
    check_range,
)

Algorithm = Literal["grpo", "ppo", "dapo", "dpo"]
Placement = Literal["colocate", "split"]
RolloutEngine = Literal["vllm", "sglang"]

ALGORITHMS: Final[tuple[str, ...]] = ("grpo", "ppo", "dapo", "dpo")
PLACEMENTS: Final[tuple[str, ...]] = ("colocate", "split")
ROLLOUT_ENGINES: Final[tuple[str, ...]] = ("vllm", "sglang")
FRAMEWORKS: Final[tuple[str, ...]] = ("verl", "trl", "openrlhf")
"""The frameworks whose log-prob pass is sized their way (rl/logprobs.py); the names of ``rl --emit``."""
OFFLOADS: Final[tuple[str, ...]] = ("params", "optimizer", "ref")
"""FSDP CPU offload as verl (``actor.fsdp_config.param_offload`` / ``optimizer_offload``,
``ref.fsdp_config.param_offload``) and TRL/accelerate do it: the tensors live on the host between uses."""

GROUP_ALGORITHMS: Final[frozenset[str]] = frozenset({"grpo", "dapo"})
"""Advantages relative to the other samples of the same prompt: they need K >= 2 samples per prompt."""
REF_BY_DEFAULT: Final[frozenset[str]] = frozenset({"grpo", "ppo", "dpo"})
"""A frozen reference is on by default for the algorithms whose loss reads it (GRPO's and PPO's KL term, DPO's
log-ratio); DAPO drops the KL term (Yu et al. 2025, section 2.3), so it runs without one unless asked."""
DEFAULT_SAMPLES: Final[dict[str, int]] = {"grpo": 8, "dapo": 16, "ppo": 1, "dpo": 2}
"""TRL GRPOConfig.num_generations = 8; DAPO's recipe samples 16 per prompt; PPO one; DPO a pair."""
DEFAULT_UTILIZATION: Final[dict[str, float]] = {"colocate": 0.5, "split": 0.9}
"""verl's ``rollout.gpu_memory_utilization`` default (0.5) when the engine shares the GPU with the trainer;
vLLM's own default (0.9) when it has its GPUs to itself."""
DEFAULT_PRECISION: Final[Precision] = "amp-bf16"
"""FSDP mixed precision as verl and TRL run it: fp32 master weights, bf16 compute (``param_dtype`` bf16)."""
DEFAULT_CHECKPOINTING: Final[Checkpointing] = "full"
"""verl's examples, OpenRLHF's ``--gradient_checkpointing`` and TRL's GRPOConfig all turn it on."""
MAX_GPUS: Final = 1 << 16


def _positive(name: str, value: int, flag: str, high: int = MAX_BATCH_SIZE) -> int:
    return check_range(name, value, 1, high, f"pass {flag} of at least 1")


@dataclass(frozen=True, kw_only=True, slots=True)
class RLSettings:
    """One RL (or DPO) post-training step. Field names are the contract the emitters read (gpuplan.rl.emit)."""

    model: str
    """The policy (a MODEL as every verb takes it)."""
    gpu: str
    gpus: int
    nodes: int = 1
    algorithm: Algorithm = "grpo"
    # -- the batch --
    prompts_per_step: int
    """Prompts rolled out per step (DPO: preference pairs per step)."""
    samples_per_prompt: int | None = None
    """K responses per prompt (None: DEFAULT_SAMPLES of the algorithm; DPO: always 2, chosen and rejected)."""
    prompt_len: int
    response_len: int
    """Mean response tokens (what generation and the trainer see on average)."""
    max_response_len: int | None = None
    """Longest response (the engine's max length, the trainer's padded length); None: ``response_len``."""
    train_global_batch: int | None = None
    """Sequences per optimizer step over all trainer GPUs (verl's ppo_mini_batch_size × n); None: the whole
    rollout batch, one optimizer step per RL step."""
    train_micro_batch: int | None = None
    """Sequences per forward/backward on one GPU (verl's ppo_micro_batch_size_per_gpu); None: 1 (DPO: 2, a pair)."""
    ppo_epochs: int = 1
    """Passes over the rollout batch per step (verl ppo_epochs, TRL num_iterations)."""
    # -- the models --
    peft: Peft = "none"
    lora_rank: int = 8
    lora_alpha: float = 8.0
    lora_dropout: float = 0.0
    lora_targets: tuple[str, ...] = ()
    train_modules: tuple[str, ...] = ()
    """Modules trained whole beside the adapters (PEFT's modules_to_save)."""
    ref: bool | None = None
    """A frozen reference policy (None: REF_BY_DEFAULT of the algorithm)."""
    critic: str | None = None
    """PPO's value model (None with PPO: the policy's architecture); refused for the other algorithms."""
    reward_model: str | None = None
    """A model-based reward (None: rule-based rewards, no model)."""
    # -- placement and the rollout engine --
    placement: Placement = "colocate"
    rollout_gpus: int | None = None
    """GPUs of the rollout engine: all of them colocated; split: the engine's share (the trainer gets the rest)."""
    rollout_engine: RolloutEngine = "vllm"
    rollout_tp: int = 1
    rollout_memory_utilization: float | None = None
    """vLLM gpu_memory_utilization / SGLang mem_fraction_static (None: DEFAULT_UTILIZATION of the placement)."""
    rollout_max_num_seqs: int | None = None
    """Sequences one engine step holds (vLLM max_num_seqs; None: the engine's default)."""
    rollout_max_num_batched_tokens: int | None = None
    """Tokens one engine step processes (vLLM max_num_batched_tokens, the profile run's size; None: the
    engine's default for its offline ``LLM`` class)."""
    rollout_enforce_eager: bool = False
    """No CUDA graphs in the engine (verl ``rollout.enforce_eager``, OpenRLHF ``--vllm.enforce_eager``, ``trl
    vllm-serve --enforce_eager``): no graph pool, each decode step dispatched kernel by kernel (serve/timing.py)."""
    framework: str = "verl"
    """Whose log-prob pass is sized (rl/logprobs.py: the logits as verl, TRL or OpenRLHF compute them)."""
    # -- trainer techniques --
    offload: frozenset[str] = frozenset()
    checkpointing: Checkpointing = DEFAULT_CHECKPOINTING
    precision: Precision = DEFAULT_PRECISION
    optimizer: Optimizer = "adamw"

    def __post_init__(self) -> None:
        require_choice("RL algorithm", self.algorithm, ALGORITHMS)
        require_choice("placement", self.placement, PLACEMENTS)
        require_choice("rollout engine", self.rollout_engine, ROLLOUT_ENGINES)
        require_choice("RL framework", self.framework, FRAMEWORKS)
        require_choice("precision", self.precision, PRECISIONS)
        require_choice("checkpointing mode", self.checkpointing, CHECKPOINTING)
        require_choice("optimizer", self.optimizer, OPTIMIZERS)
        self._resolve_defaults()
        self._check_cluster()
        self._check_models()
        self._check_rollout()
        self._check_batch()  # after the rollout: the trainer's GPUs are what the engine leaves
        self.trainer_workload()  # PEFT settings checked by Workload's own rule

    def _set(self, name: str, value: Any) -> None:
        object.__setattr__(self, name, value)  # resolving a default once, in __post_init__ only

    def _resolve_defaults(self) -> None:
        if self.samples_per_prompt is None:
            self._set("samples_per_prompt", DEFAULT_SAMPLES[self.algorithm])
        if self.max_response_len is None and isinstance(self.response_len, int):
            self._set("max_response_len", self.response_len)
        if self.train_micro_batch is None:
            self._set("train_micro_batch", 2 if self.algorithm == "dpo" else 1)
        if self.ref is None:
            self._set("ref", self.algorithm in REF_BY_DEFAULT)
        if self.critic is None and self.algorithm == "ppo":
            self._set("critic", self.model)
        if self.rollout_memory_utilization is None:
            self._set("rollout_memory_utilization", DEFAULT_UTILIZATION[self.placement])
        if self.rollout_gpus is None and self.placement == "colocate" and isinstance(self.gpus, int):
            self._set("rollout_gpus", self.gpus)
        if isinstance(self.offload, str) or not all(isinstance(o, str) for o in self.offload):
            raise ConfigError(f"offload must be a set of names among {', '.join(OFFLOADS)}, got {self.offload!r}")
        self._set("offload", frozenset(self.offload))
        self._set("lora_targets", tuple(self.lora_targets))
        self._set("train_modules", tuple(self.train_modules))

    def _check_cluster(self) -> None:
        _positive("--gpus", self.gpus, "--gpus N", MAX_GPUS)
        _positive("--nodes", self.nodes, "--nodes M", MAX_GPUS)
        if self.gpus % self.nodes:
            raise ConfigError(
                f"--gpus {self.gpus} is not a multiple of --nodes {self.nodes}: every node holds the "
                "same number of GPUs; pass --gpus as nodes × GPUs per node"
            )

    def _check_batch(self) -> None:
        _positive("--prompts-per-step", self.prompts_per_step, "--prompts-per-step P")
        k = self.samples
        check_range("--samples-per-prompt", k, 1, 1 << 12, "pass K responses per prompt")
        if self.algorithm in GROUP_ALGORITHMS and k < 2:
            raise ConfigError(
                f"--samples-per-prompt {k} is too few for {self.algorithm.upper()}: its advantage "
                "compares the K responses of one prompt; pass 2 or more (TRL's default is 8)"
            )
        if self.algorithm == "dpo" and k != 2:
            raise ConfigError(
                f"--samples-per-prompt {k} does not apply to DPO: a preference pair is 2 sequences "
                "(chosen, rejected); leave it out"
            )
        _positive("--prompt-len", self.prompt_len, "--prompt-len L", MAX_SEQ_LEN)
        _positive("--response-len", self.response_len, "--response-len R", MAX_SEQ_LEN)
        check_range(
            "--max-response-len",
            self.longest_response,
            self.response_len,
            MAX_SEQ_LEN,
            f"the longest response is at least the mean --response-len {self.response_len}",
        )
        _positive("--train-micro-batch", self.micro_batch, "--train-micro-batch m")
        check_range("--ppo-epochs", self.ppo_epochs, 1, 1 << 10, "pass 1 pass over the batch or more")
        sequences = self.sequences_per_step
        g = self.global_batch
        _positive("--train-global-batch", g, "--train-global-batch G")
        if sequences % g:
            raise ConfigError(
                f"--train-global-batch {g} does not divide the {sequences:,} sequences of a step "
                f"(prompts {self.prompts_per_step} × samples {k}); pass a divisor of {sequences:,}"
            )
        per_pass = self.micro_batch * self.trainer_gpus
        if g % per_pass:
            raise ConfigError(
                f"--train-global-batch {g} is not a multiple of --train-micro-batch "
                f"{self.micro_batch} × {self.trainer_gpus} trainer GPUs = {per_pass}; pass a "
                f"multiple of {per_pass} or a smaller micro-batch"
            )
        if self.algorithm == "dpo" and self.micro_batch % 2:
            raise ConfigError(
                f"--train-micro-batch {self.micro_batch} splits a DPO pair: the chosen and the "
                "rejected sequence are forwarded together; pass an even number of sequences"
            )

    def _check_models(self) -> None:
        if self.critic is not None and self.algorithm != "ppo":
            raise ConfigError(
                f"--critic applies to --algorithm ppo only: {self.algorithm.upper()} has no value "
                "model; leave --critic out"
            )
        if self.algorithm == "dpo" and self.reward_model is not None:
            raise ConfigError(
                "--reward-model does not apply to DPO: it learns from preference pairs offline; leave it out"
            )
        bad = sorted(self.offload - set(OFFLOADS))
        if bad:
            raise ConfigError(
                f"unknown offload {bad[0]!r} (allowed: {', '.join(OFFLOADS)}); pass e.g. --offload params,optimizer"
            )
        if "ref" in self.offload and not self.ref:
            raise ConfigError("--offload ref needs a reference model; drop 'ref' from --offload or drop --no-ref")
        if "optimizer" in self.offload and self.optimizer == "none":
            raise ConfigError("--offload optimizer with --optimizer none offloads nothing; drop one of them")

    def _check_rollout(self) -> None:
        from gpuplan.serve.engines import check_utilization

        check_utilization(self.utilization, "--rollout-memory-utilization")
        _positive("--rollout-tp", self.rollout_tp, "--rollout-tp T", MAX_GPUS)
        if self.rollout_max_num_seqs is not None:
            _positive("--rollout-max-num-seqs", self.rollout_max_num_seqs, "--rollout-max-num-seqs S")
        if self.rollout_max_num_batched_tokens is not None:
            _positive(
                "--rollout-max-num-batched-tokens",
                self.rollout_max_num_batched_tokens,
                "--rollout-max-num-batched-tokens T",
                MAX_SEQ_LEN,
            )
        if self.algorithm == "dpo":
            if self.placement != "colocate" or self.rollout_gpus != self.gpus:
                raise ConfigError(
                    "--placement split / --rollout-gpus do not apply to DPO: it generates nothing; leave them out"
                )
            return
        if self.placement == "split":
            if self.rollout_gpus is None:
                raise ConfigError(
                    "--placement split needs --rollout-gpus K: the GPUs the rollout engine gets "
                    "(the trainer gets the rest)"
                )
            check_range(
                "--rollout-gpus",
                self.rollout_gpus,
                1,
                self.gpus - 1,
                f"split placement leaves the trainer at least one of the {self.gpus} GPUs",
            )
        elif self.rollout_gpus != self.gpus:
            raise ConfigError(
                f"--rollout-gpus {self.rollout_gpus} applies to --placement split; colocated, the "
                f"engine uses all {self.gpus} GPUs; add --placement split or leave it out"
            )
        if self.engine_gpus % self.rollout_tp:
            raise ConfigError(
                f"--rollout-tp {self.rollout_tp} does not divide the {self.engine_gpus} rollout GPUs; "
                f"pass a divisor of {self.engine_gpus}"
            )

    # -- resolved views (fields are concrete after __post_init__) --
    @property
    def samples(self) -> int:
        return self.samples_per_prompt if self.samples_per_prompt is not None else DEFAULT_SAMPLES[self.algorithm]

    @property
    def micro_batch(self) -> int:
        if self.train_micro_batch is not None:
            return self.train_micro_batch
        return 2 if self.algorithm == "dpo" else 1

    @property
    def longest_response(self) -> int:
        return self.max_response_len if self.max_response_len is not None else self.response_len

    @property
    def utilization(self) -> float:
        u = self.rollout_memory_utilization
        return u if u is not None else DEFAULT_UTILIZATION[self.placement]

    @property
    def sequences_per_step(self) -> int:
        return self.prompts_per_step * self.samples

    @property
    def global_batch(self) -> int:
        return self.train_global_batch if self.train_global_batch is not None else self.sequences_per_step

    @property
    def optimizer_steps(self) -> int:
        """Optimizer steps per RL step: the rollout batch split into global batches, ``ppo_epochs`` times."""
        return self.sequences_per_step // self.global_batch * self.ppo_epochs

    @property
    def grad_accum(self) -> int:
        """Micro-batches per GPU per optimizer step."""
        return self.global_batch // (self.micro_batch * self.trainer_gpus)

    @property
    def engine_gpus(self) -> int:
        """GPUs the rollout engine spans (all of them colocated)."""
        return self.rollout_gpus if self.rollout_gpus is not None else self.gpus

    @property
    def trainer_gpus(self) -> int:
        """GPUs the trainer (policy, reference, critic, reward model) is sharded over."""
        return self.gpus - self.engine_gpus if self.placement == "split" else self.gpus

    @property
    def sequence_len(self) -> int:
        """Tokens of one trainer sequence: the prompt and the longest response, padded as the trainers pad."""
        return self.prompt_len + self.longest_response

    @property
    def generates(self) -> bool:
        return self.algorithm != "dpo"

    @property
    def mean_sequence_len(self) -> int:
        """Tokens a sequence holds on average: what the trainers compute on once padding is removed (verl's
        ``use_remove_padding``, OpenRLHF's ``--packing_samples``)."""
        return self.prompt_len + self.response_len

    def trainer_workload(self, *, micro_batch: int | None = None, seq_len: int | None = None) -> Workload:
        """The policy's training step as the existing trace runs it (one micro-batch of sequences of ``seq_len``
        tokens, default the padded ``sequence_len``)."""
        return Workload(
            mode="train",
            batch_size=micro_batch or self.micro_batch,
            seq_len=seq_len or self.sequence_len,
            precision=self.precision,
            optimizer=self.optimizer,
            checkpointing=self.checkpointing,
            grad_accum=self.grad_accum,
            peft=self.peft,
            lora_rank=self.lora_rank,
            lora_alpha=self.lora_alpha,
            lora_dropout=self.lora_dropout,
            lora_targets=self.lora_targets,
            train_modules=self.train_modules,
        )

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["offload"] = sorted(self.offload)
        data["lora_targets"] = list(self.lora_targets)
        data["train_modules"] = list(self.train_modules)
        return data
