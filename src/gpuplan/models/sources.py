"""Model sources: turn the MODEL argument into something the tracer can build and feed.

MODEL is one of (DESIGN.md): a catalog name, a Hugging Face ``config.json`` (file or folder), a
``.safetensors`` file or sharded folder, ``path/to/file.py:factory`` or ``package.module:factory``
(optionally ``:factory,inputs_factory``), or a ``torchvision.models`` builder name.

A source builds its ``nn.Module`` when asked — the tracer calls :meth:`ModelSource.build` inside
``FakeTensorMode`` so no weight is ever allocated — and says how many repeated blocks the model
has per config key, so big models can be traced with a few blocks and scaled (trace/scaling.py).
Nothing is downloaded; ``trust_remote_code`` is never used.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import inspect
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import (
    ConfigError,
    GpuplanError,
    ModelSourceError,
    TraceError,
    UnknownModelError,
    did_you_mean,
    one_line,
)
from gpuplan.models import chunked_loss
from gpuplan.models.base import TIMM_PREFIX, Inputs, ModelSource, default_loss
from gpuplan.models.files import SafetensorsSummary, WeightsSummary, read_config_json, read_safetensors_headers
from gpuplan.models.quant_config import QuantizationConfig, parse_quantization_config
from gpuplan.workload import Workload

if TYPE_CHECKING:
    import torch
    from torch import nn



# --------------------------------------------------------------------------- Hugging Face ----

DEFAULT_SEQ_LEN_CAP = 2048
"""The longest default --seq-len: a model's trained context when shorter, else 2048 tokens — the
fine-tuning default of LLaMA-Factory (``cutoff_len``) and the length most public training rows use; the
full context of a long-context model (8K-128K) is a choice, never a default that decides "does not fit"."""

_TASK_AUTO_CLASS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
    "sequence-classification": "AutoModelForSequenceClassification",
    "token-classification": "AutoModelForTokenClassification",
}

_ARCH_SUFFIX_TASK = (
    ("ForCausalLM", "causal-lm"),
    ("LMHeadModel", "causal-lm"),
    ("ForConditionalGeneration", "seq2seq-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForPreTraining", "masked-lm"),
    ("ForImageClassification", "image-classification"),
    ("ForSequenceClassification", "sequence-classification"),
    ("ForTokenClassification", "token-classification"),
)


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        from gpuplan.errors import MissingDependencyError
        from gpuplan.extras import TRANSFORMERS

        raise MissingDependencyError(TRANSFORMERS.message()) from exc
    return transformers


_BART_LIKE = ("bart", "mbart", "pegasus", "marian")
"""Encoder-decoder model types whose configs count each stack (``encoder_layers``, ``decoder_layers``)."""


class HFConfigSource(ModelSource):
    """A transformers architecture from a config dict (catalog entry or the user's config.json)."""

    kind = "hf-config"

    def __init__(self, name: str, config: Mapping[str, Any], *, task: str | None = None,
                 default_seq_len: int | None = None, kind: str = "hf-config") -> None:
        self.name = name
        self.kind = kind
        self._config = dict(config)
        self.task = task or self._infer_task()
        self._default_seq_len = default_seq_len
        raw_quant = self._config.get("quantization_config")
        # checked here, so that a quant_method gpuplan cannot model stops before any trace
        self._quantization = None if raw_quant is None else parse_quantization_config(raw_quant, where=name)
        self._stored_weights: WeightsSummary | Callable[[], WeightsSummary | None] | None = None

    def quantization(self) -> QuantizationConfig | None:
        return self._quantization

    def stored_weights(self) -> WeightsSummary | None:
        if callable(self._stored_weights):  # read the headers once, when first asked
            self._stored_weights = self._stored_weights()
        return self._stored_weights

    def with_stored_weights(self, weights: WeightsSummary | Callable[[], WeightsSummary | None]) -> HFConfigSource:
        """This source, knowing the checkpoint's tensors from their headers (weights beside the config):
        the summary, or a function that reads it when :meth:`stored_weights` is first called."""
        self._stored_weights = weights
        return self

    def _infer_task(self) -> str:
        architectures = self._config.get("architectures")
        for arch in architectures if isinstance(architectures, list) else []:
            for suffix, task in _ARCH_SUFFIX_TASK:
                if isinstance(arch, str) and arch.endswith(suffix):
                    return task
        model_type = self._config.get("model_type", "")
        if model_type in ("bert", "roberta", "distilbert", "albert", "electra", "deberta", "deberta-v2"):
            return "masked-lm"
        if model_type in ("t5", "mt5", "bart", "mbart", "pegasus", "marian"):
            return "seq2seq-lm"
        if model_type in ("vit", "deit", "beit", "convnext", "swin", "resnet"):
            return "image-classification"
        return "causal-lm"

    @property
    def config_dict(self) -> dict[str, Any]:
        return dict(self._config)

    def hf_config(self, layers: Mapping[str, int] | None = None) -> Any:
        transformers = _require_transformers()
        cfg = dict(self._config)
        model_type = cfg.pop("model_type", None)
        if not isinstance(model_type, str) or not model_type:
            raise ModelSourceError(f"{self.name}: config has no 'model_type'; it is not a transformers config.json")
        known = list(transformers.CONFIG_MAPPING.keys())
        if model_type not in known:
            raise ModelSourceError(
                f"{self.name}: model_type {model_type!r} is not an architecture transformers "
                f"{transformers.__version__} knows{did_you_mean(model_type, known)} ({len(known)} are known; "
                "a newer transformers may know it — gpuplan never runs remote code)")
        _check_sizes(self.name, cfg)
        for key in ("transformers_version", "_name_or_path", "auto_map"):
            cfg.pop(key, None)
        if layers:
            cfg.update(layers)
            dense = cfg.get("first_k_dense_replace")
            if isinstance(dense, int) and dense > _DENSE_PREFIX_TRACED:
                # DeepSeek-V3 (3 dense MLP layers first): traced at 3 and 2 blocks every block would be dense and
                # the scaled model would have no experts; with 2 dense the 3-block run adds one MoE block, so the
                # scaled model holds 2 dense + (N − 2) MoE layers (one MoE layer where the model has a dense one)
                cfg["first_k_dense_replace"] = _DENSE_PREFIX_TRACED
            if isinstance(cfg.get("layer_types"), list):
                n = next(iter(layers.values()))
                cfg["layer_types"] = cfg["layer_types"][:1] * n
        try:
            hf_cfg = transformers.AutoConfig.for_model(model_type, **cfg)
        except Exception as exc:  # transformers' own (strict) validation of the user's values
            raise ModelSourceError(
                f"{self.name}: transformers rejects this {model_type} config: {_validation_message(exc)} — "
                "correct that field (compare with the model's published config.json)") from exc
        return hf_cfg

    def layer_counts(self) -> dict[str, int]:
        cfg = self.hf_config()
        types = getattr(cfg, "layer_types", None)
        if isinstance(types, list) and len(set(types)) > 1:
            return {}  # heterogeneous stacks (alternating attention types) are traced whole
        counts: dict[str, int] = {}
        if cfg.model_type in ("t5", "mt5", "umt5") and hasattr(cfg, "num_decoder_layers"):
            counts = {"num_layers": cfg.num_layers, "num_decoder_layers": cfg.num_decoder_layers}
        elif cfg.model_type in _BART_LIKE and isinstance(getattr(cfg, "decoder_layers", None), int):
            # two stacks (num_hidden_layers is an alias of encoder_layers only): each traced at 3 and 2 blocks
            counts = {"encoder_layers": cfg.encoder_layers, "decoder_layers": cfg.decoder_layers}
        elif isinstance(getattr(cfg, "num_hidden_layers", None), int):
            counts = {"num_hidden_layers": cfg.num_hidden_layers}
        return counts

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        transformers = _require_transformers()
        cfg = self.hf_config(layers)
        attn = "eager" if workload.attention == "eager" else "sdpa"
        auto_cls = getattr(transformers, _TASK_AUTO_CLASS.get(self.task, "AutoModel"))
        import torch

        # from_config would build in the config's torch_dtype (bf16 for Llama 3): the workload's
        # precision decides the parameter dtype instead.
        dtype = getattr(torch, workload.param_dtype)
        try:
            try:
                model = auto_cls.from_config(cfg, attn_implementation=attn, dtype=dtype)
            except ValueError:  # architectures without SDPA support (Gemma 2 soft-capping) run eager
                model = auto_cls.from_config(cfg, attn_implementation="eager", dtype=dtype)
        except GpuplanError:
            raise
        except Exception as exc:  # from_config runs nothing but the config's values
            # the config passed validation but its values cannot make this architecture
            raise ModelSourceError(
                f"{self.name}: transformers cannot build {auto_cls.__name__} from this config: "
                f"{type(exc).__name__}: {one_line(exc, 240)} — check the config's sizes against the "
                "model's published config.json") from exc
        if self._config.get("tie_word_embeddings") is False:
            _untie_output_embeddings(model)
        return model  # type: ignore[no-any-return]

    def _trained_context(self) -> tuple[str, int] | None:
        """(config key, value) of the longest sequence the model was trained for, if the config says."""
        for key in _CONTEXT_KEYS:
            value = self._config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return key, value
        return None

    def default_seq_len(self) -> int:
        """Tokens per sample when --seq-len is not given: the model's context, at most DEFAULT_SEQ_LEN_CAP."""
        if self._default_seq_len:
            return min(self._default_seq_len, DEFAULT_SEQ_LEN_CAP)
        context = self._trained_context()
        if context is None:
            return 512
        return max(1, min(self._usable_positions(context[1]), DEFAULT_SEQ_LEN_CAP))

    def _usable_positions(self, trained: int) -> int:
        """Positions a sequence may use: RoBERTa-type tables keep their first rows for padding."""
        if self._config.get("model_type") in _PADDING_OFFSET_POSITIONS:
            pad = self._config.get("pad_token_id")
            return trained - ((pad if isinstance(pad, int) and pad >= 0 else 1) + 1)
        return trained

    def seq_len(self, workload: Workload) -> int:
        """Tokens per sample the step uses (the prompt, in generate): the workload's, else the default —
        shortened in generate so that the prompt and the new tokens stay inside the trained context
        (a default must never be what makes a run impossible)."""
        if workload.seq_len:
            return workload.seq_len
        default = self.default_seq_len()
        context = self._trained_context()
        if workload.mode == "generate" and context is not None:
            room = self._usable_positions(context[1]) - (workload.new_tokens - 1)
            default = max(1, min(default, room))
        return default

    def workload_notes(self, workload: Workload) -> tuple[str, ...]:
        notes = {"chunked-ce": chunked_loss.ASSUMPTION, "fused-linear-ce": chunked_loss.FUSED_ASSUMPTION}
        loss_notes = (notes[workload.loss],) if workload.loss in notes and workload.trains else ()
        return loss_notes + self._context_notes(workload)

    def _context_notes(self, workload: Workload) -> tuple[str, ...]:
        context = self._trained_context()
        if self.task == "image-classification" or context is None:
            return ()
        needed = positions_needed(workload, self.seq_len(workload))
        key, trained = context
        if needed <= trained:
            return ()
        # reached only when the trace runs: a learned position table is refused in inputs()
        return (f"{needed:,} positions exceed the {trained:,} this model was trained for ({key}); its "
                "positions are computed (no learned table), so the step runs as estimated, but quality "
                "past the trained context needs a long-context (e.g. RoPE-scaled) checkpoint",)

    def image_size(self, workload: Workload) -> int:
        if workload.image_size:
            return workload.image_size
        size = self._config.get("image_size", 224)
        if not isinstance(size, int) or isinstance(size, bool) or size <= 0:
            raise ModelSourceError(f"{self.name}: config field 'image_size' is {one_line(repr(size), 60)}, not one "
                                   "positive integer; give the image side with --image-size")
        return size

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        import torch

        b = workload.batch_size
        if self.task == "image-classification":
            if workload.loss in chunked_loss.HEAD_LOSSES:
                self._chunked_ce_inputs(module, torch.empty(0), workload.loss)  # refused: not a causal LM
            size = self.image_size(workload)
            channels = int(getattr(module.config, "num_channels", 3))
            pixels = torch.randn(b, channels, size, size)
            num_labels = getattr(module.config, "num_labels", 2)
            return Inputs(kwargs={"pixel_values": pixels, "labels": torch.randint(0, num_labels, (b,))})
        s = self.seq_len(workload)
        check_position_table(self.name, module, workload, s, self._trained_context())
        vocab = int(getattr(module.config, "vocab_size", 32000))
        ids = torch.randint(0, vocab, (b, s))
        dec = self.decoder_seq_len(module, workload, s)
        if workload.mode != "train":
            if self.task == "seq2seq-lm":  # the decoder needs its own ids: as long as training's labels
                return Inputs(kwargs={"input_ids": ids, "decoder_input_ids": torch.randint(0, vocab, (b, dec))})
            return Inputs(kwargs={"input_ids": ids})
        if workload.loss in chunked_loss.HEAD_LOSSES:
            return self._chunked_ce_inputs(module, ids, workload.loss)
        if self.task == "sequence-classification":
            num_labels = getattr(module.config, "num_labels", 2)
            return Inputs(kwargs={"input_ids": ids, "labels": torch.randint(0, num_labels, (b,))})
        if self.task == "token-classification":  # a per-token score (an RL value head): its loss is the mean
            return Inputs(kwargs={"input_ids": ids})
        if self.task == "seq2seq-lm":  # transformers shifts the labels right into the decoder's input ids
            return Inputs(kwargs={"input_ids": ids, "labels": torch.randint(0, vocab, (b, dec))})
        return Inputs(kwargs={"input_ids": ids, "labels": ids})

    def decoder_seq_len(self, module: nn.Module, workload: Workload, seq_len: int) -> int:
        """The decoder's tokens per sample of an encoder-decoder model: ``--decoder-seq-len``, else the encoder's
        ``seq_len``; refused for any other model, and beyond a learned decoder position table (BART)."""
        if workload.decoder_seq_len is None:
            return seq_len
        if self.task != "seq2seq-lm":
            raise ConfigError(f"--decoder-seq-len {workload.decoder_seq_len} applies to encoder-decoder models (T5, "
                              f"BART: a decoder of its own length); {self.name} is a {self.task} model — drop it")
        check_position_table(self.name, module, workload, workload.decoder_seq_len, self._trained_context())
        return workload.decoder_seq_len

    def _chunked_ce_inputs(self, module: nn.Module, ids: torch.Tensor, loss: str) -> Inputs:
        """torchtune's (and Liger's) inputs: the ids alone (the model computes no loss), shifted labels
        for the loss, and the LM head left to that loss (models/chunked_loss.py)."""
        if self.task != "causal-lm":
            whose = "torchtune's" if loss == "chunked-ce" else "Liger's"
            raise ConfigError(f"--loss {loss} is {whose} loss for causal language models; {self.name} is a "
                              f"{self.task} model — use --loss auto")
        chunked_loss.install(module, self.name, loss)
        return Inputs(kwargs={"input_ids": ids}, labels=chunked_loss.shifted_labels(ids))

    def loss(self, module: nn.Module, output: Any, inputs: Inputs, workload: Workload) -> torch.Tensor:
        if workload.loss == "chunked-ce":
            return chunked_loss.chunked_ce_loss(module, inputs.labels, self.name)
        if workload.loss == "fused-linear-ce":
            return chunked_loss.fused_linear_ce_loss(module, inputs.labels, self.name,
                                                     autocast=workload.autocast_dtype is not None)
        loss = getattr(output, "loss", None)
        if loss is not None:
            return loss  # type: ignore[no-any-return]
        return super().loss(module, output, inputs, workload)

    def describe(self) -> dict[str, Any]:
        out = {**super().describe(), "model_type": self._config.get("model_type")}
        if self._quantization is not None:
            out["quantization"] = self._quantization.describe()
        weights = self.stored_weights()
        if weights is not None:
            out["stored_weights"] = weights.describe()
        return out


_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "n_ctx", "max_seq_len")
"""Config keys that state the context a model was trained for, most specific first."""

