"""timm models as a MODEL form: ``timm:convnext_tiny``, ``timm:resnet50``, ``timm:vit_base_patch16_224``.

Most published CNN / ViT tables are timm's, and vision users name models the way timm does. The model
is built with ``timm.create_model(name, pretrained=False)`` (no weights: nothing is downloaded, and the
tracer builds it on fake tensors), fed images of the model's own default input size (its
``pretrained_cfg.input_size``) unless ``--image-size`` says otherwise, and trained with cross entropy
against class labels, as timm's train.py does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuplan.errors import MissingDependencyError, UnknownModelError, did_you_mean
from gpuplan.extras import TIMM
from gpuplan.models.base import TIMM_PREFIX, Inputs, ModelSource
from gpuplan.workload import Workload

if TYPE_CHECKING:
    from torch import nn


def _require_timm() -> Any:
    try:
        import timm
    except ImportError as exc:
        raise MissingDependencyError(TIMM.message()) from exc
    return timm


def _fake_mode_active() -> bool:
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    return any(isinstance(mode, FakeTensorMode) for mode in _get_current_dispatch_mode_stack())


def _fake_storage(model: nn.Module) -> nn.Module:
    """``model`` (built on meta) with each parameter and buffer replaced by an empty tensor of the current
    (fake) mode; tied tensors stay tied."""
    import torch
    from torch import nn

    made: dict[int, torch.Tensor] = {}
    for module in model.modules():
        for store, is_param in ((module._parameters, True), (module._buffers, False)):
            for key, tensor in list(store.items()):
                if tensor is None:
                    continue
                if id(tensor) not in made:
                    empty = torch.empty(tensor.shape, dtype=tensor.dtype)
                    made[id(tensor)] = nn.Parameter(empty, requires_grad=tensor.requires_grad) if is_param else empty
                store[key] = made[id(tensor)]  # type: ignore[assignment]
    return model


class TimmSource(ModelSource):
    """A timm architecture (``timm:NAME`` or ``timm:NAME.TAG``), built without weights."""

    kind = "timm"
    task = "image-classification"

    def __init__(self, spec: str) -> None:
        name = spec[len(TIMM_PREFIX):].strip() if spec.startswith(TIMM_PREFIX) else spec.strip()
        timm = _require_timm()
        arch = name.split(".", 1)[0]
        if not name or not timm.is_model(arch):
            names = timm.list_models()
            raise UnknownModelError(
                f"unknown timm model {name!r}{did_you_mean(arch, names)} ({len(names):,} are known: "
                f"`python -c \"import timm; print(timm.list_models('{arch[:4]}*'))\"` lists them)")
        self.name = f"{TIMM_PREFIX}{name}"
        self.model_name = name
        self._cfg = timm.models.get_pretrained_cfg(name) or timm.models.get_pretrained_cfg(arch)

    def _default_size(self) -> tuple[int, int, int]:
        """(channels, height, width) the model's pretrained config says it takes; 3×224×224 without one."""
        size = getattr(self._cfg, "input_size", None)
        if isinstance(size, tuple) and len(size) == 3 and all(isinstance(v, int) and v > 0 for v in size):
            return size[0], size[1], size[2]
        return 3, 224, 224

    def _fixed_size(self) -> bool:
        """True for models built for one input size (ViTs' position tables): a new size is built in."""
        return bool(getattr(self._cfg, "fixed_input_size", False))

    def image_hw(self, workload: Workload) -> tuple[int, int]:
        _, h, w = self._default_size()
        return (workload.image_size, workload.image_size) if workload.image_size else (h, w)

    def build(self, workload: Workload, layers: Mapping[str, int] | None = None) -> nn.Module:
        timm = _require_timm()
        kwargs: dict[str, Any] = {}
        if workload.image_size and self._fixed_size() and self.image_hw(workload) != self._default_size()[1:]:
            kwargs["img_size"] = workload.image_size  # what fine-tuning at another resolution builds
        if not _fake_mode_active():
            return timm.create_model(self.model_name, pretrained=False, **kwargs)  # type: ignore[no-any-return]
        import torch
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        # timm computes schedules while it builds (stochastic-depth rates: linspace(...).item()), which
        # fake tensors cannot answer: build on the meta device outside the fake mode, then give the
        # model fake storage of the same shapes and dtypes
        with unset_fake_temporarily(), torch.device("meta"):
            model = timm.create_model(self.model_name, pretrained=False, **kwargs)
        return _fake_storage(model)

    def inputs(self, module: nn.Module, workload: Workload) -> Inputs:
        import torch

        channels = self._default_size()[0]
        h, w = self.image_hw(workload)
        b = workload.batch_size
        classes = int(getattr(module, "num_classes", 0) or 1000)
        return Inputs(args=(torch.randn(b, channels, h, w),), labels=torch.randint(0, classes, (b,)))

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "input_size": list(self._default_size())}


__all__ = ["TIMM_PREFIX", "TimmSource"]
