"""Diffusion pipelines through serve, recommend and fit (issue 21 item 4), end to end on the tiny FLUX of
tests/fixtures (2 + 2 transformer blocks: traced whole, one trace per workload).

Every figure is checked against ``gpuplan estimate``'s for the same settings (one rule: the verbs read the
estimate, they never time or size on their own), and each new flag value runs through the CLI."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli.main import main

PIPELINES = Path(__file__).parent.parent / "fixtures" / "pipelines"
SIZE = ["--image-size", "64", "--precision", "bf16"]


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def run_json(*argv: str) -> dict[str, Any]:
    code, out, err = run(*argv, "--json")
    assert code == 0, f"gpuplan {' '.join(argv)}: exit {code}: {err[-800:]}"
    result = json.loads(out)
    assert isinstance(result, dict)
    return result


@pytest.fixture(scope="module")
def tiny_flux(tmp_path_factory: pytest.TempPathFactory) -> str:
    import shutil

    folder = tmp_path_factory.mktemp("pipes") / "tiny-flux"
    shutil.copytree(PIPELINES / "tiny-flux", folder)
    config = folder / "transformer" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "num_layers": 2, "num_single_layers": 2}))
    return str(folder)


@pytest.fixture(scope="module")
def gpt2_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    from tests.fixtures.tiny_models import TINY_GPT2_LM

    path = tmp_path_factory.mktemp("models") / "tiny-gpt2.json"
    path.write_text(json.dumps(TINY_GPT2_LM))
    return str(path)


@pytest.fixture(scope="module")
def prices(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("prices") / "prices.yaml"
    path.write_text("H100-SXM: 2.5\n")
    return str(path)


@pytest.fixture(scope="module")
def served(tiny_flux: str, prices: str) -> dict[str, Any]:
    return run_json("serve", tiny_flux, "--gpu", "H100-SXM", *SIZE, "--steps", "4", "--prices", prices)


# ------------------------------------------------------------------------------------------ serve ----


@pytest.mark.slow
def test_serve_reads_the_estimate_per_image(tiny_flux: str, served: dict[str, Any]) -> None:
    est = run_json("estimate", tiny_flux, "--mode", "infer", "--gpu", "H100-SXM", *SIZE, "--steps", "4")
    assert served["kind"] == "pipeline" and served["unit"] == "image" and served["fits"] is True
    assert served["generation_s"] == est["step_time_s"] == served["estimate"]["step_time_s"]
    assert served["estimate"]["peak_reserved_bytes"] == est["peak_reserved_bytes"]
    per = served["seconds_per_output"]
    assert per == est["step_time_s"]  # one image per generation
    assert served["outputs_per_hour"] == pytest.approx(3600 / per)
    assert served["usd_per_1000_outputs"] == pytest.approx(2.5 / served["outputs_per_hour"] * 1000)
    low, high = served["seconds_per_output_interval_s"]
    assert low <= per <= high and served["generation_interval_s"] == est["step_time_interval_s"]
    lo_rate, hi_rate = served["outputs_per_hour_interval"]
    assert lo_rate == pytest.approx(3600 / high) and hi_rate == pytest.approx(3600 / low)


@pytest.mark.slow
def test_serve_text_has_the_components_and_phases(tiny_flux: str, prices: str) -> None:
    code, out, _ = run("serve", tiny_flux, "--gpu", "H100-SXM", *SIZE, "--steps", "4", "--prices", prices)
    assert code == 0
    assert "per image (80%:" in out and "images per hour" in out and "per 1,000 images at $2.50/hour" in out
    for word in ("component", "text_encoder_2", "transformer", "vae", "encode:text_encoder", "denoise", "vae_decode"):
        assert word in out


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "check"),
    [
        (
            ["--batch-size", "2"],
            lambda r: (
                r["outputs_per_generation"] == 2 and r["seconds_per_output"] == pytest.approx(r["generation_s"] / 2)
            ),
        ),
        (
            ["--image-size", "64x128"],
            lambda r: (r["estimate"]["pipeline"]["height"], r["estimate"]["pipeline"]["width"]) == (64, 128),
        ),
        (["--precision", "fp16"], lambda r: r["estimate"]["workload"]["precision"] == "fp16"),
        (["--steps", "2"], lambda r: r["estimate"]["pipeline"]["steps"] == 2),
        (["--offload", "none"], lambda r: r["estimate"]["host_memory_bytes"] == 0),
        (
            ["--offload", "model"],
            lambda r: r["estimate"]["pipeline"]["offload"] == "model" and r["estimate"]["host_memory_bytes"] > 0,
        ),
        (["--offload", "group"], lambda r: r["estimate"]["pipeline"]["offload"] == "group"),
        (
            ["--offload", "sequential"],
            lambda r: (
                r["estimate"]["pipeline"]["offload"] == "sequential"
                and r["estimate"]["pipeline"]["offload_transfer_s"] > 0
            ),
        ),
        (["--vae-tiling"], lambda r: r["estimate"]["workload"]["vae_tiling"] is True),
        (["--vae-slicing"], lambda r: r["estimate"]["workload"]["vae_slicing"] is True),
        (["--quantization", "none"], lambda r: r["estimate"]["workload"]["component_quant"] == "none"),
        (["--quantization", "int8"], lambda r: r["estimate"]["workload"]["component_quant"] == "int8"),
        (
            ["--quantization", "fp8", "--quantize-components", "transformer,vae"],
            lambda r: (
                r["estimate"]["workload"]["component_quant"] == "fp8-storage"
                and r["estimate"]["workload"]["quantize_components"] == ["transformer", "vae"]
            ),
        ),
        (["--quantization", "int4"], lambda r: r["estimate"]["workload"]["load_in"] == "4bit"),
    ],
)
def test_serve_pipeline_flag(tiny_flux: str, served: dict[str, Any], flags: list[str], check: Any) -> None:
    result = run_json("serve", tiny_flux, "--gpu", "H100-SXM", *SIZE, "--steps", "4", *flags)
    assert check(result)
    if "--offload" in flags or ("--quantization" in flags and "none" not in flags):
        # offload and quantization lower the GPU's share, never raise it
        assert result["estimate"]["tensor_peak_bytes"] <= served["estimate"]["tensor_peak_bytes"]


@pytest.mark.slow
def test_serve_pipeline_picture_and_report(tiny_flux: str, tmp_path: Path) -> None:
    """--plot draws the generation's memory (the estimate's picture), --html adds the components and phases."""
    picture, report = tmp_path / "serve.svg", tmp_path / "serve.html"
    code, _, err = run(
        "serve", tiny_flux, "--gpu", "H100-SXM", *SIZE, "--steps", "4", "--plot", str(picture), "--html", str(report)
    )
    assert code == 0, err
    assert picture.read_text().lstrip().startswith(("<?xml", "<svg"))
    html = report.read_text()
    assert "Pipeline components" in html and "Peak live tensors by phase" in html and "vae_decode" in html


@pytest.mark.slow
def test_serve_video_frames() -> None:
    result = run_json(
        "serve",
        str(PIPELINES / "tiny-wan"),
        "--gpu",
        "H100-SXM",
        "--image-size",
        "32",
        "--frames",
        "9",
        "--steps",
        "2",
        "--precision",
        "bf16",
    )
    assert result["unit"] == "video" and result["estimate"]["pipeline"]["frames"] == 9


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["serve", "{flux}", "--gpu", "H100-SXM", "--image-size", "70"], ["height 70 is not a multiple of 16"]),
        (["serve", "{flux}", "--gpu", "H100-SXM", "--frames", "9"], ["--frames applies to video pipelines"]),
        (["serve", "{wan}", "--gpu", "H100-SXM", "--frames", "8"], ["--frames 8", "4·k + 1"]),
        (
            ["serve", "{flux}", "--gpu", "H100-SXM", "--quantization", "int8", "--quantize-components", "unet"],
            ["--quantize-components unet", "no such component"],
        ),
        (["serve", "{flux}", "--gpu", "H100-SXM", "--context", "1024"], ["--context is a language-model engine flag"]),
        (["serve", "{flux}", "--gpu", "H100-SXM", "--tp", "2"], ["--tp is a language-model engine flag"]),
        (["serve", "{gpt2}", "--gpu", "H100-SXM", "--steps", "4"], ["--steps applies to diffusion pipelines"]),
        (
            ["recommend", "{flux}", "--mode", "serve"],
            ["recommend --mode serve` does not model pipelines", "--mode infer"],
        ),
        (["recommend", "{flux}", "--mode", "infer", "--image-size", "72"], ["height 72 is not a multiple of 16"]),
        (["fit", "{flux}", "--gpu", "A10", "--mode", "infer", "--image-size", "40"], ["not a multiple of 16"]),
        (["fit", "{flux}", "--gpu", "A10", "--axis", "resolution", "--image-size", "64"], ["drop --image-size"]),
        (["fit", "{wan}", "--gpu", "A10", "--axis", "resolution", "--frames", "10"], ["--frames 10", "4·k + 1"]),
        (
            ["fit", "{flux}", "--gpu", "A10", "--axis", "resolution", "--target-batch-size", "4"],
            ["--target-batch-size applies to --axis batch"],
        ),
        (
            ["fit", "{gpt2}", "--gpu", "A10", "--axis", "resolution"],
            ["--axis resolution applies to diffusion pipelines"],
        ),
        (["fit", "{flux}", "--gpu", "A10", "--axis", "seq-len"], ["fit --axis seq-len` does not model pipelines"]),
    ],
)
def test_bad_pipeline_input_is_one_line(tiny_flux: str, gpt2_config: str, argv: list[str], words: list[str]) -> None:
    names = {"flux": tiny_flux, "wan": str(PIPELINES / "tiny-wan"), "gpt2": gpt2_config}
    code, out, err = run(*(a.format(**names) for a in argv))
    assert code == 2 and out == "" and "Traceback" not in err and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


# -------------------------------------------------------------------------------------- recommend ----


@pytest.mark.slow
def test_recommend_ranks_gpus_for_a_pipeline(tiny_flux: str, served: dict[str, Any]) -> None:
    result = run_json("recommend", tiny_flux, "--mode", "infer", *SIZE, "--steps", "4")
    best = {c["gpu"]: c for c in result["recommendations"]}
    h100 = best["H100-SXM"]
    assert h100["pipeline"] == {"offload": "none", "quantization": "none", "host_memory_bytes": 0}
    assert h100["step_time_s"] == served["generation_s"]  # estimate's time, read once
    assert h100["per_gpu_bytes"] == served["estimate"]["min_required_bytes"]
    assert h100["step_time_interval_s"] == served["generation_interval_s"]
    out = {c["gpu"]: c["reason"] for c in result["excluded"]}
    assert "bfloat16" in out["T4"]  # excluded with the reason


@pytest.mark.slow
def test_recommend_climbs_the_offload_ladder(tiny_flux: str) -> None:
    """A GPU sized between what --offload none and --offload model need gets the model rung, with estimate's
    memory for that rung; one smaller than --offload sequential needs with int4 weights is excluded."""
    from gpuplan.advise.recommend import recommend
    from gpuplan.estimate import estimate
    from gpuplan.hardware import get_gpu
    from gpuplan.workload import Workload

    w = Workload(mode="infer", image_size=64, precision="bf16", steps=4)
    h100 = get_gpu("H100-SXM")
    need = {m: estimate(tiny_flux, workload=w.with_(offload=m), gpu=h100).min_required_bytes for m in ("none", "model")}
    assert need["model"] < need["none"]
    size = (need["none"] + need["model"]) // 2
    mid = dataclasses.replace(h100, id="H100-mid", memory_total_bytes=size, cuda_total_memory_bytes=size)
    small = dataclasses.replace(h100, id="H100-tiny", memory_total_bytes=2**20, cuda_total_memory_bytes=2**20)
    rec = recommend(tiny_flux, w, gpus=[mid, small])
    [fits] = rec.candidates_in
    assert fits.gpu.id == "H100-mid" and fits.pipeline is not None and fits.pipeline["offload"] == "model"
    assert fits.per_gpu_bytes == need["model"]
    [out] = rec.candidates_out
    assert out.gpu.id == "H100-tiny" and "--offload sequential --quantization int4" in out.reason


# -------------------------------------------------------------------------------------------- fit ----


@pytest.mark.slow
def test_fit_resolution_axis(tiny_flux: str, tmp_path: Path) -> None:
    argv = ["fit", tiny_flux, "--gpu", "A10", "--mode", "infer", "--axis", "resolution", "--steps", "4",
            "--batch-size", "8", "--precision", "bf16"]  # fmt: skip
    picture, report = tmp_path / "fit.svg", tmp_path / "fit.html"
    result = run_json(*argv, "--plot", str(picture), "--html", str(report))
    assert picture.read_text().lstrip().startswith(("<?xml", "<svg")) and "Largest image size" in report.read_text()
    code, text, _ = run(*argv)  # the same traces again (the session's trace cache): the text answer
    assert code == 0 and f"largest image that fits: {result['max_image_size']:,}×" in text
    side = result["max_image_size"]
    assert result["axis"] == "resolution" and side % 16 == 0 and side > 64
    assert result["max_image_size_point"]["fits"] and not result["max_image_size_plus_step"]["fits"]
    assert result["max_image_size_plus_step"]["image_size"] == side + 16
    # the confirming points are estimate's answers at those sizes
    est = run_json(
        "estimate",
        tiny_flux,
        "--mode",
        "infer",
        "--gpu",
        "A10",
        "--image-size",
        str(side),
        "--steps",
        "4",
        "--batch-size",
        "8",
        "--precision",
        "bf16",
    )
    assert est["fits"] and est["min_required_bytes"] == result["max_image_size_point"]["min_required_bytes"]


@pytest.mark.slow
def test_fit_batch_of_a_pipeline_with_offload_rungs(tiny_flux: str) -> None:
    """fit --target-batch-size on a GPU where the batch fits only with offloading: the ladder's offload rungs."""
    from gpuplan.advise.fit import fit
    from gpuplan.estimate import estimate
    from gpuplan.hardware import get_gpu
    from gpuplan.workload import Workload

    w = Workload(mode="infer", image_size=64, precision="bf16", steps=4, batch_size=2)
    h100 = get_gpu("H100-SXM")
    need = {m: estimate(tiny_flux, workload=w.with_(offload=m), gpu=h100).min_required_bytes for m in ("none", "model")}
    size = (need["none"] + need["model"]) // 2
    mid = dataclasses.replace(h100, id="H100-mid", memory_total_bytes=size, cuda_total_memory_bytes=size)
    result = fit(tiny_flux, mid, w.with_(batch_size=1), target_batch_size=2)
    names = [t.name for t in result.techniques]
    assert names == ["as-given", "offload-model"] and result.target_fits
    assert result.techniques[-1].point.min_required_bytes == need["model"]