_PADDING_OFFSET_POSITIONS = frozenset({
    "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "longformer", "data2vec-text", "xmod",
    "roberta-prelayernorm", "ibert", "luke", "mpnet"})
"""Architectures whose position ids start after ``pad_token_id`` (RoBERTa's scheme): a table of
514 rows holds 512 positions."""

_SIZE_KEYS = frozenset({
    "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "num_hidden_layers",
    "vocab_size", "head_dim", "n_embd", "n_head", "n_layer", "n_inner", "n_positions", "n_ctx", "d_model",
    "d_ff", "d_kv", "num_heads", "num_layers", "num_decoder_layers", "max_position_embeddings",
    "num_local_experts", "num_experts", "num_experts_per_tok", "moe_intermediate_size", "ffn_dim",
    "encoder_layers", "decoder_layers", "encoder_attention_heads", "decoder_attention_heads", "num_channels",
    "sliding_window"})
"""Config fields that are counts or sizes: a positive integer wherever they are given."""


def _untie_output_embeddings(model: Any) -> None:
    """Give the LM head its own weight when the config file says ``tie_word_embeddings: false``.

    transformers 5's T5Config forces tying (it reads the flag only to choose output scaling), but
    flan-t5 / T5 v1.1 checkpoints store a separate lm_head: 77M parameters for flan-t5-small, not
    60.5M. Untying in the config would also untie the encoder/decoder embeddings from ``shared``."""
    import torch
    from torch import nn

    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and embedding is not None and head.weight is embedding.weight:
        head.weight = nn.Parameter(torch.empty_like(head.weight))


