"""Every advertised value of every workload flag and every MODEL form, end to end on tiny models.

Each case runs ``gpuplan estimate ... --json`` in-process and checks that the answer reflects the option
(the workload echo, and the memory component the option is about), not only that it exits 0. Expected
byte counts are exact accounting on the tiny GPT-2 of tests/fixtures (P parameters, counted by building
the model): fp32 weights 4·P bytes, AdamW two fp32 moments 8·P, SGD momentum 4·P.

About 45 traces of a tiny model: the sweep is slow-tier; the fast tier keeps one flag (--mode), a
user factory and the weights-only checkpoint.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli.main import main
from gpuplan.workload import (
    ATTENTIONS,
    CHECKPOINTING,
    LOSSES,
    MODES,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PEFTS,
    PRECISIONS,
    ZERO_GRADS,
)
from tests.fixtures import tiny_models
from tests.fixtures.tiny_models import TINY_GPT2

# batch 4 x 16 tokens (+ 8 generated): small enough for a fast trace, large enough that activations,
# checkpointing and the KV cache are visible next to the weights
SHAPE = ["--batch-size", "4", "--seq-len", "16", "--new-tokens", "8"]
FIXTURES_FILE = Path(tiny_models.__file__).resolve()


def estimate_json(*argv: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", *argv, "--json"])
    assert code == 0, f"gpuplan estimate {' '.join(argv)}: exit {code}: {err.getvalue()[-1000:]}"
    result = json.loads(out.getvalue())
    assert isinstance(result, dict)
    return result


def _count_parameters(module: Any) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tiny-gpt2")
    (folder / "config.json").write_text(json.dumps(TINY_GPT2))
    return folder / "config.json"


@pytest.fixture(scope="module")
def tiny_model() -> Any:
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(**TINY_GPT2))


@pytest.fixture(scope="module")
def tiny_params(tiny_model: Any) -> int:
    return _count_parameters(tiny_model)


@pytest.fixture(scope="module")
def baseline(tiny: Path) -> dict[str, Any]:
    """The defaults (train, fp32, AdamW, no checkpointing), for options that change one component."""
    return estimate_json(str(tiny), *SHAPE)


# ----------------------------------------------------------------------------- workload flags ----


@pytest.mark.parametrize("mode", MODES)
def test_mode(mode: str, tiny: Path, tiny_params: int) -> None:
    result = estimate_json(str(tiny), *SHAPE, "--mode", mode)
    c = result["components"]
    assert result["workload"]["mode"] == mode
    if mode == "train":
        assert c["optimizer_state"] == 8 * tiny_params
    else:
        assert c["gradients"] == 0 and c["optimizer_state"] == 0
    assert (c["kv_cache"] > 0) == (mode == "generate")


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.slow
def test_precision(precision: str, tiny: Path, tiny_params: int) -> None:
    result = estimate_json(str(tiny), *SHAPE, "--precision", precision)
    assert result["workload"]["precision"] == precision
    # AMP and TF32 keep fp32 master weights; pure bf16/fp16 hold 2-byte weights
    # fp8 / mxfp8 / nvfp4: scaled GEMMs on bf16 weights (torchao's float8 program)
    bytes_per_weight = 2 if precision in ("bf16", "fp16", "fp8", "mxfp8", "nvfp4") else 4
    assert result["components"]["parameters"] == bytes_per_weight * tiny_params


@pytest.mark.parametrize("optimizer", OPTIMIZERS)
@pytest.mark.slow
def test_optimizer(optimizer: str, tiny: Path, tiny_params: int) -> None:
    result = estimate_json(str(tiny), *SHAPE, "--optimizer", optimizer)
    state = result["components"]["optimizer_state"]
    assert result["workload"]["optimizer"] == optimizer
    exact = {"adamw": 8 * tiny_params, "adam": 8 * tiny_params, "sgd": 0, "sgd-momentum": 4 * tiny_params, "none": 0,
             "paged-adamw": 8 * tiny_params}
    if optimizer in exact:
        assert state == exact[optimizer]
    elif optimizer in ("adamw-8bit", "paged-adamw-8bit"):  # two 1-byte moments + block scales (32-bit: tiny tensors)
        assert 2 * tiny_params <= state < 8 * tiny_params
    else:  # adafactor: factored second moments, rows + columns instead of a full matrix
        assert 0 < state < 4 * tiny_params


@pytest.mark.parametrize("checkpointing", CHECKPOINTING)
@pytest.mark.slow
def test_checkpointing(checkpointing: str, tiny: Path, baseline: dict[str, Any]) -> None:
    result = estimate_json(str(tiny), *SHAPE, "--checkpointing", checkpointing)
    assert result["workload"]["checkpointing"] == checkpointing
    kept, without = result["components"]["activations"], baseline["components"]["activations"]
    assert kept == without if checkpointing == "none" else kept < without


@pytest.mark.parametrize("attention", ATTENTIONS)
@pytest.mark.slow
def test_attention(attention: str, tiny: Path) -> None:
    # AMP bf16: every backend CUDA has (flash included) can run
    result = estimate_json(str(tiny), *SHAPE, "--precision", "amp-bf16", "--attention", attention)
    assert result["workload"]["attention"] == attention
    backends = set(result["attention_backends"])
    if attention == "eager":
        assert not backends  # the model's own matmul + softmax, no fused kernel
    elif attention != "auto":
        assert backends == {attention.removeprefix("sdpa-")}, backends
    else:
        assert len(backends) == 1


@pytest.mark.parametrize("impl", OPTIMIZER_IMPLS)
@pytest.mark.slow
def test_optimizer_impl(impl: str, tiny: Path, tiny_params: int, tiny_model: Any) -> None:
    result = estimate_json(str(tiny), *SHAPE, "--optimizer-impl", impl)
    assert result["workload"]["optimizer_impl"] == impl
    # the two moments whatever the implementation; fused AdamW also keeps each parameter's step count as
    # a 4-byte fp32 tensor on the device (the others keep it on the CPU)
    steps = 4 * len(list(tiny_model.parameters())) if impl == "fused" else 0
    assert result["components"]["optimizer_state"] == 8 * tiny_params + steps


@pytest.mark.parametrize("zero_grad", ZERO_GRADS)
@pytest.mark.slow
def test_zero_grad(zero_grad: str, tiny: Path) -> None:
    assert estimate_json(str(tiny), *SHAPE, "--zero-grad", zero_grad)["workload"]["zero_grad"] == zero_grad


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.slow
def test_loss(loss: str, tiny: Path) -> None:
    assert estimate_json(str(tiny), *SHAPE, "--loss", loss)["workload"]["loss"] == loss


@pytest.mark.slow
def test_tiled_mlp(tiny: Path) -> None:
    # batch 1: GPT-2's Conv1D views its input flat, which a sequence tile of a batch > 1 cannot give
    # (DeepSpeed's TiledMLP chunks dim -2; it fails the same way on a GPU)
    shape = ["--batch-size", "1", "--seq-len", "64"]
    result = estimate_json(str(tiny), *shape, "--tiled-mlp", "2")
    assert (result["workload"]["tiled_mlp"], result["workload"]["mlp_tiles"]) == (True, 2)
    # the MLP intermediates exist one tile at a time
    assert result["tensor_peak_bytes"] < estimate_json(str(tiny), *shape)["tensor_peak_bytes"]


@pytest.mark.slow
def test_cuda_module_loading(tiny: Path) -> None:
    lazy, eager = (estimate_json(str(tiny), *SHAPE, "--gpu", "T4", "--cuda-module-loading", choice)
                   for choice in ("lazy", "eager"))
    # eager loading puts every kernel of the CUDA libraries in the context up front
    assert eager["components"]["cuda_context"] > lazy["components"]["cuda_context"]


@pytest.mark.parametrize("grad_accum", ["1", "4"])
@pytest.mark.slow
def test_grad_accum(grad_accum: str, tiny: Path) -> None:
    assert estimate_json(str(tiny), *SHAPE, "--grad-accum", grad_accum)["workload"]["grad_accum"] == int(grad_accum)


@pytest.mark.slow
def test_weight_quant(tiny: Path, tiny_params: int) -> None:
    """Weight-only quantization shrinks the weights and the headline peak (issue 9 item 7)."""
    runs = {q: estimate_json(str(tiny), *SHAPE, "--mode", "infer", "--precision", "fp32", "--weight-quant", q)
            for q in ("none", "int8", "fp8", "int4")}
    weights = {q: r["components"]["parameters"] for q, r in runs.items()}
    peaks = {q: r["peak_allocated_bytes"] for q, r in runs.items()}
    assert weights["none"] == 4 * tiny_params
    # 1 byte per weight (int8, fp8) or half a byte (int4), plus scales; embeddings and norms may stay 16/32-bit
    assert weights["int4"] < weights["int8"] <= weights["fp8"] < weights["none"] / 2
    assert peaks["int4"] < peaks["int8"] < peaks["none"]


@pytest.mark.slow
@pytest.mark.parametrize(("flag", "method"), [("--load-in-4bit", "bnb-nf4"), ("--load-in-8bit", "bnb-int8")])
def test_load_in(flag: str, method: str, tiny: Path, tiny_params: int, tiny_model: Any) -> None:
    """bitsandbytes base weights: every Conv1D/Linear but lm_head in the format's exact bytes (issue 11)."""
    from gpuplan.memory.weight_quant import layer_bytes, weight_format

    result = estimate_json(str(tiny), *SHAPE, "--mode", "infer", "--precision", "fp32", flag)
    layers = [m.weight.shape for n, m in tiny_model.named_modules() if type(m).__name__ == "Conv1D"]
    packed = sum(layer_bytes(weight_format(method), int(out), int(inp)) for inp, out in layers)
    quantized = sum(int(inp) * int(out) for inp, out in layers)
    buffers = sum(b.numel() * b.element_size() for b in tiny_model.buffers())
    assert result["workload"]["load_in"] == flag.removeprefix("--load-in-")
    assert result["components"]["parameters"] == packed + 4 * (tiny_params - quantized) + buffers
    assert result["params_count"] == tiny_params


