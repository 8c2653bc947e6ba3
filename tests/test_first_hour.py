"""A new user's first hour (issue 18): each item's regression test is named after it.

item 1: `recommend` never dies because one catalog GPU has no documented rate (training and serving);
item 2: a missing optional package is one line naming `pip install 'gpuplan[EXTRA]'`, before any work;
item 3: a Hub id with no network is one line naming `hf download`; `@main` is the default revision;
item 4: the defaults are what people run (precision by GPU, a stated sequence length, printed);
item 5: fit's JSON and picture say what its text says (CPU offload answers; the same vendor's GPU);
item 8: one word per term, units up to PiB, "1 layout", messages that fit the value, no file named '-'.
Plus issue 19's DeBERTa per-sample figure (fit reports the cost of one more sample where the answer is).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import pytest

import gpuplan.estimate
from gpuplan.advise.fit import Point, _largest_gpu_and_need, _per_step_bytes, fit
from gpuplan.advise.recommend import recommend
from gpuplan.cli.main import main
from gpuplan.errors import ConfigError
from gpuplan.hardware import GPU, get_gpu
from gpuplan.units import GIB, KIB, format_bytes
from gpuplan.workload import MAX_BATCH_SIZE, Workload, default_precision
from tests.advise.conftest import AffineStep, shrunk

TINY_GPT2_CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 64, "n_layer": 2,
                    "n_head": 4, "vocab_size": 300, "n_positions": 128}


def _no_rates(gpu_id: str, new_id: str) -> GPU:
    """A catalog GPU whose compute rates are unknown (as the A10G's were: NVIDIA publishes no datasheet)."""
    rates = {f.name: None for f in dataclasses.fields(GPU) if f.name.endswith("_tflops")}
    return dataclasses.replace(get_gpu(gpu_id), id=new_id, **rates)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def _one_line(err: str, *needles: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def tiny_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY_GPT2_CONFIG))
    return path


# ---- item 1 -------------------------------------------------------------------------------------

def test_item1_recommend_ranks_what_can_be_timed_and_lists_the_rest(tiny_config: Path) -> None:
    untimed = _no_rates("A10", "NO-RATES")
    small_untimed = shrunk("A10", 100, "NO-RATES-SMALL")  # too small alone: only sharding could fit it
    small_untimed = dataclasses.replace(small_untimed, **{f.name: None for f in dataclasses.fields(GPU)
                                                          if f.name.endswith("_tflops")})
    r = recommend(str(tiny_config), Workload(mode="train", seq_len=32, precision="amp-bf16"), max_gpus=2,
                  gpus=[get_gpu("A100-80GB-SXM"), untimed, small_untimed])
    assert r.ok and [c.gpu.id for c in r.candidates_in] == ["A100-80GB-SXM"]
    assert [c.gpu.id for c in r.untimed] == ["NO-RATES"]
    assert "no documented" in r.untimed[0].reason and r.untimed[0].per_gpu_bytes > 0
    out = {c.gpu.id: c.reason for c in r.candidates_out}
    assert "NO-RATES-SMALL" in out and "no documented" in out["NO-RATES-SMALL"]
    data = r.to_dict()
    assert [c["gpu"] for c in data["untimed"]] == ["NO-RATES"] and data["untimed"][0]["timed"] is False
    assert "fit but not ranked" in str(r) and "NO-RATES" in str(r)


def test_item1_every_catalog_gpu_in_recommend_training(tiny_config: Path) -> None:
    """Every catalog GPU is ranked, listed as untimed or excluded with a reason: none sinks the ranking."""
    from gpuplan.hardware import all_gpus

    r = recommend(str(tiny_config), Workload(mode="train", seq_len=32, precision="amp-bf16"), max_gpus=1)
    listed = [c.gpu.id for c in (*r.candidates_in, *r.untimed, *r.candidates_out)]
    assert sorted(listed) == sorted(g.id for g in all_gpus() if not g.is_mig)
    assert all(c.reason for c in (*r.untimed, *r.candidates_out))