def _validation_message(exc: Exception) -> str:
    """transformers' (huggingface_hub's strict dataclass) message, readable on one line: class
    reprs shortened to their names, the per-type detail after "Errors:" dropped."""
    text = re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", str(exc)).split(" Errors:", 1)[0]
    return one_line(text, 240)


_DENSE_PREFIX_TRACED = 2
"""Dense MLP layers kept before the MoE ones when a config is traced at reduced depth (trace/scaling.py traces 3
and 2 blocks, TRACED_BLOCKS = 3): one fewer than the deeper run, so the block the scaling repeats is a MoE one."""


def _check_sizes(name: str, config: Mapping[str, Any]) -> None:
    """Counts and sizes must be positive integers: transformers' own validation lets 0 and negative
    values through, which later fail deep inside a build or trace with no word about the field."""
    for key in sorted(_SIZE_KEYS & set(config)):
        value = config[key]
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            shown = one_line(repr(value), 60)
            raise ModelSourceError(f"{name}: config field {key!r} is {shown}; it must be a positive integer "
                                   "(compare with the model's published config.json)")


def positions_needed(workload: Workload, seq_len: int) -> int:
    """Position ids one sequence uses: the prompt and every fed-back token of a generation (the
    last new token is never fed back)."""
    return seq_len + (workload.new_tokens - 1 if workload.mode == "generate" else 0)