# ------------------------------------------------------------------------------- MODEL forms ----


def _save_safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> int:
    import torch
    from safetensors.torch import save_file

    save_file({name: torch.zeros(shape, dtype=torch.float16) for name, shape in shapes.items()}, str(path))
    return sum(int(torch.Size(shape).numel()) for shape in shapes.values())


@pytest.mark.parametrize("peft", PEFTS)
@pytest.mark.slow
def test_peft(peft: str, tiny: Path, tiny_params: int) -> None:
    """--peft and every LoRA flag (tests/trace/test_peft.py: exact accounting vs a real CPU run)."""
    lora = ["--lora-rank", "4", "--lora-alpha", "8", "--lora-dropout", "0.1", "--lora-targets", "c_attn,c_proj",
            "--train-modules", "wpe"]
    result = estimate_json(str(tiny), *SHAPE, "--peft", peft, *(lora if peft != "none" else []))
    assert result["workload"]["peft"] == peft
    state = result["components"]["optimizer_state"]
    if peft == "none":
        assert state == 8 * tiny_params
    else:  # AdamW moments of the adapters and the trained wpe copy only: the base is frozen
        assert 0 < state < 8 * tiny_params
        assert any("trainable parameters" in a for a in result["assumptions"])


@pytest.mark.slow
def test_config_json_and_its_folder(tiny: Path, tiny_params: int) -> None:
    for spec in (tiny, tiny.parent):
        assert estimate_json(str(spec), *SHAPE)["params_count"] == tiny_params


