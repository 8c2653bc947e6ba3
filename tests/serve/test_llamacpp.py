"""Local inference with llama.cpp / Ollama (``serve --engine llama.cpp|ollama``, serve/llamacpp.py).

Oracles, each with its source:

* public llama.cpp logs from GitHub issue threads (the numbers the engine printed, 2 decimals of MiB/GiB):
  - ollama/ollama issue #8310 (Llama 3.2 3B Instruct Q4_K_M, all 29 layers on CUDA0, ``n_ctx 2048``, no flash
    attention): ``model size = 1.87 GiB (5.01 BPW)``, ``CPU model buffer size = 308.23 MiB``, ``CUDA0 model
    buffer size = 1918.35 MiB``, ``CUDA0 KV buffer size = 224.00 MiB``, ``CUDA_Host output buffer size = 0.50
    MiB``, ``CUDA0 compute buffer size = 256.50 MiB``, ``CUDA_Host compute buffer size = 10.01 MiB``;
  - fedora-copr/logdetective PR #106 (a Mistral-7B-shaped GGUF: 32 layers × 8 KV heads × 128, fully offloaded,
    no flash attention, ``-c 2048`` then ``-c 32768``): KV ``256.00`` / ``4096.00 MiB``, ``CUDA0 compute buffer
    size = 164.00`` / ``2144.00 MiB``, ``CUDA_Host compute buffer size = 12.01`` / ``72.01 MiB``;
  - ollama/ollama PR #6279 (Meta Llama 3.1 70B Instruct Q4_0): ``model params = 70.55 B``, ``model size = 37.22
    GiB``; ggml-org/llama.cpp issue #5206 (Mixtral 8x7B Instruct Q4_K_M): ``model params = 46.70 B``;
* exact accounting: the bytes of the tensors written into a GGUF file with the ``gguf`` package, and the
  parameter count of the transformers model the config builds;
* macOS ``recommendedMaxWorkingSetSize`` as llama.cpp's Metal log printed it (hardware/unified.py).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli.main import main
from gpuplan.hardware.unified import metal_working_set_bytes
from gpuplan.models.gguf_mix import GGUF_TYPES, gguf_from_config, row_bytes
from gpuplan.models.sources import resolve_model
from gpuplan.serve.engines import LocalSettings
from gpuplan.serve.llamacpp import KV_CACHE_TYPES, layer_devices, load_local_model, place, tokens_per_s
from gpuplan.units import GIB, MIB

LOG_MIB = 0.005 * MIB  # the logs print MiB with 2 decimals
TINY = dict(
    model_type="llama",
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=512,
    max_position_embeddings=1024,
)
"""Rows of 256 and 512: every K-quant block fits, so the tensor types are llama-quantize's own choices."""
TINY_MOE = dict(TINY, model_type="mixtral", num_local_experts=4, num_experts_per_tok=2)


def _settings(
    ngl: int,
    context: int,
    *,
    parallel: int = 1,
    fa: bool = False,
    k: str = "f16",
    v: str = "f16",
    split: tuple[float, ...] = (1.0,),
    cpu: tuple[str, ...] = (),
    n_cpu_moe: int = 0,
    engine: str = "llama.cpp",
) -> LocalSettings:
    return LocalSettings(engine, "m.gguf", ngl, context, parallel, 512, k, v, fa, split, cpu, n_cpu_moe)


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(["serve", *argv])
        except SystemExit as exc:  # argparse's own refusals (a bad choice) exit from the parser
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def serve_json(*argv: str, expect: int = 0) -> dict[str, Any]:
    code, out, err = run_cli(*argv, "--json")
    assert code == expect, err
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tiny-llama") / "config.json"
    path.write_text(json.dumps(TINY))
    return str(path)


