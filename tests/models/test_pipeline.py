"""Diffusion and video pipelines as a MODEL (models/pipeline.py): the shipped configs build the published
architectures, every form of MODEL resolves, and bad input is one line with exit code 2 before any trace."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from gpuplan.cli.main import main
from gpuplan.errors import ConfigError
from gpuplan.models.pipeline import (
    PipelineSource,
    _read_resource,
    build_component,
    catalog_pipeline,
    pipeline_names,
    shape_of,
)
from gpuplan.models.sources import resolve_model
from gpuplan.workload import Workload

TINY = Path(__file__).parent.parent / "fixtures" / "pipelines"
CATALOG = ("flux.1-dev", "flux.1-schnell", "sd3.5-large", "sd3.5-medium", "sdxl", "wan2.1-t2v-1.3b",
           "wan2.1-t2v-14b", "hunyuanvideo")


def test_catalog_holds_the_issue_pipelines() -> None:
    assert set(CATALOG) <= set(pipeline_names())
    for name in CATALOG:
        spec = catalog_pipeline(name)
        assert spec.family.denoiser in spec.names and "vae" in spec.names
        meta = _read_resource(name, "gpuplan.json")
        assert meta["hf_id"] and meta["source"].startswith("https://huggingface.co/")
        assert catalog_pipeline(meta["hf_id"]).name == name  # the Hub id of a shipped pipeline resolves to it


@pytest.mark.slow
@pytest.mark.parametrize("name", CATALOG)
def test_catalog_components_match_the_published_parameter_counts(name: str) -> None:
    """Each component built from its shipped config with its library's class (on the meta device: no memory)
    holds the parameters the model card / paper publishes, within the published figure's rounding."""
    import torch

    spec = catalog_pipeline(name)
    counts = {}
    for comp in spec.components:
        with torch.device("meta"):
            module = build_component(name, comp, {})
        counts[comp.name] = sum(p.numel() for p in module.parameters())
    published = _read_resource(name, "gpuplan.json")["published_params"]
    for key, row in published.items():
        built = counts["text_encoder"] + counts["text_encoder_2"] if key == "text_encoders" else counts[key]
        assert abs(built - row["params"]) <= row["tolerance"], (name, key, built, row)


def test_folder_and_model_index_resolve_to_the_pipeline() -> None:
    for spec in (str(TINY / "tiny-flux"), str(TINY / "tiny-flux" / "model_index.json")):
        source = resolve_model(spec)
        assert isinstance(source, PipelineSource)
        assert source.spec.pipeline_class == "FluxPipeline"
        assert source.layer_counts() == {"transformer.num_layers": 4, "transformer.num_single_layers": 4}


def test_hub_id_of_a_cached_diffusers_repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hub id whose model_index.json and component configs are in the HF cache (offline: the sandbox)."""
    import shutil

    snapshot = tmp_path / "models--acme--tiny-flux" / "snapshots" / ("0" * 40)
    shutil.copytree(TINY / "tiny-flux", snapshot)
    (tmp_path / "models--acme--tiny-flux" / "refs").mkdir()
    (tmp_path / "models--acme--tiny-flux" / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    source = resolve_model("acme/tiny-flux")
    assert isinstance(source, PipelineSource)
    assert set(source.spec.names) == {"text_encoder", "text_encoder_2", "transformer", "vae"}
    assert isinstance(resolve_model("black-forest-labs/FLUX.1-dev"), PipelineSource)  # shipped, nothing cached


def test_shapes_fill_in_the_pipeline_defaults() -> None:
    flux, wan = catalog_pipeline("flux.1-dev"), catalog_pipeline("wan2.1-t2v-1.3b")
    s = shape_of(flux, Workload(mode="infer"))
    assert (s.steps, s.height, s.width, s.frames) == (28, 1024, 1024, None)
    s = shape_of(wan, Workload(mode="infer", image_size=480, image_width=832))
    assert (s.steps, s.frames, s.latent_frames, s.latent_height, s.latent_width) == (50, 81, 21, 60, 104)
    assert PipelineSource(flux).op_repeats(Workload(mode="infer", steps=7)) == {"transformer": 7, "scheduler": 7}


@pytest.mark.parametrize(("model", "workload", "message"), [
    ("flux.1-dev", Workload(mode="infer", image_size=1000), "not a multiple of 16"),
    ("sdxl", Workload(mode="infer", image_size=1020), "not a multiple of 8"),
    ("wan2.1-t2v-1.3b", Workload(mode="infer", frames=80), "4·k + 1 frames; use 77 or 81"),
    ("flux.1-dev", Workload(mode="infer", frames=5), "--frames applies to video pipelines"),
    ("flux.1-dev", Workload(mode="infer", quantize_components=("text_encoder_9",)), "has no such component"),
    ("flux.1-dev", Workload(mode="generate"), "use --mode infer"),
    ("flux.1-dev", Workload(mode="train", offload="model"), "--offload none"),
])
def test_bad_pipeline_input_is_refused_before_any_trace(model: str, workload: Workload, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("+", r"\+").replace("(", r"\(")):
        PipelineSource(catalog_pipeline(model)).check_workload(workload)


@pytest.mark.parametrize("argv", [
    ["flux.1-dev", "--mode", "infer", "--image-size", "1000"],
    ["wan2.1-t2v-14b", "--mode", "infer", "--frames", "80"],
    ["flux.1-dev", "--mode", "infer", "--quantize-components", "unet", "--load-in-4bit"],
    ["flux.1-dev", "--mode", "infer", "--image-size", "1024x"],
    ["flux.1-dev", "--mode", "infer", "--offload", "disk"],
    ["flux.1-dev", "--mode", "infer", "--weight-quant", "int4"],
    ["gpt2", "--mode", "infer", "--weight-quant", "fp8-storage"],
    ["flux.1-dev", "--mode", "infer", "--gguf-type", "Q9_K"],
    ["flux.1-dev", "--mode", "infer", "--gguf-type", "Q8_0", "--quantize-components", "transformer,text_encoder_2"],
    ["flux.1-dev", "--mode", "infer", "--gguf-type", "Q8_0", "--load-in-4bit"],
    ["flux.1-dev", "--mode", "infer", "--seq-len", "600"],
    ["sdxl", "--mode", "infer", "--seq-len", "77"],
])
def test_cli_bad_input_is_one_line_exit_2(argv: list[str]) -> None:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["estimate", *argv, "--json"])
        except SystemExit as exc:  # argparse's own usage errors
            code = int(exc.code or 0)
    assert code == 2, err.getvalue()
    lines = [line for line in err.getvalue().splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err.getvalue(), err.getvalue()
    assert out.getvalue() == ""


def test_tiny_fixture_configs_are_json_objects() -> None:
    for folder in TINY.iterdir():
        assert isinstance(json.loads((folder / "model_index.json").read_text()), dict)