def learned_position_table(module: nn.Module) -> tuple[str, int] | None:
    """(module name, positions it holds) of the model's learned absolute-position table, if any.

    A table is an ``nn.Embedding`` named for positions (``wpe``, ``position_embeddings``,
    ``embed_positions``, ``pos_emb``); its usable rows exclude OPT/BART's ``offset`` and RoBERTa's padding rows.
    """
    from torch import nn

    for qualified, child in module.named_modules():
        leaf = qualified.rsplit(".", 1)[-1].lower()
        named_for_positions = leaf == "wpe" or "position" in leaf or (leaf.startswith("pos") and "emb" in leaf)
        if not isinstance(child, nn.Embedding) or not named_for_positions:
            continue
        rows = child.num_embeddings - int(getattr(child, "offset", 0) or 0)
        if child.padding_idx is not None and child.padding_idx >= 0:
            rows -= child.padding_idx + 1
        return qualified, rows
    return None


def check_position_table(name: str, module: nn.Module, workload: Workload, seq_len: int,
                         stated: tuple[str, int] | None = None) -> None:
    """Refuse a sequence longer than the model's learned position table: on a GPU it is an
    out-of-range index (a device-side assert), on fake tensors it would silently "fit".
    ``stated``: (config key, value) the config file gives for the table, quoted in the message."""
    table = learned_position_table(module)
    needed = positions_needed(workload, seq_len)
    if table is None or needed <= table[1]:
        return
    module_name, rows = table
    said = f" ({stated[0]} = {stated[1]:,})" if stated else ""
    longest = rows - (needed - seq_len)
    length = f"the default {seq_len:,}" if workload.seq_len is None else f"{seq_len:,}"
    what = (f"a prompt of {length} tokens + {workload.new_tokens:,} new tokens needs {needed:,} positions"
            if workload.mode == "generate" else f"sequence length {length} needs {needed:,} positions")
    fix = f"use --seq-len {longest:,} or less" if longest >= 1 else "use fewer --new-tokens"
    raise ConfigError(f"{name}: {what}, but its learned position table {module_name!r} holds {rows:,}{said}; "
                      f"the model cannot run longer sequences — {fix}")