@pytest.mark.slow
def test_safetensors_with_config_json_is_traced_from_the_config(tmp_path: Path, tiny_params: int) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_GPT2))
    _save_safetensors(tmp_path / "model.safetensors", {"lm_head.weight": (300, 64)})
    for spec in (tmp_path / "model.safetensors", tmp_path):
        result = estimate_json(str(spec), *SHAPE)
        assert result["params_count"] == tiny_params and result["components"]["activations"] > 0


def test_safetensors_without_config_counts_the_weights(tmp_path: Path) -> None:
    single = _save_safetensors(tmp_path / "model.safetensors", {"w": (64, 48), "b": (48,)})
    shards = tmp_path / "sharded"
    shards.mkdir()
    sharded = sum(_save_safetensors(shards / f"model-0000{i}-of-00002.safetensors", {f"w{i}": (32, 16 * i)})
                  for i in (1, 2))
    for spec, numel in ((tmp_path / "model.safetensors", single), (shards, sharded)):
        result = estimate_json(str(spec), "--mode", "infer")
        assert result["params_count"] == numel
        assert result["components"]["parameters"] == 2 * numel  # stored as fp16: 2 bytes each


def test_user_file_factory_with_and_without_inputs() -> None:
    params = _count_parameters(tiny_models.mlp())
    plain = estimate_json(f"{FIXTURES_FILE}:mlp", "--batch-size", "8")
    with_inputs = estimate_json(f"{FIXTURES_FILE}:mlp,mlp_inputs", "--batch-size", "8")
    for result in (plain, with_inputs):
        assert result["params_count"] == params
        assert result["components"]["optimizer_state"] == 8 * params


