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

import importlib
import importlib.util
import inspect
import json
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError, ModelSourceError, UnknownModelError, did_you_mean
from gpuplan.workload import Workload

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass(slots=True)
class Inputs:
    """What one forward receives, and the targets the loss compares with."""

    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    labels: Any = None
    """Targets for a loss gpuplan computes itself (None when the model computes its own loss)."""

    def tensors(self) -> list[torch.Tensor]:
        import torch

        found = [a for a in self.args if isinstance(a, torch.Tensor)]
        found += [v for v in self.kwargs.values() if isinstance(v, torch.Tensor)]
        if isinstance(self.labels, torch.Tensor):
            found.append(self.labels)
        return found


class ModelSource(ABC):
    """A model gpuplan can build on fake tensors and run one step of."""

    name: str
    kind: str
    task: str = "custom"
    """causal-lm | masked-lm | seq2seq-lm | image-classification | sequence-classification | custom."""

    def layer_counts(self) -> dict[str, int]:
        """Repeated-block counts of the full model by config key; empty: not scalable."""
        return {}

    @abstractmethod
    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        """The module, built on the current default device; ``layers`` overrides block counts."""

    @abstractmethod
    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        """Example inputs for one micro-batch of ``workload``."""

    def loss(self, module: nn.Module, output: Any, inputs: Inputs, workload: Workload) -> torch.Tensor:
        """The training loss: cross entropy where the output shape allows it, else the mean."""
        return default_loss(output, inputs, workload.loss)

    @property
    def generates(self) -> bool:
        return self.task == "causal-lm"

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "task": self.task}


def default_loss(output: Any, inputs: Inputs, choice: str = "auto") -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    out = _first_tensor(output)
    if out is None:
        raise ModelSourceError("the model's forward returned no tensor; gpuplan cannot form a loss from it")
    labels = inputs.labels
    if choice in ("auto", "cross-entropy") and isinstance(labels, torch.Tensor) and out.is_floating_point():
        if out.dim() == labels.dim() + 1 and out.shape[:-1] == labels.shape:
            return F.cross_entropy(out.reshape(-1, out.shape[-1]), labels.reshape(-1))
    if choice == "cross-entropy":
        raise ConfigError(f"--loss cross-entropy needs an output of shape (..., classes) matching the labels; "
                          f"got output {tuple(out.shape)}; use --loss mean")
    return out.float().mean() if out.is_floating_point() else out.sum().float()


def _first_tensor(output: Any) -> torch.Tensor | None:
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if hasattr(output, "logits") and isinstance(output.logits, torch.Tensor):
        return output.logits  # type: ignore[no-any-return]
    if isinstance(output, Mapping):
        output = list(output.values())
    if isinstance(output, (tuple, list)):
        for item in output:
            found = _first_tensor(item)
            if found is not None:
                return found
    return None


# --------------------------------------------------------------------------- Hugging Face ----

_TASK_AUTO_CLASS = {
    "causal-lm": "AutoModelForCausalLM",
    "masked-lm": "AutoModelForMaskedLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
    "image-classification": "AutoModelForImageClassification",
    "sequence-classification": "AutoModelForSequenceClassification",
}