# ---------------------------------------------------------------------------- torchvision ----

class TorchvisionSource(ModelSource):
    kind = "torchvision"
    task = "image-classification"

    def __init__(self, name: str) -> None:
        self.name = name

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        tv = _require_torchvision()
        return tv.models.get_model(self.name, weights=None)  # type: ignore[no-any-return]

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        import torch

        size = workload.image_size or (299 if self.name == "inception_v3" else 224)
        b = workload.batch_size
        num_classes = 1000
        return Inputs(args=(torch.randn(b, 3, size, size),), labels=torch.randint(0, num_classes, (b,)))

    def loss(self, module: nn.Module, output: Any, inputs: Inputs, workload: Workload) -> torch.Tensor:
        if hasattr(output, "logits"):  # inception_v3 / googlenet in train mode return a named tuple
            output = output.logits
        return default_loss(output, inputs, workload.loss)


def _require_torchvision() -> Any:
    try:
        import torchvision
    except ImportError as exc:
        from gpuplan.errors import MissingDependencyError
        from gpuplan.extras import TORCHVISION

        raise MissingDependencyError(TORCHVISION.message()) from exc
    return torchvision


def torchvision_names() -> list[str]:
    """Classification builders of torchvision.models (empty when torchvision is absent)."""
    try:
        import torchvision
    except ImportError:
        return []
    return sorted(torchvision.models.list_models(module=torchvision.models))


# ------------------------------------------------------------------------------- factories ----