@pytest.mark.slow
def test_package_module_factory() -> None:
    result = estimate_json("tests.fixtures.tiny_models:small_cnn", "--batch-size", "2", "--image-size", "16")
    assert result["params_count"] == _count_parameters(tiny_models.small_cnn())


@pytest.mark.slow
def test_catalog_name() -> None:
    # gpt2 (Hugging Face model card: 124M; model.num_parameters() with tied embeddings = 124,439,808)
    assert estimate_json("gpt2", "--seq-len", "32")["params_count"] == 124_439_808


@pytest.mark.slow
def test_torchvision_builder() -> None:
    # torchvision's weights table: ResNet18_Weights.IMAGENET1K_V1 num_params = 11,689,512
    # batch 2: BatchNorm refuses a single value per channel in training, on CUDA as on the CPU
    result = estimate_json("resnet18", "--batch-size", "2", "--image-size", "64")
    assert result["params_count"] == 11_689_512


@pytest.mark.slow
def test_hub_id_from_the_local_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_params: int) -> None:
    from tests.fixtures.model_files import hub_repo

    hub_repo(tmp_path, "acme/tiny-gpt2", {"config.json": TINY_GPT2})  # as huggingface_hub lays out its cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert estimate_json("acme/tiny-gpt2@main", *SHAPE)["params_count"] == tiny_params


@pytest.mark.slow
def test_timm_model() -> None:
    import timm

    # timm's test_vit, built at the --image-size asked (its position table follows the size)
    result = estimate_json("timm:test_vit", "--batch-size", "2", "--image-size", "64")
    assert result["params_count"] == _count_parameters(timm.create_model("test_vit", img_size=64))
    assert result["components"]["activations"] > 0


def test_gguf_file(tmp_path: Path) -> None:
    import numpy as np
    from gguf import GGMLQuantizationType

    from tests.fixtures.model_files import write_gguf

    written = write_gguf(tmp_path / "tiny.gguf", {"w": (np.zeros((8, 2 * 34), dtype=np.uint8),
                                                        GGMLQuantizationType.Q8_0)})
    result = estimate_json(str(tmp_path / "tiny.gguf"), "--mode", "infer")
    assert result["params_count"] == 8 * 64 and result["components"]["parameters"] == written["Q8_0"] == 8 * 68