@pytest.mark.slow
def test_fit_batch_axis_trains_a_pipeline(tiny_flux: str) -> None:
    result = run_json(
        "fit",
        tiny_flux,
        "--gpu",
        "A10",
        "--mode",
        "train",
        "--image-size",
        "64",
        "--precision",
        "bf16",
        "--peft",
        "lora",
    )
    assert result["max_batch_size"] >= 1 and result["max_batch"]["fits"]
    assert not result["max_batch_plus_one"]["fits"] or result["max_batch_size"] >= 32768


# --------------------------------------------------------------------------------------------- ui ----


@pytest.mark.slow
def test_web_page_takes_a_pipeline(served: dict[str, Any]) -> None:
    from gpuplan.models.pipeline import PipelineSource
    from gpuplan.ui.jobs import Outcome, _source
    from gpuplan.ui.page import render_result
    from gpuplan.ui.query import parse_query

    query = parse_query(
        {
            "verb": "serve",
            "model": "flux.1-dev",
            "gpu": "H100-SXM",
            "image_size": "512",
            "steps": "4",
            "offload": "model",
        },
        ("flux.1-dev",),
    )
    assert query is not None and query.pipeline
    assert (query.workload.mode, query.workload.image_size, query.workload.steps, query.workload.offload) == (
        "infer",
        512,
        4,
        "model",
    )
    assert isinstance(_source(query, None), PipelineSource)
    html = render_result(query, Outcome(data=served))
    assert "per image" in html and "Pipeline components" in html and "text_encoder_2" in html