@pytest.fixture(scope="module")
def tiny_moe(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("tiny-moe") / "config.json"
    path.write_text(json.dumps(TINY_MOE))
    return str(path)


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """A 2-layer llama GGUF as the converter lays it out (Q4_K / Q6_K / F32 tensors as raw blocks)."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    path = tmp_path_factory.mktemp("gguf") / "tiny-Q4_K_M.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(1024)
    writer.add_embedding_length(256)
    writer.add_feed_forward_length(512)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    blocks = {Q.Q4_K: 144, Q.Q6_K: 210}
    specs: list[tuple[str, int, int, Any]] = [("token_embd.weight", 256, 512, Q.Q4_K)]
    for i in range(2):
        b = f"blk.{i}."
        specs += [
            (b + "attn_norm.weight", 256, 1, None),
            (b + "attn_q.weight", 256, 256, Q.Q4_K),
            (b + "attn_k.weight", 256, 128, Q.Q4_K),
            (b + "attn_v.weight", 256, 128, Q.Q6_K),
            (b + "attn_output.weight", 256, 256, Q.Q4_K),
            (b + "ffn_norm.weight", 256, 1, None),
            (b + "ffn_gate.weight", 256, 512, Q.Q4_K),
            (b + "ffn_up.weight", 256, 512, Q.Q4_K),
            (b + "ffn_down.weight", 512, 256, Q.Q6_K),
        ]
    specs += [("output_norm.weight", 256, 1, None), ("output.weight", 256, 512, Q.Q6_K)]
    written: dict[str, int] = {}
    for name, row, rows, qtype in specs:
        if qtype is None:
            array = np.ones(row, dtype=np.float32)
        else:  # raw blocks: uint8 rows of whole blocks (the writer's raw_dtype form)
            array = np.zeros((rows, row // 256 * blocks[qtype]), dtype=np.uint8)
        writer.add_tensor(name, array, raw_dtype=qtype)
        written[name] = int(array.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, written


# --------------------------------------------------------------------- public logs ----


def test_file_sizes_of_public_quantized_models() -> None:
    # llama-quantize's mix (models/gguf_mix.py) on the catalog configs against the sizes llama.cpp printed
    for name, ftype, params_b, size_gib in (
        ("llama-3.2-3b", "Q4_K_M", 3.21, 1.87),  # ollama #8310
        ("llama-3.1-70b", "Q4_0", 70.55, 37.22),
    ):  # ollama #6279
        g = gguf_from_config(resolve_model(name).config_dict, ftype, name)
        assert round(sum(t.elements for t in g.tensors) / 1e9, 2) == params_b, name
        assert abs(sum(t.nbytes for t in g.tensors) / GIB - size_gib) <= 0.005, name
    mixtral = gguf_from_config(resolve_model("mixtral-8x7b").config_dict, "Q4_K_M")
    assert round(sum(t.elements for t in mixtral.tensors) / 1e9, 2) == 46.70  # llama.cpp #5206
    # its 24.62 GiB predates the per-layer expert ffn_down rule: docs/accuracy-serving.md


def test_tensor_types_match_the_llama_3_2_3b_q4_k_m_file() -> None:
    # ollama #7673 (llama_model_loader of Llama 3.2 3B Q4_K_M): f32 58 tensors, q4_K 168, q6_K 29 — the 14
    # use_more_bits layers' attn_v and ffn_down and the tied token_embd are Q6_K; rope_freqs is the 58th f32
    counts: dict[str, int] = {}
    for t in gguf_from_config(resolve_model("llama-3.2-3b").config_dict, "Q4_K_M").tensors:
        counts[t.type_name] = counts.get(t.type_name, 0) + 1
    assert counts == {"F32": 58, "Q4_K": 168, "Q6_K": 29}


@pytest.mark.parametrize(
    "gpu, ftype, phase, measured",
    [
        # llama-bench -ngl 99, tg 128 / pp 512 (rows of serve/data/llama_bench.csv, each with its URL):
        ("RTX-4090", "F16", "decode", 61.03),  # codellama-7b, ggml-org/llama.cpp PR #4766
        ("RTX-4090", "Q8_0", "decode", 98.13),  # same
        ("M2-Ultra", "Q4_0", "decode", 94.27),  # 76-core, discussion #4167
        ("RX-7900-XTX", "Q4_0", "decode", 182.63),  # Vulkan, discussion #10879
        ("RTX-3090", "Q4_0", "prefill", 5174.69),  # discussion #15013
    ],
)
def test_tokens_per_s_interval_holds_the_llama_bench_figure(gpu: str, ftype: str, phase: str, measured: float) -> None:
    r = serve_json("llama-2-7b", "--engine", "llama.cpp", "--gguf-type", ftype, "--gpu", gpu, "--context", "128")
    assert round(r["weights"]["bytes"] / GIB, 2) == {"F16": 12.55, "Q8_0": 6.67, "Q4_0": 3.56}[ftype]
    low, high = r[phase]["tokens_per_s_interval"]
    assert low < r[phase]["tokens_per_s"] < high
    assert low <= measured <= high, (low, measured, high)


def test_speed_without_public_rows_or_rates(tiny_config: str) -> None:
    # a vendor without llama-bench rows keeps the bandwidth-bound decode and gets no interval and no prefill;
    # Apple has rows but publishes no GPU rate: an interval, and prefill says why it has no figure
    base = ["--engine", "llama.cpp", "--gguf-type", "Q4_0"]
    gaudi = serve_json(tiny_config, *base, "--gpu", "Gaudi2")
    assert gaudi["prefill"] is None and gaudi["decode"]["tokens_per_s_interval"] is None
    mac = serve_json(tiny_config, *base, "--gpu", "M4-Max")
    assert mac["prefill"]["tokens_per_s"] is None and "not modelled on metal" in mac["prefill"]["interval_basis"]
    low, high = mac["decode"]["tokens_per_s_interval"]
    assert low < mac["decode"]["tokens_per_s"] < high


def test_leave_one_gpu_out_residuals_of_the_public_rows() -> None:
    # the per-type fits judged on GPUs they did not see (docs/accuracy-serving.md prints every row): the
    # median |held-out − measured| per backend, bounds set at the fit of record (scripts/accuracy_local.py)
    from gpuplan.serve.llamacpp import bench_placement
    from gpuplan.serve.local_speed import leave_one_gpu_out, load_rows

    rows = load_rows()
    assert len(rows) >= 60 and all(r.source_url.startswith("https://") for r in rows)
    bounds = {("decode", "metal"): 0.05, ("decode", "cuda"): 0.25, ("decode", "vulkan"): 0.08,
              ("prefill", "cuda"): 0.10, ("prefill", "vulkan"): 0.20}
    for (phase, backend), bound in bounds.items():
        res = leave_one_gpu_out(rows, phase, backend, bench_placement)
        assert len(res) >= 5
        assert float(np.median([abs(x.held_out_t_s / x.measured_t_s - 1) for x in res])) <= bound, (phase, backend)
    # the residual tables of docs/accuracy-serving.md are this fit's (regenerated, never typed)
    import importlib.util

    root = Path(__file__).resolve().parents[2]
    spec = importlib.util.spec_from_file_location("accuracy_local", root / "scripts" / "accuracy_local.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main(["--check"]) == 0, "run scripts/accuracy_local.py"


def test_layer_placement_and_buffers_match_the_llama_3_2_3b_log() -> None:
    # ollama #8310: -ngl 29 of 28 layers + output; tied output → token_embd (Q6_K) also on CUDA0
    m = load_local_model("llama-3.2-3b", "Q4_K_M")
    p = place(m, _settings(29, 2048, engine="ollama"))
    assert abs(p.weights_bytes[0] - 1918.35 * MIB) <= LOG_MIB
    assert abs(p.host_weights_bytes - 308.23 * MIB) <= LOG_MIB
    assert p.kv_bytes == (224 * MIB,)
    assert abs(p.output_buffer_bytes - 0.50 * MIB) <= LOG_MIB
    assert abs(p.compute_bytes[0] - 256.50 * MIB) <= LOG_MIB  # the logits: ub × (n_vocab + n_embd) f32
    assert abs(p.host_compute_bytes - 10.01 * MIB) <= 0.02 * MIB  # the log's 0.01 MiB of graph inputs not modelled


@pytest.mark.parametrize(
    "context, kv_mib, compute_mib, host_mib", [(2048, 256.0, 164.0, 12.01), (32768, 4096.0, 2144.0, 72.01)]
)
def test_kv_and_compute_buffers_match_the_logdetective_log(
    context: int, kv_mib: float, compute_mib: float, host_mib: float
) -> None:
    # fedora-copr/logdetective PR #106: no flash attention, so KQ over the whole context dominates
    p = place(load_local_model("mistral-7b", "Q4_K_M"), _settings(33, context))
    assert p.kv_bytes == (int(kv_mib * MIB),)
    assert abs(p.compute_bytes[0] - compute_mib * MIB) <= LOG_MIB
    assert abs(p.host_compute_bytes - host_mib * MIB) <= 0.02 * MIB


def test_metal_working_set_matches_llama_cpp_metal_logs() -> None:
    # ggml_metal_init: recommendedMaxWorkingSetSize (MB = MiB): llama-cpp-python #687, llama.cpp #2011, #3213
    for ram_gib, logged_mib in ((16, 10922.67), (32, 21845.34), (96, 73728.00)):
        assert abs(metal_working_set_bytes(ram_gib * GIB) - logged_mib * MIB) <= 0.01 * MIB


# --------------------------------------------------------------------- exact accounting ----


def test_gguf_file_bytes_land_where_the_layers_go(tiny_gguf: tuple[Path, dict[str, int]]) -> None:
    path, written = tiny_gguf
    layer = {i: sum(b for n, b in written.items() if n.startswith(f"blk.{i}.")) for i in range(2)}
    output = written["output.weight"] + written["output_norm.weight"]
    for ngl, gpu in ((0, 0), (1, layer[1]), (2, layer[0] + layer[1]), (3, layer[0] + layer[1] + output)):
        r = serve_json(str(path), "--engine", "llama.cpp", "--gpu", "RTX-4090", "-ngl", str(ngl), "--context", "256")
        assert r["gpus"][0]["weights_bytes"] == gpu
        assert r["host"]["weights_bytes"] == sum(written.values()) - gpu
        assert r["weights"]["bytes"] == sum(written.values()) and r["weights"]["origin"] == "file"
        assert f"-ngl {ngl} -c 256" in r["command"]


@pytest.mark.slow  # importing transformers' model classes: ~17 s cold
@pytest.mark.parametrize(
    "config",
    [
        TINY,
        TINY_MOE,
        dict(TINY, model_type="qwen2"),
        dict(TINY, model_type="qwen3", head_dim=64, tie_word_embeddings=True),
    ],
)
def test_modelled_tensors_hold_the_transformers_parameters(config: dict[str, Any]) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = AutoConfig.for_model(**config)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hf)
    g = gguf_from_config(config, "Q8_0")
    assert sum(t.elements for t in g.tensors) == sum(p.numel() for p in model.parameters())


def test_k_quant_mixes_follow_llama_quantize() -> None:
    # llama-quant.cpp: output → Q6_K; Q4_K_M attn_v / ffn_down → Q6_K on use_more_bits
    # layers (4 layers: i ≥ 7·4/8 = 3, and (i − 0) % 3 == 2)
    types = {t.name: t.type_name for t in gguf_from_config(TINY, "Q4_K_M").tensors}
    assert types["output.weight"] == "Q6_K" and types["token_embd.weight"] == "Q4_K"
    assert [types[f"blk.{i}.attn_v.weight"] for i in range(4)] == ["Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    assert [types[f"blk.{i}.ffn_down.weight"] for i in range(4)] == ["Q4_K", "Q4_K", "Q6_K", "Q6_K"]
    assert types["blk.0.attn_norm.weight"] == "F32" and types["blk.1.attn_q.weight"] == "Q4_K"
    # ggml-common.h block layouts: Q8_0 34 B / 32, Q4_0 18 B / 32 — the KV cache rows use the same table
    assert (row_bytes("Q8_0", 128), row_bytes("Q4_0", 128), row_bytes("F16", 128)) == (136, 72, 256)


def test_f16_kv_rows_are_serve_kv_per_token_bytes() -> None:
    # llama.cpp's cache is not paged, but an f16 cell of a layer holds what serve/kv.py counts per token and
    # full-attention layer (2 · kv_heads · head_dim · 2 bytes); n_ctx cells × layers, nothing per page
    from gpuplan.serve.kv import kv_cost, kv_layout

    for name in ("llama-3.1-8b", "qwen3-8b", "mixtral-8x7b"):
        config = resolve_model(name).config_dict
        per_token = kv_cost(kv_layout(config, name), element_bytes=2, state_element_bytes=2).full_layer_token_bytes
        m = load_local_model(name, "Q4_K_M")
        p = place(m, _settings(m.n_layer + 1, 4096))
        assert p.kv_bytes == (4096 * m.n_layer * per_token,), name


def test_tensor_split_follows_the_cumulative_fractions() -> None:
    # llama-model.cpp: upper_bound(splits, (il − i_gpu_start) / act_gpu_layers); the output is slot n_layer
    assert layer_devices(4, 5, (1.0, 1.0)) == (0, 0, 0, 1, 1)
    assert layer_devices(4, 2, (1.0,)) == (-1, -1, 0, 0, -1)


# --------------------------------------------------------------------- every flag, end to end ----


@pytest.mark.parametrize("gguf_type", GGUF_TYPES)
def test_every_gguf_type(tiny_config: str, gguf_type: str) -> None:
    r = serve_json(tiny_config, "--engine", "llama.cpp", "--gguf-type", gguf_type, "--gpu", "RTX-4090")
    assert r["weights"]["origin"] == f"modelled --gguf-type {gguf_type}"
    assert r["layers_on_gpu"] == 5 and f"{Path(tiny_config).parent.name}-{gguf_type}.gguf" in r["command"]


@pytest.mark.parametrize("cache_type", KV_CACHE_TYPES)
def test_every_cache_type(tiny_config: str, cache_type: str) -> None:
    r = serve_json(
        tiny_config,
        "--engine",
        "llama.cpp",
        "--gguf-type",
        "Q4_K_M",
        "--gpu",
        "RTX-4090",
        "--cache-type-k",
        cache_type,
        "--cache-type-v",
        cache_type,
        "--flash-attn",
        "on",
        "--context",
        "512",
    )
    cell = row_bytes(cache_type.upper(), 128)  # 2 KV heads × 64
    assert r["kv_cache_bytes"] == 4 * 512 * 2 * cell  # 4 layers, n_ctx 512 (a multiple of 256), K and V
    assert ("-fa" in r["command"].split()) and r["engine"]["flash_attn"]


def test_local_flags_end_to_end(tiny_config: str, tiny_moe: str) -> None:
    base = ["--engine", "llama.cpp", "--gguf-type", "Q4_K_M", "--gpu", "RTX-4090"]
    off = serve_json(tiny_config, *base, "--flash-attn", "off", "--context", "100")
    assert off["engine"]["n_ctx"] == 100 and "-fa" not in off["command"].split()
    slots = serve_json(tiny_config, *base, "--context", "256", "--concurrency", "3", "--ubatch-size", "128")
    assert "-c 768 -np 3" in slots["command"] and "-ub 128" in slots["command"]
    split = serve_json(tiny_config, *base, "--tensor-split", "1,1")
    # 5 slots (4 layers + output) at fractions 0, .2, .4 | .6, .8 of the cumulative split (.5, 1)
    assert [g["layers"] for g in split["gpus"]] == [3, 1] and split["gpus"][1]["output_layer"]
    assert "--tensor-split 1,1" in split["command"]
    slow_host = serve_json(tiny_config, *base, "-ngl", "0", "--host-memory-bandwidth", "10")
    fast_host = serve_json(tiny_config, *base, "-ngl", "0", "--host-memory-bandwidth", "20")
    # the host's bytes take twice as long at half the bandwidth (the fixed per-token overhead does not change)
    host_bytes = slow_host["decode"]["host_read_per_token_bytes"]
    extra_s = 1 / slow_host["decode"]["tokens_per_s"] - 1 / fast_host["decode"]["tokens_per_s"]
    assert extra_s == pytest.approx(host_bytes / 10e9 - host_bytes / 20e9, rel=1e-9)
    moe = ["--engine", "llama.cpp", "--gguf-type", "Q4_K_M", "--gpu", "RTX-4090"]
    all_gpu = serve_json(tiny_moe, *moe)
    experts_cpu = serve_json(tiny_moe, *moe, "-ot", "exps=CPU")
    first_two = serve_json(tiny_moe, *moe, "--n-cpu-moe", "2")
    tensors = gguf_from_config(TINY_MOE, "Q4_K_M").tensors
    exps = sum(t.nbytes for t in tensors if "_exps" in t.name)
    first_exps = sum(t.nbytes for t in tensors if "_exps" in t.name and t.name.split(".")[1] in ("0", "1"))
    assert experts_cpu["host"]["weights_bytes"] - all_gpu["host"]["weights_bytes"] == exps
    assert first_two["host"]["weights_bytes"] - all_gpu["host"]["weights_bytes"] == first_exps < exps / 2
    assert "--override-tensor exps=CPU" in experts_cpu["command"] and "--n-cpu-moe 2" in first_two["command"]


def test_ollama_emits_a_modelfile(tiny_config: str) -> None:
    r = serve_json(
        tiny_config,
        "--engine",
        "ollama",
        "--gguf-type",
        "Q4_0",
        "--gpu",
        "RTX-4090",
        "-ngl",
        "3",
        "--context",
        "2048",
        "--flash-attn",
        "on",
        "--cache-type-k",
        "q8_0",
        "--cache-type-v",
        "q8_0",
    )
    stem = Path(tiny_config).parent.name
    assert r["modelfile"] == f"FROM {stem}-Q4_0.gguf\nPARAMETER num_gpu 3\nPARAMETER num_ctx 2048\n"
    assert r["command"].startswith("OLLAMA_FLASH_ATTENTION=1 OLLAMA_KV_CACHE_TYPE=q8_0 ollama serve")


def test_apple_unified_memory_and_the_text_answer(tiny_config: str) -> None:
    code, out, _ = run_cli(tiny_config, "--engine", "llama.cpp", "--gguf-type", "Q4_K_M", "--gpu", "M4-Max")
    stem = Path(tiny_config).parent.name
    assert code == 0 and "Metal working set" in out and f"llama-server -m {stem}-Q4_K_M.gguf -ngl 5" in out
    r = serve_json(tiny_config, "--engine", "llama.cpp", "--gguf-type", "Q4_K_M", "--gpu", "M4-Max")
    assert r["unified_memory"] and r["gpu_memory_limit_bytes"] == 96 * GIB  # 3/4 of 128 GiB


def test_a_model_too_big_for_the_gpu_exits_1() -> None:
    r = serve_json(
        "llama-3.1-70b", "--engine", "llama.cpp", "--gguf-type", "Q4_K_M", "--gpu", "RTX-4090", "-ngl", "81", expect=1
    )
    assert not r["fits"] and 0 < r["max_gpu_layers"] < 81 and "out of memory" in r["reason"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gguf-type", "Q4_K_XL"], "invalid choice: 'Q4_K_XL'"),
        (["--gguf-type", "Q4_K_M", "-ngl", "7"], "--n-gpu-layers 7 is outside 0..5"),
        (["--gguf-type", "Q4_K_M", "--cache-type-v", "q8_0"], "--cache-type-v q8_0 needs flash attention"),
        ([], "add --gguf-type"),
        (["--gguf-type", "Q4_K_M", "--tp", "2"], "--tp: flags of the paged engines"),
        (["--gguf-type", "Q4_K_M", "--n-cpu-moe", "1"], "has no experts"),
        (["--gguf-type", "Q4_K_M", "--max-loras", "2"], "--max-loras: flags of the paged engines"),
        (["--gguf-type", "Q4_K_M", "-ot", "exps=CUDA0"], "PATTERN=CPU"),
        (["--gguf-type", "Q4_K_M", "-ot", "(=CPU"], "not a regular expression"),
        (["--gguf-type", "Q4_K_M", "--tensor-split", "0,0"], "positive sum"),
        (["--gguf-type", "Q4_K_M", "--gpu", "M4-Max", "--tensor-split", "1,1"], "one GPU"),
        (["--gguf-type", "Q4_K_M", "--plot", "x.png"], "--plot / --html"),
    ],
)
def test_bad_input_is_one_line_exit_2(tiny_config: str, argv: list[str], message: str) -> None:
    gpu = [] if "--gpu" in argv else ["--gpu", "RTX-4090"]
    code, out, err = run_cli(tiny_config, "--engine", "llama.cpp", *gpu, *argv)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--cache-type-k", "q8_0", "--cache-type-v", "q4_0", "--flash-attn", "on"], "one OLLAMA_KV_CACHE_TYPE"),
        (["--cache-type-k", "q5_1", "--cache-type-v", "q5_1", "--flash-attn", "on"], "f16, q8_0 or q4_0"),
        (["--cache-type-k", "q8_0", "--cache-type-v", "q8_0"], "OLLAMA_FLASH_ATTENTION=1"),
        (["--tensor-split", "1,1"], "Ollama splits layers"),
    ],
)
def test_ollama_refuses_what_it_cannot_express(tiny_config: str, argv: list[str], message: str) -> None:
    # ollama docs/faq.md: one KV type for K and V (f16, q8_0, q4_0), quantized only with flash attention
    code, out, err = run_cli(tiny_config, "--engine", "ollama", "--gguf-type", "Q4_0", "--gpu", "RTX-4090", *argv)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_gguf_type_on_a_gguf_file_and_local_flags_on_vllm(tiny_gguf: tuple[Path, dict[str, int]]) -> None:
    code, _, err = run_cli(str(tiny_gguf[0]), "--engine", "llama.cpp", "--gpu", "RTX-4090", "--gguf-type", "Q4_0")
    assert code == 2 and "drop --gguf-type" in err
    code, _, err = run_cli("llama-3.2-3b", "--gpu", "RTX-4090", "-ngl", "3")
    assert code == 2 and "add --engine llama.cpp" in err


# --------------------------------------------------------------------- properties ----


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ngl=st.integers(0, 5),
    context=st.integers(1, 4096),
    host_share=st.floats(0.01, 1.0),
    moe=st.booleans(),
    parallel=st.integers(1, 4),
    backend=st.sampled_from(["cuda", "metal", "vulkan"]),
)
def test_more_gpu_layers_never_fewer_tokens_per_s(
    ngl: int, context: int, host_share: float, moe: bool, parallel: int, backend: str
) -> None:
    from gpuplan.serve.llamacpp import local_speed_model

    m = _tiny_local(moe)
    factor = local_speed_model().decode[backend]
    # a GPU that reads every ggml type faster than the host does (the host at its sustained bandwidth)
    gpu_bw = 1e12
    host_bw = gpu_bw * min(factor.by_type.values()) * host_share
    fewer = place(m, _settings(ngl, context, parallel=parallel))
    more = place(m, _settings(ngl + 1, context, parallel=parallel))
    for p in (fewer, more):  # the typed reads are the reads
        assert [sum(b for _, b in g) for g in p.read_by_type] == list(p.read_per_token_bytes)
        assert sum(b for _, b in p.host_read_by_type) == p.host_read_per_token_bytes
    # equal bandwidths tie: allow the last bits of float rounding
    faster = tokens_per_s(more, gpu_bw, host_bw, factor)
    assert faster >= tokens_per_s(fewer, gpu_bw, host_bw, factor) * (1 - 1e-12)
    # unified memory: the CPU reads the same memory at the same per-type rates
    assert tokens_per_s(more, gpu_bw, gpu_bw, factor, factor) >= tokens_per_s(
        fewer, gpu_bw, gpu_bw, factor, factor
    ) * (1 - 1e-12)


@settings(max_examples=25, deadline=None)
@given(
    ngl=st.integers(0, 6),
    context=st.integers(1, 8192),
    extra=st.integers(1, 8192),
    fa=st.booleans(),
    kv=st.sampled_from(["f16", "q8_0", "q4_0"]),
)
def test_more_context_never_less_memory(ngl: int, context: int, extra: int, fa: bool, kv: str) -> None:
    m = _tiny_local(False)
    small = place(m, _settings(ngl, context, fa=fa, k=kv, v=kv if fa else "f16"))
    large = place(m, _settings(ngl, context + extra, fa=fa, k=kv, v=kv if fa else "f16"))
    assert all(b >= a for a, b in zip(small.gpu_total_bytes, large.gpu_total_bytes, strict=True))
    assert large.host_total_bytes >= small.host_total_bytes


_LOCAL: dict[bool, Any] = {}


def _tiny_local(moe: bool) -> Any:
    if moe not in _LOCAL:
        from gpuplan.serve.llamacpp import local_model

        _LOCAL[moe] = local_model(gguf_from_config(TINY_MOE if moe else TINY, "Q4_K_M"), "tiny", "modelled")
    return _LOCAL[moe]