@contextlib.contextmanager
def user_code(what: str, error: type[ModelSourceError | TraceError] = ModelSourceError) -> Iterator[None]:
    """Run the user's code (``what`` names it): its prints go to stderr, because stdout carries
    ``--json``; its ``sys.exit`` becomes a one-line ``error`` instead of setting gpuplan's exit code.
    (A KeyboardInterrupt is the person at the keyboard, and stays one.)"""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    except SystemExit as exc:
        raise error(f"{what} called sys.exit({one_line(repr(exc.code), 60)}); gpuplan needs it to return "
                    "— remove the exit (or guard it with `if __name__ == \"__main__\":`)") from None


def _guard_forward(model: nn.Module, what: str) -> None:
    """Run every forward of the user's model under :func:`user_code` (prints, exits)."""
    forward = model.forward

    @functools.wraps(forward)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        with user_code(what, TraceError):
            return forward(*args, **kwargs)

    model.forward = guarded  # type: ignore[method-assign]


class FactorySource(ModelSource):
    """The user's own module: ``file.py:factory`` or ``package.module:factory[,inputs_factory]``."""

    kind = "factory"

    def __init__(self, spec: str) -> None:
        self.name = spec
        target, _, names = spec.rpartition(":")
        factory_name, _, inputs_name = names.partition(",")
        self._target = target
        self._factory_name = factory_name.strip()
        self._inputs_name = inputs_name.strip() or None
        self._module_obj: Any = None

    def _load(self) -> Any:
        if self._module_obj is not None:
            return self._module_obj
        target = self._target
        if target.endswith(".py") or "/" in target or Path(target).exists():
            path = Path(target)
            if not path.is_file():
                raise ModelSourceError(f"factory file {target!r} does not exist; pass path/to/file.py:factory")
            spec = importlib.util.spec_from_file_location(f"gpuplan_user_{path.stem}", path)
            if spec is None or spec.loader is None:
                raise ModelSourceError(f"cannot import {target!r} as a Python file")
            mod = importlib.util.module_from_spec(spec)
            sys.modules[spec.name] = mod
            try:
                with user_code(f"importing {target}"):
                    spec.loader.exec_module(mod)
            except ModelSourceError:
                del sys.modules[spec.name]
                raise
            except Exception as exc:
                del sys.modules[spec.name]
                raise ModelSourceError(
                    f"importing {target} failed: {type(exc).__name__}: {one_line(exc)}") from exc
        else:
            try:
                with user_code(f"importing module {target}"):
                    mod = importlib.import_module(target)
            except ImportError as exc:
                raise ModelSourceError(f"cannot import module {target!r}: {one_line(exc)}") from exc
            except ModelSourceError:
                raise
            except Exception as exc:
                raise ModelSourceError(
                    f"importing module {target} failed: {type(exc).__name__}: {one_line(exc)}") from exc
        for attr in filter(None, (self._factory_name, self._inputs_name)):
            if not callable(getattr(mod, attr, None)):
                public = [n for n in dir(mod) if not n.startswith("_") and callable(getattr(mod, n))]
                raise ModelSourceError(f"{target} has no callable {attr!r}{did_you_mean(attr, public)}")
        self._module_obj = mod
        return mod

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        from torch import nn

        factory = getattr(self._load(), self._factory_name)
        what = f"factory {self._factory_name}() in {self._target}"
        try:
            with user_code(what):
                model = factory()
        except ModelSourceError:
            raise
        except Exception as exc:
            raise ModelSourceError(f"{what} raised {type(exc).__name__}: {one_line(exc)}") from exc
        if not isinstance(model, nn.Module):
            raise ModelSourceError(
                f"factory {self._factory_name}() returned {type(model).__name__}, not a torch.nn.Module")
        _guard_forward(model, f"the forward of {self.name}")
        return model

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        if self._inputs_name:
            return self._user_inputs(workload)
        return infer_inputs(module, workload, self.name)

    def _user_inputs(self, workload: Workload) -> Inputs:
        import torch

        fn: Callable[..., Any] = getattr(self._load(), str(self._inputs_name))
        params = inspect.signature(fn).parameters
        offered = {"batch_size": workload.batch_size, "seq_len": workload.seq_len, "image_size": workload.image_size}
        kwargs = {k: v for k, v in offered.items() if k in params and v is not None}
        what = f"inputs factory {self._inputs_name}() in {self._target}"
        try:
            with user_code(what):
                made = fn(**kwargs)
        except ModelSourceError:
            raise
        except Exception as exc:
            raise ModelSourceError(f"{what} raised {type(exc).__name__}: {one_line(exc)}") from exc
        if isinstance(made, torch.Tensor):
            return Inputs(args=(made,), labels=_labels_for(made))
        if isinstance(made, tuple):
            return Inputs(args=made, labels=_labels_for(made[0]) if made else None)
        if isinstance(made, dict):
            return Inputs(kwargs=made, labels=made.get("labels"))
        raise ModelSourceError(f"inputs factory {self._inputs_name}() returned {type(made).__name__}; "
                               "return a tensor, a tuple of tensors or a dict of forward keyword arguments")