@pytest.mark.slow
def test_ui_verb_with_every_flag_answers_as_estimate_does(tiny: Path) -> None:
    # `gpuplan ui` end to end: the CLI process with each of its flags, the tiny model uploaded over
    # HTTP, traced in the worker; its JSON is estimate's (tests/ui/ covers the page, browser and load)
    import subprocess
    import sys

    import httpx

    argv = [sys.executable, "-m", "gpuplan.cli.main", "ui", "--port", "0", "--host", "127.0.0.1", "--allow-remote",
            "--workers", "1", "--time-limit-s", "240", "--memory-gib", "8", "--json"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = json.loads(proc.stdout.readline())["url"]
        model = httpx.post(url + "api/upload", content=tiny.read_bytes(), timeout=240).json()["model"]
        api = httpx.get(url + "api/estimate", params={"model": model, "batch_size": 4, "seq_len": 16},
                        timeout=240).json()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert {**api, "model": str(tiny)} == estimate_json(str(tiny), "--batch-size", "4", "--seq-len", "16")


@pytest.mark.slow
def test_plan_ep(tmp_path: Path) -> None:
    # plan --ep: expert parallelism on a tiny Mixtral (8 experts, top-2); the answer carries ep and
    # the all-to-all time it adds
    cfg = dict(model_type="mixtral", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=300, max_position_embeddings=256,
               num_local_experts=8, num_experts_per_tok=2)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["plan", str(tmp_path / "config.json"), "--gpus", "8", "--gpu", "H100-SXM", "--ep", "4",
                     "--seq-len", "16", "--json"])
    assert code == 0
    result = json.loads(out.getvalue())
    assert result["parallelism"]["ep"] == 4 and result["time_parts_s"]["ep_comm"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("comm", ["ring", "all-to-all", "hierarchical"])
def test_plan_cp(tmp_path: Path, comm: str) -> None:
    # plan --cp N --cp-comm C: context parallelism on a tiny Llama; the answer carries cp, its
    # attention exchange and the time of the K/V exchange (tests/parallel/test_context_parallel.py)
    cfg = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["plan", str(tmp_path / "config.json"), "--gpus", "8", "--gpu", "H100-SXM", "--cp", "4",
                     "--cp-comm", comm, "--megatron", "--seq-len", "64", "--json"])
    assert code == 0
    result = json.loads(out.getvalue())
    assert (result["parallelism"]["cp"], result["parallelism"]["cp_comm"]) == (4, comm)
    assert result["time_parts_s"]["cp_comm"] >= 0


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["jobset", "skypilot"])
def test_plan_emit_cluster_manifests(tmp_path: Path, kind: str) -> None:
    # plan --emit jobset --queue NAME / --emit skypilot on 2 nodes: the manifest around the torchrun line
    # (field names against the cited schemas: tests/parallel/test_emit_cluster.py)
    import yaml

    cfg = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, vocab_size=300, max_position_embeddings=256)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    queue = ["--queue", "team-a"] if kind == "jobset" else []
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["plan", str(tmp_path / "config.json"), "--gpus", "16", "--nodes", "2", "--gpu", "H100-SXM",
                     "--seq-len", "64", "--emit", kind, *queue, "--json"])
    assert code == 0
    emitted = json.loads(out.getvalue())["emit"]
    doc = yaml.safe_load(emitted["text"])
    assert emitted["engine"] == kind and "train.py applies the layout" in emitted["note"]
    if kind == "jobset":
        assert doc["metadata"]["labels"] == {"kueue.x-k8s.io/queue-name": "team-a"}
        job = doc["spec"]["replicatedJobs"][0]["template"]["spec"]
        assert job["parallelism"] == 2 and "--nnodes 2 --nproc-per-node 8" in str(job["template"])
    else:
        assert doc["num_nodes"] == 2 and doc["resources"]["accelerators"] == "H100:8"
        assert "--nnodes 2 --nproc-per-node 8" in doc["run"]


