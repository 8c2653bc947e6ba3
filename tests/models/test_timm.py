"""timm models as a MODEL form (issue 10): ``timm:NAME`` built without weights on fake tensors, fed the
model's own default input size, trained with cross entropy against class labels."""

from __future__ import annotations

import contextlib
import io

import pytest
import timm
import torch

from gpuplan.cli.main import main
from gpuplan.errors import UnknownModelError
from gpuplan.models.sources import resolve_model
from gpuplan.models.timm import TimmSource
from gpuplan.trace.step import trace_step
from gpuplan.workload import Workload


def _params_on_meta(source: TimmSource, workload: Workload) -> int:
    with torch.device("meta"):
        return sum(p.numel() for p in source.build(workload).parameters())


@pytest.mark.parametrize(("name", "published"), [
    # torchvision's weights table, ResNet50_Weights.IMAGENET1K_V1: num_params 25,557,032 (timm's resnet50 is
    # the same architecture: its model card says 25.6 M)
    ("resnet50", 25_557_032),
    # timm model cards (huggingface.co/timm/...): "Params (M): 86.6" and "Params (M): 28.6"
    ("vit_base_patch16_224", 86.6),
    ("convnext_tiny", 28.6),
])
def test_parameter_counts_match_the_published_ones(name: str, published: float) -> None:
    count = _params_on_meta(TimmSource(f"timm:{name}"), Workload())
    if isinstance(published, int):
        assert count == published
    else:  # published to 0.1 M
        assert round(count / 1e6, 1) == published


def test_default_input_size_comes_from_the_pretrained_config_and_image_size_overrides_it() -> None:
    source = resolve_model("timm:test_vit")  # timm's pretrained_cfg for test_vit: input_size (3, 160, 160)
    assert isinstance(source, TimmSource) and source.describe()["input_size"] == [3, 160, 160]
    plain, resized = Workload(batch_size=2), Workload(batch_size=2, image_size=96)
    with torch.device("meta"):
        model = source.build(plain)
        assert source.inputs(model, plain).args[0].shape == (2, 3, 160, 160)
        small = source.build(resized)  # a ViT's position table is built for the size asked (img_size=96)
        assert source.inputs(small, resized).args[0].shape == (2, 3, 96, 96)
    patches = (96 // 16) ** 2
    assert small.pos_embed.shape[1] == patches + small.num_prefix_tokens


@pytest.mark.slow
def test_fake_trace_equals_a_real_cpu_run_tensor_by_tensor() -> None:
    """Exact accounting: the same training step run for real on the CPU (every storage tracked) and traced
    on fake tensors with host semantics give the same live bytes; tolerance 0."""
    workload = Workload(batch_size=2, image_size=64)
    source = TimmSource("timm:test_vit")
    fake = trace_step(source, workload, cuda=False)
    real = trace_step(source, workload, cuda=False, fake=False)
    assert fake.params_count == real.params_count == _params_on_meta(source, workload)
    assert fake.tensor_peak_bytes == real.tensor_peak_bytes
    assert fake.tensor_components == real.tensor_components
    assert fake.tensor_components["activations"] > 0 and fake.tensor_components["optimizer_state"] > 0


def test_timm_hub_ids_are_timm_models() -> None:
    # timm's own Hub repos (huggingface.co/timm/resnet50.a1_in1k) hold a timm config, not a transformers one
    source = resolve_model("timm/resnet50.a1_in1k")
    assert isinstance(source, TimmSource) and source.name == "timm:resnet50.a1_in1k"
    assert _params_on_meta(source, Workload()) == 25_557_032
    # the page URL people paste names the same timm model, and the prefix is not case-sensitive
    # (TIMM:resnet50 was read as a Python module TIMM)
    for spec in ("https://huggingface.co/timm/resnet50.a1_in1k", "TIMM:resnet50.a1_in1k", "Timm:resnet50.a1_in1k"):
        again = resolve_model(spec)
        assert isinstance(again, TimmSource) and again.name == "timm:resnet50.a1_in1k", spec


def test_unknown_names_get_close_matches_in_one_line() -> None:
    with pytest.raises(UnknownModelError, match="did you mean convnext_tiny") as info:
        resolve_model("timm:convnext_tiyn")
    assert "\n" not in str(info.value) and "timm.list_models('conv*')" in str(info.value)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", "timm:resnet5O", "--json"])
    assert code == 2 and out.getvalue() == "" and err.getvalue().count("\n") == 1
    assert "resnet50" in err.getvalue()
    assert timm.is_model("resnet50")  # the name the hint offers is one timm builds