def _labels_for(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor) and x.dtype in (torch.int64, torch.int32):
        return x  # token ids: next-token style targets of the same shape
    return None


DEFAULT_FACTORY_SEQ_LEN = 512
"""Tokens per sample for a user's model with a leading embedding when no --seq-len is given."""


def infer_inputs(module: nn.Module, workload: Workload, name: str) -> Inputs:
    """Token ids for a leading embedding, images for a leading convolution, vectors for a linear."""
    import torch
    from torch import nn

    b = workload.batch_size
    first = next((m for m in module.modules() if isinstance(m, (nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d,
                                                                  nn.Linear))), None)
    if isinstance(first, nn.Embedding):
        table = learned_position_table(module)
        # a length gpuplan picks itself never exceeds the model's position table
        room = table[1] - (positions_needed(workload, 1) - 1) if table else DEFAULT_FACTORY_SEQ_LEN
        s = workload.seq_len or max(1, min(DEFAULT_FACTORY_SEQ_LEN, room))
        check_position_table(name, module, workload, s)
        ids = torch.randint(0, first.num_embeddings, (b, s))
        return Inputs(args=(ids,), labels=ids)
    if isinstance(first, nn.Conv2d):
        size = workload.image_size or 224
        return Inputs(args=(torch.randn(b, first.in_channels, size, size),), labels=torch.randint(0, 10, (b,)))
    if isinstance(first, nn.Linear):
        x = torch.randn(b, first.in_features) if workload.seq_len is None else torch.randn(
            b, workload.seq_len, first.in_features)
        return Inputs(args=(x,), labels=None)
    raise ModelSourceError(
        f"cannot infer example inputs for {name}: its first layer is "
        f"{type(first).__name__ if first else 'absent'}; give an inputs factory as {name},make_inputs")


# ----------------------------------------------------------------------------- safetensors ----

class WeightsOnlySource(ModelSource):
    """A checkpoint known from its headers alone (no config.json beside it): its weights, no architecture.
    The tracer answers ``--mode infer`` as the memory of loading them (trace/step.py)."""

    summary: WeightsSummary

    def stored_weights(self) -> WeightsSummary | None:
        return self.summary

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        raise ModelSourceError(
            f"{self.name} has no config.json beside it, so only its weights are known "
            f"({self.summary.params_count:,} parameters); put the model's config.json next to it for a full estimate")

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:  # pragma: no cover - build() refuses
        raise ModelSourceError(f"{self.name}: no inputs without a config.json")


class SafetensorsSource(WeightsOnlySource):
    """Weights from safetensors headers; with a config.json beside them it behaves as that config."""

    kind = "safetensors"

    def __init__(self, path: Path) -> None:
        self.name = str(path)
        self.path = path
        self.summary = read_safetensors_headers(path)


class GGUFSource(WeightsOnlySource):
    """Weights from a GGUF header (llama.cpp's format): exact bytes per quantization type."""

    kind = "gguf"

    def __init__(self, path: Path, summary: WeightsSummary) -> None:
        self.name = str(path)
        self.path = path
        self.summary = summary

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "stored_weights": self.summary.describe()}


# --------------------------------------------------------------------------------- resolve ----

def _catalog_names() -> list[str]:
    from gpuplan.models.catalog import catalog_names

    return catalog_names()