@pytest.mark.slow
def test_sweep_local_json(tiny_gpt2: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # gpuplan sweep --launcher local --json --no-store: the plan's best layout (DDP: --dp 2 --zero 0) on 2 gloo ranks;
    # the measured column is the largest rank's tracked peak, no error column on CPU (tests/measure/test_sweep.py).
    # The ranks' results are a recording of this very job (tests/fixtures/recorded_ranks.py): the sweep's real
    # launch is tests/measure/test_sweep.py's, DDP's tests/measure/test_distributed.py's
    from gpuplan.measure.executor import LocalExecutor
    from tests.fixtures.recorded_ranks import SWEEP_ARGV, replay

    monkeypatch.setattr(LocalExecutor, "run", replay)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["sweep", tiny_gpt2, *SWEEP_ARGV])
    assert code == 0
    result = json.loads(out.getvalue())
    assert (result["launcher"], result["steps"], result["measured"], result["store"]) == ("local", 1, 1, None)
    (row,) = result["layouts"]
    ranks = row["measurement"]["measured"]["ranks"]
    assert row["measured_layout"] == "ddp" and [r["rank"] for r in ranks] == [0, 1]
    assert row["measured"]["peak_bytes"] == max(r["tracked_peak_bytes"] for r in ranks)
    assert row["measured"]["step_time_s"] == max(r["step_time_s"] for r in ranks) and row["comparison"] == []
    # the predicted step carries the plan's own 80% interval for that layout
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        assert main(["plan", tiny_gpt2, "--gpus", "2", "--gpu", "H100-SXM", "--dp", "2", "--zero", "0",
                     "--batch-size", "2", "--seq-len", "32", "--precision", "fp32", "--json"]) == 0
    planned = json.loads(out.getvalue())
    assert row["predicted"]["step_time_s"] == planned["step_time_s"]
    assert row["predicted"]["step_time_interval_s"] == planned["step_time_interval_s"] is not None


@pytest.mark.slow
def test_estimate_plot_and_html_keep_json_stdout_one_object(tiny: Path, tmp_path: Path) -> None:
    # --plot FILE.png and --html FILE (.svg, and fit, plan, recommend, serve: tests/report/test_plot.py)
    picture, page = tmp_path / "memory.png", tmp_path / "report.html"
    result = estimate_json(str(tiny), *SHAPE, "--gpu", "RTX-4090", "--plot", str(picture), "--html", str(page))
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"({result['tensor_peak_bytes']:,} bytes)" in page.read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize("flags, check", [
    (["--engine", "vllm"], lambda r: r["command"].startswith("vllm serve") and r["cuda_graph_bytes"] > 0),
    (["--engine", "sglang"], lambda r: r["command"].startswith("python -m sglang.launch_server")
     and r["cuda_context_bytes"] > 0),
    (["--engine", "hf"], lambda r: r["engine"]["name"] == "hf" and r["cuda_graph_bytes"] == 0),
    (["--enforce-eager"], lambda r: r["engine"]["cuda_graphs"] is False and r["cuda_graph_bytes"] == 0
     and r["command"].endswith("--enforce-eager")),
    (["--engine", "sglang", "--enforce-eager"], lambda r: r["engine"]["cuda_graphs"] is False
     and r["cuda_graph_bytes"] == 0 and r["command"].endswith("--disable-cuda-graph")),
    (["--kv-cache-dtype", "auto"], lambda r: r["kv_bytes_per_token"] == 512),
    (["--kv-cache-dtype", "fp8"], lambda r: r["kv_bytes_per_token"] == 256),
    (["--quantization", "none"], lambda r: r["engine"]["quantization"] == "none"),
    (["--quantization", "int8"], lambda r: "--quantization bitsandbytes" in r["command"]),
    (["--quantization", "fp8"], lambda r: "--quantization fp8" in r["command"]),
    (["--quantization", "int4"], lambda r: "--quantization awq" in r["command"]),
    (["--tp", "2", "--pp", "2"], lambda r: r["engine"]["tensor_parallel_size"] == 2 and r["kv_bytes_per_token"] == 128),
    (["--input-len", "32", "--output-len", "16", "--rate", "4"], lambda r: r["rate"]["gpus"] >= 1),
    (["--input-len", "32", "--output-len", "16", "--rate", "4", "--ttft-slo", "1", "--itl-slo", "1"],
     lambda r: r["slo"]["met"] and r["rate"]["ttft_p99_s"] <= 1),
    (["--context", "64", "--itl-slo", "1"], lambda r: r["slo"]["concurrency"] >= 1 and r["decode"]["step_s"] <= 1),
    (["--context", "64", "--ttft-slo", "1"], lambda r: r["slo"]["concurrency"] >= 1),
    (["--dp", "2"], lambda r: r["engine"]["data_parallel_size"] == 2 and "--data-parallel-size 2" in r["command"]),
    (["--ep", "1"], lambda r: r["engine"]["expert_parallel_size"] == 1),  # --ep > 1 on a MoE: tests/serve
    (["--gpus", "2"], lambda r: sorted((x["tp"], x["pp"], x["dp"]) for x in r["layouts"]) == [(1, 1, 2), (1, 2, 1),
                                                                                             (2, 1, 1)]
     and r["chosen"] is not None),  # MoE and pp across nodes: tests/serve/test_layouts
    (["--max-loras", "2", "--max-lora-rank", "8"], lambda r: r["lora"]["slot_bytes"] > 0
     and "--enable-lora --max-loras 2 --max-lora-rank 8" in r["command"]),  # speculative: test_lora_speculative.py
    (["--input-len", "32", "--output-len", "16", "--disaggregate", "1:1"],
     lambda r: r["disaggregation"]["gpus"] == 2 and r["disaggregation"]["kv_transfer_bytes_per_request"] > 0),
])
def test_serve_option(tiny_gpt2: str, flags: list[str], check: Any) -> None:
    # gpuplan serve: every engine, KV dtype, quantization and answer form on the tiny GPT-2 (tests/serve)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["serve", tiny_gpt2, "--gpu", "H100-SXM", "--max-num-batched-tokens", "256", "--max-num-seqs",
                     "16", *flags, "--json"])
    assert code == 0
    assert check(json.loads(out.getvalue()))