_ARCH_SUFFIX_TASK = (
    ("ForCausalLM", "causal-lm"),
    ("LMHeadModel", "causal-lm"),
    ("ForConditionalGeneration", "seq2seq-lm"),
    ("ForMaskedLM", "masked-lm"),
    ("ForPreTraining", "masked-lm"),
    ("ForImageClassification", "image-classification"),
    ("ForSequenceClassification", "sequence-classification"),
)


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        from gpuplan.errors import MissingDependencyError

        raise MissingDependencyError(
            "this model needs the 'transformers' package: pip install 'gpuplan[torch]'") from exc
    return transformers


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

    def _infer_task(self) -> str:
        for arch in self._config.get("architectures") or []:
            for suffix, task in _ARCH_SUFFIX_TASK:
                if arch.endswith(suffix):
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
        if model_type is None:
            raise ModelSourceError(f"{self.name}: config has no 'model_type'; it is not a transformers config.json")
        for key in ("transformers_version", "_name_or_path", "auto_map"):
            cfg.pop(key, None)
        if layers:
            cfg.update(layers)
            if isinstance(cfg.get("layer_types"), list):
                n = next(iter(layers.values()))
                cfg["layer_types"] = cfg["layer_types"][:1] * n
        try:
            return transformers.AutoConfig.for_model(model_type, **cfg)
        except (ValueError, KeyError, TypeError) as exc:
            raise ModelSourceError(f"{self.name}: transformers cannot build model_type {model_type!r}: {exc}") from exc

    def layer_counts(self) -> dict[str, int]:
        cfg = self.hf_config()
        types = getattr(cfg, "layer_types", None)
        if isinstance(types, list) and len(set(types)) > 1:
            return {}  # heterogeneous stacks (alternating attention types) are traced whole
        counts: dict[str, int] = {}
        if cfg.model_type in ("t5", "mt5", "umt5") and hasattr(cfg, "num_decoder_layers"):
            counts = {"num_layers": cfg.num_layers, "num_decoder_layers": cfg.num_decoder_layers}
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
            model = auto_cls.from_config(cfg, attn_implementation=attn, dtype=dtype)
        except ValueError:  # architectures without SDPA support (Gemma 2 soft-capping) run eager
            model = auto_cls.from_config(cfg, attn_implementation="eager", dtype=dtype)
        return model  # type: ignore[no-any-return]

    def default_seq_len(self) -> int:
        if self._default_seq_len:
            return self._default_seq_len
        cfg = self._config
        for key in ("max_position_embeddings", "n_positions", "n_ctx"):
            if isinstance(cfg.get(key), int):
                return min(int(cfg[key]), 2048)
        return 512

    def image_size(self, workload: Workload) -> int:
        return workload.image_size or int(self._config.get("image_size", 224))

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        import torch

        b = workload.batch_size
        if self.task == "image-classification":
            size = self.image_size(workload)
            channels = int(self._config.get("num_channels", 3))
            pixels = torch.randn(b, channels, size, size)
            num_labels = getattr(module.config, "num_labels", 2)
            return Inputs(kwargs={"pixel_values": pixels, "labels": torch.randint(0, num_labels, (b,))})
        s = workload.seq_len or self.default_seq_len()
        vocab = int(getattr(module.config, "vocab_size", 32000))
        ids = torch.randint(0, vocab, (b, s))
        if workload.mode != "train":
            return Inputs(kwargs={"input_ids": ids})
        if self.task == "sequence-classification":
            num_labels = getattr(module.config, "num_labels", 2)
            return Inputs(kwargs={"input_ids": ids, "labels": torch.randint(0, num_labels, (b,))})
        if self.task == "seq2seq-lm":
            return Inputs(kwargs={"input_ids": ids, "labels": torch.randint(0, vocab, (b, s))})
        return Inputs(kwargs={"input_ids": ids, "labels": ids})

    def loss(self, module: nn.Module, output: Any, inputs: Inputs, workload: Workload) -> torch.Tensor:
        loss = getattr(output, "loss", None)
        if loss is not None:
            return loss  # type: ignore[no-any-return]
        return super().loss(module, output, inputs, workload)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "model_type": self._config.get("model_type")}


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

        raise MissingDependencyError("torchvision models need torchvision: pip install 'gpuplan[vision]'") from exc
    return torchvision


def torchvision_names() -> list[str]:
    """Classification builders of torchvision.models (empty when torchvision is absent)."""
    try:
        import torchvision
    except ImportError:
        return []
    return sorted(torchvision.models.list_models(module=torchvision.models))


# ------------------------------------------------------------------------------- factories ----

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
                spec.loader.exec_module(mod)
            except Exception as exc:
                raise ModelSourceError(f"importing {target} failed: {type(exc).__name__}: {exc}") from exc
        else:
            try:
                mod = importlib.import_module(target)
            except ImportError as exc:
                raise ModelSourceError(f"cannot import module {target!r}: {exc}") from exc
        for attr in filter(None, (self._factory_name, self._inputs_name)):
            if not callable(getattr(mod, attr, None)):
                public = [n for n in dir(mod) if not n.startswith("_") and callable(getattr(mod, n))]
                raise ModelSourceError(f"{target} has no callable {attr!r}{did_you_mean(attr, public)}")
        self._module_obj = mod
        return mod

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        from torch import nn

        factory = getattr(self._load(), self._factory_name)
        try:
            model = factory()
        except Exception as exc:
            raise ModelSourceError(
                f"factory {self._factory_name}() in {self._target} raised {type(exc).__name__}: {exc}") from exc
        if not isinstance(model, nn.Module):
            raise ModelSourceError(
                f"factory {self._factory_name}() returned {type(model).__name__}, not a torch.nn.Module")
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
        try:
            made = fn(**kwargs)
        except Exception as exc:
            raise ModelSourceError(f"inputs factory {self._inputs_name}() raised {type(exc).__name__}: {exc}") from exc
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