@pytest.mark.slow
def test_item1_every_catalog_gpu_in_recommend_serving(tiny_config: Path) -> None:
    from gpuplan.advise.recommend import recommend_serve
    from gpuplan.hardware import all_gpus

    catalog = [*all_gpus(), _no_rates("A10", "NO-RATES")]
    r = recommend_serve(str(tiny_config), context=64, concurrency=1, max_gpus=1, gpus=catalog)
    listed = [c.gpu.id for c in (*r.candidates_in, *r.candidates_out)]
    assert sorted(listed) == sorted(g.id for g in catalog if not g.is_mig)
    assert r.candidates_in and all(c.reason for c in r.candidates_out)


# ---- item 2 -------------------------------------------------------------------------------------

def _never_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError("traced before the missing package was named")

    monkeypatch.setattr("gpuplan.trace.step._trace_source", refuse)


@pytest.mark.parametrize("verb", [
    ["estimate", "gpt2"],
    ["fit", "gpt2", "--gpu", "RTX-4090"],
    ["plan", "gpt2", "--gpus", "2", "--gpu", "A100-80GB-SXM"],
    ["recommend", "gpt2"],
    ["measure", "gpt2"],
])
@pytest.mark.parametrize(("module", "flags", "extra"), [
    ("peft", ["--peft", "lora"], "finetune"),
    ("peft", ["--peft", "qlora", "--precision", "bf16"], "finetune"),
    ("torchao", ["--precision", "fp8"], "finetune"),
])
def test_item2_missing_extra_is_named_before_any_work(
    verb: list[str], module: str, flags: list[str], extra: str, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # import fails, find_spec finds nothing
    _never_trace(monkeypatch)
    code, out, err = _run([*verb, *flags, "--seq-len", "64"], capsys)
    assert code == 2 and out == ""
    _one_line(err, f"'{module}'", f"pip install 'gpuplan[{extra}]'")


@pytest.mark.parametrize("verb", [
    ["estimate", "gpt2", "--gpu", "RTX-4090"],
    ["fit", "gpt2", "--gpu", "RTX-4090"],
    ["plan", "gpt2", "--gpus", "2", "--gpu", "A100-80GB-SXM"],
    ["recommend", "gpt2"],
    ["serve", "gpt2", "--gpu", "RTX-4090"],
])
@pytest.mark.parametrize("flag", ["--plot", "--html"])
def test_item2_pictures_without_plot_extra(verb: list[str], flag: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    _never_trace(monkeypatch)
    target = tmp_path / ("out.svg" if flag == "--plot" else "out.html")
    code, _, err = _run([*verb, flag, str(target)], capsys)
    assert code == 2 and not target.exists()
    _one_line(err, "pip install 'gpuplan[plot]'")


@pytest.mark.parametrize(("module", "argv", "extra"), [
    ("huggingface_hub", ["estimate", "acme/not-cached-model"], "hub"),
    ("gguf", ["estimate", "model.gguf"], "hub"),
    ("timm", ["estimate", "timm:resnet18"], "vision"),
    ("starlette", ["ui", "--port", "0"], "ui"),
])
def test_item2_model_forms_and_ui_without_their_extra(module: str, argv: list[str], extra: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    if module == "gguf":
        (tmp_path / "model.gguf").write_bytes(b"GGUF" + b"\0" * 64)
    monkeypatch.setitem(sys.modules, module, None)
    _never_trace(monkeypatch)
    code, _, err = _run(argv, capsys)
    assert code == 2
    _one_line(err, f"pip install 'gpuplan[{extra}]'")


def test_item2_readme_names_the_extra_of_each_feature() -> None:
    from gpuplan.extras import EXTRA_OF

    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    for extra in sorted(set(EXTRA_OF.values())):
        assert f"gpuplan[{extra}]" in readme, extra


# ---- item 3 -------------------------------------------------------------------------------------

def test_item3_hub_id_without_network_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    # nothing listens on port 9 of this machine: the connection is refused at once, as with no network
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setattr(hub_constants, "HUGGINGFACE_CO_URL_TEMPLATE",
                        "http://127.0.0.1:9/{repo_id}/resolve/{revision}/{filename}")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", False)
    code, out, err = _run(["estimate", "Qwen/Qwen2.5-Coder-7B-Instruct"], capsys)
    assert code == 2 and out == ""
    _one_line(err, "Qwen/Qwen2.5-Coder-7B-Instruct", "cannot be reached",
              "`hf download Qwen/Qwen2.5-Coder-7B-Instruct config.json`")


def test_item3_offline_hint_names_hf_download(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = _run(["estimate", "acme/not-cached@v2"], capsys)
    assert code == 2
    line = _one_line(err, "`hf download acme/not-cached config.json --revision v2`")
    assert "huggingface-cli" not in line


def test_item3_main_is_the_default_revision() -> None:
    from gpuplan.models.hub import resolve_hub_id

    hub = resolve_hub_id("Qwen/Qwen3-8B@main")  # offline, not cached: the built-in entry, as without @main
    assert hub.catalog is not None and hub.catalog.name == "qwen3-8b"


# ---- item 4 -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("gpu", "mode", "expected"), [
    ("RTX-4090", "train", "amp-bf16"), ("H100-SXM", "infer", "bf16"), ("A100-80GB-SXM", "generate", "bf16"),
    ("T4", "train", "amp-fp16"), ("V100-SXM2-32GB", "infer", "fp16"), ("GTX-1080-Ti", "train", "fp32"),
])
def test_item4_default_precision_is_what_people_run_on_the_gpu(gpu: str, mode: str, expected: str) -> None:
    assert default_precision(mode, get_gpu(gpu).half_precision) == expected


def test_item4_every_catalog_gpu_has_a_default_precision() -> None:
    from gpuplan.hardware import all_gpus

    for g in all_gpus():
        assert default_precision("train", g.half_precision) in ("amp-bf16", "amp-fp16", "fp32"), g.id


def test_item4_default_seq_len_is_capped_and_stated() -> None:
    from gpuplan.estimate import with_stated_seq_len
    from gpuplan.models.sources import DEFAULT_SEQ_LEN_CAP, resolve_model

    qwen = resolve_model("qwen2.5-0.5b")  # the catalog's context is 8,192 (32K trained)
    assert with_stated_seq_len(qwen, Workload()).seq_len == DEFAULT_SEQ_LEN_CAP == 2048
    assert with_stated_seq_len(resolve_model("bert-large-uncased"), Workload()).seq_len == 512  # its table
    assert with_stated_seq_len(qwen, Workload(seq_len=100)).seq_len == 100


def test_item4_defaults_printed_in_header_and_json(tiny_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _run(["estimate", str(tiny_config), "--gpu", "T4", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["workload"]["seq_len"] == 128 and data["workload"]["precision"] == "amp-fp16"
    code, out, _ = _run(["estimate", str(tiny_config), "--gpu", "RTX-4090"], capsys)
    header = out.splitlines()[0]
    assert "seq 128" in header and "amp-bf16" in header and "attention" in header, header


# ---- item 5 -------------------------------------------------------------------------------------

class _OffloadOnly(AffineStep):
    """A step that fits only with its optimizer state off the GPU (the T4 llama-3.2-1b case of issue 18)."""

    def need_bytes(self, w: Workload) -> int:
        state = 0 if w.optimizer == "none" else 4 * self.gpu.usable_memory_bytes
        return self.gpu.usable_memory_bytes // 2 + state + w.batch_size * self.per_sample_bytes


def test_item5_fit_json_and_picture_agree_with_a_cpu_offload_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpuplan.report.plot import fit_headline

    stub = _OffloadOnly(get_gpu("T4"))
    monkeypatch.setattr(gpuplan.estimate, "estimate", stub)
    r = fit("gpt2", "T4", Workload(mode="train", precision="amp-fp16", checkpointing="full"))
    data = r.to_dict()
    assert r.max_batch_size == 0 and r.techniques[-1].name == "cpu-offload" and r.target_fits
    assert r.ok and r.reason is None and data["fits"] is True and data["reason"] is None
    assert data["answer"]["technique"] == "cpu-offload" and data["answer"]["fits"] is True
    assert data["largest_gpu"] is None and "None" not in str(r) and "0 B" not in str(r)
    assert data["bytes_per_sample"] is None  # one trace at batch 1: no slope measured (was printed as 0)
    assert fit_headline(data) == "batch 1 fits with cpu offload"


def test_item5_largest_gpu_for_a_mig_slice_is_the_same_vendor() -> None:
    from gpuplan.hardware import resolve_gpu

    mig = resolve_gpu("A100-40GB-PCIe:3g.20gb")
    assert mig is not None and mig.is_mig
    largest, _ = _largest_gpu_and_need([], None, mig)
    big = get_gpu(largest)
    assert big.vendor_key == "nvidia" and not big.is_mig


# ---- issue 19: DeBERTa per-sample figure ----------------------------------------------------------

def _pt(batch: int, tensor: int, need: int, fits: bool) -> Point:
    return Point(Workload(batch_size=batch), need, tensor, fits, None, None, tensor, need)


def test_issue19_per_sample_bytes_is_measured_where_the_answer_is() -> None:
    """DeBERTa-v2-xlarge, TITAN RTX: at batch 1 and 2 the peak is the optimizer step (~1 KiB apart); the
    confirming traces at 24 and 25 differ by the real cost of a sample, which is what the text prints."""
    per = int(0.65 * GIB)
    known = {1: _pt(1, 20 * GIB, 21 * GIB, True), 2: _pt(2, 20 * GIB + KIB, 21 * GIB, True),
             24: _pt(24, 22 * GIB, 23 * GIB, True), 25: _pt(25, 22 * GIB + per, 23 * GIB + per, False)}
    assert _per_step_bytes(known, 24, 25, KIB) == per
    assert _per_step_bytes({1: known[1], 2: known[2]}, 2, None, KIB) == KIB  # nothing better traced


def test_issue19_fit_per_sample_matches_its_own_table(monkeypatch: pytest.MonkeyPatch) -> None:
    stub = AffineStep(get_gpu("L4"), b1=40)
    monkeypatch.setattr(gpuplan.estimate, "estimate", stub)
    r = fit("gpt2", "L4", Workload(mode="train", precision="amp-bf16", optimizer="sgd", checkpointing="full"))
    assert r.max_point is not None and r.over_point is not None
    assert r.bytes_per_sample == r.over_point.tensor_peak_bytes - r.max_point.tensor_peak_bytes


# ---- item 8 -------------------------------------------------------------------------------------

def test_item8_one_name_for_allocator_slack() -> None:
    from gpuplan.report.labels import label

    assert label("allocator_overhead") == label("allocator_slack") == "allocator slack"
    assert label("kv_cache_bytes") == "KV cache" and label("optimizer_state") == "optimizer state"
    src = Path(gpuplan.estimate.__file__).parent
    for path in [*src.glob("report/*.py"), *src.glob("ui/*.py")]:
        assert "allocator overhead" not in path.read_text(encoding="utf-8").lower(), path


def test_item8_pib_formatting() -> None:
    assert format_bytes(1661405.46 * GIB) == "1.58 PiB"
    assert format_bytes(3 * 1024 * GIB) == "3.00 TiB"
    assert format_bytes(3 * GIB) == "3.00 GiB"


def test_item8_too_large_batch_message_fits_the_value() -> None:
    with pytest.raises(ConfigError) as too_large:
        Workload(batch_size=MAX_BATCH_SIZE + 1)
    assert "at least 1" not in str(too_large.value) and f"{MAX_BATCH_SIZE:,}" in str(too_large.value)
    with pytest.raises(ConfigError, match="at least 1"):
        Workload(batch_size=0)


def test_item8_html_dash_is_refused_not_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    _never_trace(monkeypatch)
    code, out, err = _run(["estimate", "gpt2", "--html", "-"], capsys)
    assert code == 2 and out == "" and not (tmp_path / "-").exists()
    _one_line(err, "--html -", "file name")
