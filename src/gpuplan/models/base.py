"""What every model source is: the :class:`ModelSource` interface, its :class:`Inputs`, and the default loss.

The interface lives below the sources themselves (models/sources.py, models/timm.py) and the Hub
resolution (models/hub.py), so that each of them imports it without importing the others.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.errors import ConfigError, ModelSourceError
from gpuplan.models.files import WeightsSummary
from gpuplan.models.quant_config import QuantizationConfig
from gpuplan.workload import Workload

if TYPE_CHECKING:
    import torch
    from torch import nn

TIMM_PREFIX = "timm:"
"""MODEL prefix naming a timm architecture (models/timm.py); checked before ``package.module:factory``."""


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

    def block_paths(self) -> dict[str, str]:
        """Module path of the repeated blocks each ``layer_counts`` key counts, when the source knows it
        (empty: the tracer finds them by their count)."""
        return {}

    def op_repeats(self, workload: Workload) -> dict[str, int]:
        """Module path prefix -> how many times the real program runs the traced ops under it (a diffusion
        pipeline's denoiser: once per step); empty: every op runs once."""
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

    def quantization(self) -> QuantizationConfig | None:
        """How the checkpoint's weights are quantized (config.json ``quantization_config``), if they are."""
        return None

    def stored_weights(self) -> WeightsSummary | None:
        """The checkpoint's stored tensors as their headers give them (safetensors / GGUF), when known:
        exact weight bytes of a quantized file, for the stand-in quantized layers."""
        return None

    def workload_notes(self, workload: Workload) -> tuple[str, ...]:
        """What an estimate of ``workload`` on this model should say about the model (e.g. a
        sequence longer than the context it was trained for)."""
        return ()


def refuse_pipeline(source: ModelSource, verb: str,
                    instead: str = "use `gpuplan estimate` (with --offload / --quantize-components / --gpu)") -> None:
    """A diffusion pipeline is answered by ``estimate``, ``fit``, ``recommend`` and ``serve`` (models/pipeline.py);
    the verbs (or forms of them) that do not model one say so in one line, with what to use ``instead``."""
    if source.kind == "pipeline":
        raise ConfigError(f"{source.name} is a diffusion pipeline: `gpuplan {verb}` does not model pipelines; "
                          + instead)


def default_loss(output: Any, inputs: Inputs, choice: str = "auto") -> torch.Tensor:
    import torch
    import torch.nn.functional as F

    out = _first_tensor(output)
    if out is None:
        raise ModelSourceError("the model's forward returned no tensor; gpuplan cannot form a loss from it")
    if choice in ("chunked-ce", "fused-linear-ce"):  # models/chunked_loss.py needs a transformers causal LM's head
        raise ConfigError(f"--loss {choice} is a loss for transformers causal language models (it projects their LM "
                          "head); use --loss auto for this model")
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


__all__ = ["TIMM_PREFIX", "Inputs", "ModelSource", "default_loss", "refuse_pipeline"]