def infer_inputs(module: nn.Module, workload: Workload, name: str) -> Inputs:
    """Token ids for a leading embedding, images for a leading convolution, vectors for a linear."""
    import torch
    from torch import nn

    b = workload.batch_size
    first = next((m for m in module.modules() if isinstance(m, (nn.Embedding, nn.Conv1d, nn.Conv2d, nn.Conv3d,
                                                                  nn.Linear))), None)
    if isinstance(first, nn.Embedding):
        s = workload.seq_len or 512
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

@dataclass(frozen=True, slots=True)
class SafetensorsSummary:
    """Parameter count and bytes from safetensors headers alone (no tensor is read)."""

    files: tuple[str, ...]
    params_count: int
    weight_bytes: int
    dtypes: dict[str, int]
    """dtype -> parameter count."""
    tensor_bytes: tuple[int, ...] = ()
    """Bytes of each stored tensor, in file order (what loading them allocates, one by one)."""


_ST_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                   "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1, "U16": 2, "U32": 4, "U64": 8, "F8_E8M0": 1, "F4": 1}


def read_safetensors_headers(path: Path) -> SafetensorsSummary:
    files = sorted(path.glob("*.safetensors")) if path.is_dir() else [path]
    if not files:
        raise ModelSourceError(f"{path} holds no .safetensors files")
    count = 0
    nbytes = 0
    dtypes: dict[str, int] = {}
    sizes: list[int] = []
    for f in files:
        try:
            with f.open("rb") as fh:
                header_len = int.from_bytes(fh.read(8), "little")
                if not 0 < header_len < 100_000_000:
                    raise ValueError(f"header length {header_len}")
                header = json.loads(fh.read(header_len))
        except (OSError, ValueError, UnicodeDecodeError) as exc:
            raise ModelSourceError(f"{f} is not a readable safetensors file ({exc})") from exc
        if not isinstance(header, dict):
            raise ModelSourceError(f"{f} is not a readable safetensors file (header is not a JSON object)")
        for key, meta in header.items():
            if key == "__metadata__":
                continue
            if not (isinstance(meta, dict) and {"shape", "data_offsets", "dtype"} <= set(meta)):
                raise ModelSourceError(f"{f}: tensor {key!r} has no shape/dtype/data_offsets in its header")
            numel = 1
            for d in meta["shape"]:
                numel *= int(d)
            count += numel
            start, end = meta["data_offsets"]
            nbytes += int(end) - int(start)
            sizes.append(int(end) - int(start))
            dtypes[meta["dtype"]] = dtypes.get(meta["dtype"], 0) + numel
    return SafetensorsSummary(tuple(str(f) for f in files), count, nbytes, dtypes, tuple(sizes))


class SafetensorsSource(ModelSource):
    """Weights from headers; with a config.json beside them it behaves as that config."""

    kind = "safetensors"

    def __init__(self, path: Path) -> None:
        self.name = str(path)
        self.path = path
        self.summary = read_safetensors_headers(path)

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        raise ModelSourceError(
            f"{self.name} has no config.json beside it, so only its weights are known "
            f"({self.summary.params_count:,} parameters); put the model's config.json next to it for a full estimate")

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:  # pragma: no cover - build() refuses
        raise ModelSourceError(f"{self.name}: no inputs without a config.json")


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
    if ":" in spec and not path.exists() and not spec.startswith(("http:", "https:")):
        return FactorySource(spec)
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
        raise ModelSourceError(f"folder {spec!r} holds neither config.json nor .safetensors files")
    if path.suffix in (".json", ".safetensors", ".py"):
        raise ModelSourceError(f"file {spec!r} does not exist")
    from gpuplan.models.catalog import get_catalog_model

    try:
        entry = get_catalog_model(spec)
    except UnknownModelError:
        entry = None
    if entry is not None:
        return HFConfigSource(entry.name, entry.config, task=entry.task, default_seq_len=entry.default_seq_len,
                              kind="catalog")
    tv = torchvision_names()
    if spec in tv:
        return TorchvisionSource(spec)
    choices = _catalog_names() + tv
    raise UnknownModelError(
        f"unknown model {spec!r}{did_you_mean(spec, choices)} "
        "(MODEL is a catalog name, a config.json, a .safetensors file, or path/to/file.py:factory)")


def _config_source(path: Path) -> HFConfigSource:
    if not path.exists():
        raise ModelSourceError(f"config file {str(path)!r} does not exist")
    try:
        config = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelSourceError(f"{path} is not valid JSON ({exc}); pass a Hugging Face config.json") from exc
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelSourceError(f"{path} has no 'model_type'; pass a Hugging Face config.json")
    return HFConfigSource(str(path), config)