def resolve_model(spec: str) -> ModelSource:
    """Turn the MODEL argument into a :class:`ModelSource`, or raise a one-line error."""
    if not spec or not spec.strip():
        raise UnknownModelError("empty MODEL: give a catalog name (e.g. gpt2), a config.json, or file.py:factory")
    spec = spec.strip()
    path = Path(spec)
    if not path.exists():
        from gpuplan.models.hub import hub_id_from_url

        spec = hub_id_from_url(spec) or spec
        if spec[:len(TIMM_PREFIX)].lower() == TIMM_PREFIX:  # TIMM:resnet50 is timm:resnet50, not a module
            spec = TIMM_PREFIX + spec[len(TIMM_PREFIX):]
        path = Path(spec)
    # Precedence, for input that could be read two ways: an existing path; timm:NAME; a factory
    # (the only form with ':'); a model file by its suffix; a Hub id ORG/NAME; a catalog name; torchvision.
    if (path.is_dir() and (path / "model_index.json").is_file()) or (path.name == "model_index.json"
                                                                      and path.is_file()):
        from gpuplan.models.pipeline import PipelineSource, read_pipeline_folder

        return PipelineSource(read_pipeline_folder(path if path.is_dir() else path.parent))
    if spec.startswith(TIMM_PREFIX) and not path.exists():
        from gpuplan.models.timm import TimmSource

        return TimmSource(spec)
    if ":" in spec and not path.exists() and not spec.startswith(("http:", "https:")):
        return FactorySource(spec)
    if path.suffix == ".gguf" or (path.is_dir() and not (path / "config.json").exists()
                                  and any(path.glob("*.gguf"))):
        if not path.exists():
            raise ModelSourceError(f"GGUF file {spec!r} does not exist")
        from gpuplan.models.gguf import read_gguf_header

        summary = read_gguf_header(path)
        config = (path if path.is_dir() else path.parent) / "config.json"
        if config.exists():
            return _config_source(config).with_stored_weights(summary)
        return GGUFSource(path, summary)
    if path.suffix == ".json" or (path.is_dir() and (path / "config.json").exists()):
        return _config_source(path / "config.json" if path.is_dir() else path)
    if path.suffix == ".safetensors" or (path.is_dir() and any(path.glob("*.safetensors"))):
        if not path.exists():
            raise ModelSourceError(f"safetensors file {spec!r} does not exist")
        config = (path if path.is_dir() else path.parent) / "config.json"
        if config.exists():
            return _config_source(config)
        return SafetensorsSource(path)
    if path.exists() and path.is_dir():
        raise ModelSourceError(f"folder {spec!r} holds neither config.json nor .safetensors or .gguf files")
    if path.suffix in (".json", ".safetensors", ".gguf", ".py"):
        raise ModelSourceError(f"file {spec!r} does not exist")
    from gpuplan.models.hub import cached_weights, is_hub_id, resolve_hub_id

    if spec.lower().startswith("timm/") and is_hub_id(spec) and "@" not in spec:
        from gpuplan.models.timm import TimmSource

        # timm publishes its models as timm/ARCH.TAG, with a config.json transformers cannot read
        return TimmSource(TIMM_PREFIX + spec.split("/", 1)[1])
    from gpuplan.models.pipeline import resolve_hub_pipeline

    pipeline = resolve_hub_pipeline(spec) if is_hub_id(spec) else None
    if pipeline is not None:  # a diffusers repo: model_index.json cached, or a shipped pipeline's Hub id
        return pipeline
    if is_hub_id(spec):  # the cached config first; the catalog entry of that id when nothing is cached
        try:
            found = resolve_hub_id(spec)
        except ModelSourceError:  # no config.json: a diffusers repo has a model_index.json instead
            pipeline = resolve_hub_pipeline(spec, download=True)
            if pipeline is None:
                raise
            return pipeline
        if found.catalog is not None:
            entry = found.catalog
            return HFConfigSource(entry.name, entry.config, task=entry.task, default_seq_len=entry.default_seq_len,
                                  kind="catalog")
        source = HFConfigSource(spec, found.config)
        snapshot = found.snapshot
        return source.with_stored_weights(lambda: cached_weights(snapshot)) if snapshot else source
    from gpuplan.models.catalog import get_catalog_model

    try:
        entry = get_catalog_model(spec)
    except UnknownModelError:
        entry = None
    if entry is not None:
        return HFConfigSource(entry.name, entry.config, task=entry.task, default_seq_len=entry.default_seq_len,
                              kind="catalog")
    from gpuplan.models.pipeline import catalog_pipeline, is_catalog_pipeline, pipeline_names

    if is_catalog_pipeline(spec):
        from gpuplan.models.pipeline import PipelineSource

        return PipelineSource(catalog_pipeline(spec))
    tv = torchvision_names()
    if spec in tv:
        return TorchvisionSource(spec)
    choices = _catalog_names() + list(pipeline_names()) + tv
    raise UnknownModelError(
        f"unknown model {spec!r}{did_you_mean(spec, choices)} (MODEL is a catalog name, a Hub id ORG/NAME, "
        "timm:NAME, a config.json, a .safetensors or .gguf file, or path/to/file.py:factory)")


def _config_source(path: Path) -> HFConfigSource:
    if not path.exists():
        raise ModelSourceError(f"config file {str(path)!r} does not exist")
    return HFConfigSource(str(path), read_config_json(path))


__all__ = [
    "TIMM_PREFIX", "FactorySource", "GGUFSource", "HFConfigSource", "Inputs", "ModelSource", "SafetensorsSource",
    "SafetensorsSummary", "TorchvisionSource", "WeightsOnlySource", "check_position_table", "default_loss",
    "infer_inputs", "learned_position_table", "positions_needed", "read_safetensors_headers", "resolve_model",
    "torchvision_names", "user_code",
]