# ---------------------------------------------------------------- diffusion / video pipelines ----

PIPELINES = Path(__file__).parent / "fixtures" / "pipelines"


@pytest.fixture(scope="module")
def tiny_flux(tmp_path_factory: pytest.TempPathFactory) -> str:
    """tests/fixtures/pipelines/tiny-flux with 2 + 2 transformer blocks: traced whole (one trace per case)."""
    import shutil

    folder = tmp_path_factory.mktemp("pipes") / "tiny-flux"
    shutil.copytree(PIPELINES / "tiny-flux", folder)
    config = folder / "transformer" / "config.json"
    cfg = json.loads(config.read_text())
    config.write_text(json.dumps({**cfg, "num_layers": 2, "num_single_layers": 2}))
    return str(folder)


PIPE = ["--mode", "infer", "--image-size", "64", "--precision", "bf16", "--gpu", "H100-SXM"]


@pytest.fixture(scope="module")
def flux_base(tiny_flux: str) -> dict[str, Any]:
    return estimate_json(tiny_flux, *PIPE)


def _component(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in result["pipeline"]["components"] if c["name"] == name)


@pytest.mark.slow
def test_pipeline_steps_scale_time_not_memory(tiny_flux: str, flux_base: dict[str, Any]) -> None:
    more = estimate_json(tiny_flux, *PIPE, "--steps", "56")
    assert flux_base["pipeline"]["steps"] == 28 and more["pipeline"]["steps"] == 56  # FluxPipeline's default 28
    assert more["tensor_peak_bytes"] == flux_base["tensor_peak_bytes"]
    assert more["time"]["by_phase_s"]["denoise"] == pytest.approx(2 * flux_base["time"]["by_phase_s"]["denoise"],
                                                                 rel=0.02)
    assert more["step_time_s"] > flux_base["step_time_s"]


@pytest.mark.slow
def test_pipeline_image_size_h_by_w(tiny_flux: str, flux_base: dict[str, Any]) -> None:
    wide = estimate_json(tiny_flux, *PIPE, "--image-size", "64x128")
    assert (wide["pipeline"]["height"], wide["pipeline"]["width"]) == (64, 128)
    assert wide["workload"]["image_width"] == 128
    assert wide["pipeline"]["phase_peak_bytes"]["vae_decode"] > flux_base["pipeline"]["phase_peak_bytes"]["vae_decode"]


@pytest.mark.slow
@pytest.mark.parametrize("offload", ["none", "model", "sequential", "group"])
def test_pipeline_offload(offload: str, tiny_flux: str, flux_base: dict[str, Any]) -> None:
    result = estimate_json(tiny_flux, *PIPE, "--offload", offload)
    p = result["pipeline"]
    assert p["offload"] == offload == result["workload"]["offload"]
    weights = sum(c["bytes"] for c in p["components"])
    if offload == "none":
        assert result["host_memory_bytes"] == 0 and result["tensor_peak_bytes"] == flux_base["tensor_peak_bytes"]
    else:
        assert 0 < result["host_memory_bytes"] <= weights
        assert result["tensor_peak_bytes"] < flux_base["tensor_peak_bytes"]
        assert p["transfer_bytes"] >= weights - _component(result, "transformer")["bytes"]
        assert result["pipeline"]["offload_transfer_s"] is not None


@pytest.mark.slow
@pytest.mark.parametrize("flag", ["--vae-tiling", "--vae-slicing"])
def test_pipeline_vae_flags(flag: str, tiny_flux: str) -> None:
    result = estimate_json(tiny_flux, *PIPE, "--batch-size", "2", flag)
    assert result["workload"][flag.removeprefix("--").replace("-", "_")] is True
    assert result["pipeline"]["phase_peak_bytes"]["vae_decode"] > 0


@pytest.mark.slow
@pytest.mark.parametrize(("flags", "component"), [
    (["--load-in-4bit"], "transformer"),
    (["--load-in-8bit", "--quantize-components", "transformer,text_encoder_2"], "text_encoder_2"),
    (["--weight-quant", "int8"], "transformer"),
    (["--weight-quant", "fp8-storage", "--quantize-components", "transformer,vae"], "vae"),
    (["--weight-quant", "fp8", "--quantize-components", "transformer,text_encoder_2"], "text_encoder_2"),
    (["--gguf-type", "Q8_0"], "transformer"),
])
def test_pipeline_quantized_components(flags: list[str], component: str, tiny_flux: str,
                                       flux_base: dict[str, Any]) -> None:
    result = estimate_json(tiny_flux, *PIPE, *flags)
    assert _component(result, component)["bytes"] < _component(flux_base, component)["bytes"]
    assert _component(result, "text_encoder")["bytes"] == _component(flux_base, "text_encoder")["bytes"]
    assert _component(result, component)["parameters"] == _component(flux_base, component)["parameters"]


@pytest.mark.slow
def test_pipeline_seq_len_is_the_prompt_length(tiny_flux: str, flux_base: dict[str, Any]) -> None:
    short = estimate_json(tiny_flux, *PIPE, "--seq-len", "77")  # FluxPipeline max_sequence_length
    assert short["workload"]["seq_len"] == 77
    phases, base = short["pipeline"]["phase_peak_bytes"], flux_base["pipeline"]["phase_peak_bytes"]
    assert phases["encode:text_encoder_2"] < base["encode:text_encoder_2"]


@pytest.mark.slow
def test_pipeline_video_frames() -> None:
    result = estimate_json(str(PIPELINES / "tiny-wan"), "--mode", "infer", "--image-size", "32", "--frames", "9",
                           "--steps", "2")
    assert result["pipeline"]["frames"] == 9 and result["workload"]["frames"] == 9


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--cache-latents"], ["--cache-text-embeddings"],
                                   ["--cache-latents", "--cache-text-embeddings", "--peft", "lora"]])
def test_pipeline_training_caches(flags: list[str], tiny_flux: str) -> None:
    result = estimate_json(tiny_flux, "--mode", "train", "--image-size", "64", "--precision", "bf16", *flags)
    names = {c["name"] for c in result["pipeline"]["components"]}
    assert ("vae" in names) != ("--cache-latents" in flags)
    assert ("text_encoder_2" in names) != ("--cache-text-embeddings" in flags)
    assert result["components"]["optimizer_state"] > 0
