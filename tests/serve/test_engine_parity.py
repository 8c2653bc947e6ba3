"""gpuplan's KV arithmetic and launch commands checked by the engine's own code, in the engine's own
environment (``.venv-serve`` at the repository root: ``python -m venv .venv-serve && .venv-serve/bin/pip
install vllm``; vLLM 0.33.0 installed beside torch 2.14.0 in 7 min 54 s here; ``.venv-sglang`` likewise with
``pip install sglang``: SGLang 0.5.23 beside torch 2.14.1 in 6 min 26 s). Each test is skipped where its
environment is absent.

Each case is one model of each attention kind: the sizes gpuplan read from its config are handed to the
spec class vLLM's model code builds for that layer kind, and vLLM's bytes must equal gpuplan's exactly.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gpuplan.models.sources import resolve_model
from gpuplan.serve.engines import EngineSettings, command
from gpuplan.serve.kv import KVLayout, kv_cost, kv_layout

REPO = Path(__file__).resolve().parents[2]
ENGINE_PYTHON = REPO / ".venv-serve" / "bin" / "python"
SGLANG_PYTHON = REPO / ".venv-sglang" / "bin" / "python"
HERE = Path(__file__).parent
DATA = HERE / "data"

pytestmark = pytest.mark.slow
needs_vllm = pytest.mark.skipif(not ENGINE_PYTHON.exists(), reason="no .venv-serve with vLLM installed (module doc)")


def _engine(script: str, arg: str, python: Path = ENGINE_PYTHON, *more: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(python), str(HERE / script), arg, *more], capture_output=True, text=True,
                          timeout=300, check=False)


def layout_of(model: str) -> KVLayout:
    return kv_layout(resolve_model(model).hf_config().to_dict(), model)


@needs_vllm
def test_kv_bytes_equal_vllm_for_each_attention_kind() -> None:
    max_len, batched = 10_000, 2048
    llama, falcon, opt = layout_of("llama-3.1-8b"), layout_of("falcon-7b"), layout_of("opt-13b")
    deepseek, gemma = layout_of(str(DATA / "deepseek-v3")), layout_of("gemma-2-2b")
    nxt, jamba = layout_of(str(DATA / "qwen3-next-80b-a3b")), layout_of(str(DATA / "jamba-v0.1"))
    common = {"dtype": "bfloat16", "block_size": 16, "max_model_len": 8192, "max_num_batched_tokens": batched}
    cases: list[tuple[KVLayout, dict[str, Any], str]] = [
        (opt, {"kind": "full", "kv_heads": 40, "head_dim": 128}, "token"),  # MHA
        (llama, {"kind": "full", "kv_heads": 8, "head_dim": 128}, "token"),  # GQA
        (falcon, {"kind": "full", "kv_heads": 1, "head_dim": 64}, "token"),  # MQA
        (deepseek, {"kind": "mla", "latent_dim": 576}, "token"),  # MLA
        (gemma, {"kind": "sliding", "kv_heads": 4, "head_dim": 256, "window": 4096}, "sliding"),
        (nxt, {"kind": "gdn", "tp": 1, "args": [16, 32, 128, 128, 4]}, "state"),  # gated DeltaNet
        (jamba, {"kind": "mamba1", "tp": 1, "args": [8192, 16, 4]}, "state"),  # Mamba
    ]
    done = _engine("engine_kv.py", json.dumps([{**common, "max_model_len": max_len, **c} for _, c, _ in cases]))
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for (layout, _case, what), theirs in zip(cases, answers, strict=True):
        ours = kv_cost(layout, element_bytes=2, state_element_bytes=2, max_num_batched_tokens=batched)
        if what == "token":
            per_layer = ours.full_layer_token_bytes
            assert per_layer == theirs["token_bytes"], layout
            assert ours.sequence_bytes(max_len) == theirs["sequence_bytes"] * ours.full_layers
        elif what == "sliding":
            assert ours.sliding_layer_token_bytes == theirs["token_bytes"]
            sliding_only = ours.sequence_bytes(max_len) - ours.full_layers * -(-max_len // 16) * 16 * \
                ours.full_layer_token_bytes
            assert sliding_only == theirs["sequence_bytes"] * ours.sliding_layers
        else:
            assert ours.state_bytes_per_sequence == theirs["state_bytes"] * layout.state_layers


@needs_vllm
def test_vllm_parser_accepts_the_emitted_commands_and_refuses_a_bad_value() -> None:
    cases = [("auto", "none"), ("fp8", "int4")]
    commands = [command(EngineSettings("vllm", "meta-llama/Llama-3.1-70B-Instruct", 4, 2, 32768, 0.9, kv, 8192, 1024,
                                       16, quant, True)) for kv, quant in cases]
    done = _engine("engine_parse.py", json.dumps([*commands, "vllm serve m --tensor-parallel-size two"]))
    assert done.returncode == 0, done.stderr[-2000:]
    *parsed, bad = json.loads(done.stdout.strip().splitlines()[-1])
    for (kv, quant), answer in zip(cases, parsed, strict=True):
        assert answer == {"model": "meta-llama/Llama-3.1-70B-Instruct", "tensor_parallel_size": 4,
                          "pipeline_parallel_size": 2, "max_model_len": 32768, "gpu_memory_utilization": 0.9,
                          "max_num_batched_tokens": 8192, "max_num_seqs": 1024, "kv_cache_dtype": kv,
                          "quantization": None if quant == "none" else "awq"}
    assert bad == {"error": "SystemExit: 2"}  # argparse: invalid int value 'two'


@pytest.mark.skipif(not SGLANG_PYTHON.exists(), reason="no .venv-sglang with SGLang installed (module doc)")
def test_sglang_parser_accepts_the_emitted_command() -> None:
    settings = EngineSettings("sglang", "meta-llama/Llama-3.1-8B", 2, 2, 131072, 0.87, "fp8", 8192, 256, 1, "int4",
                              True)
    done = _engine("engine_parse.py", json.dumps([command(settings)]), SGLANG_PYTHON)
    assert done.returncode == 0, done.stderr[-2000:]
    (parsed,) = json.loads(done.stdout.strip().splitlines()[-1])
    assert parsed == {"model_path": "meta-llama/Llama-3.1-8B", "tp_size": 2, "pp_size": 2, "context_length": 131072,
                      "mem_fraction_static": 0.87, "chunked_prefill_size": 8192, "max_running_requests": 256,
                      "kv_cache_dtype": "fp8_e4m3", "quantization": "awq"}


def _issue20_settings(engine: str) -> list[EngineSettings]:
    """Issue 20's flags: DP attention + EP, multi-LoRA, speculative decoding (draft / MTP), P/D roles."""
    from dataclasses import replace

    from gpuplan.serve.speculative import Speculation

    base = EngineSettings(engine, "deepseek-ai/DeepSeek-V3", 2, 1, 32768, 0.9, "auto", 8192, 256, 16, "none", True,
                          dp=4, ep=8, model_type="deepseek_v3")
    mtp = Speculation("mtp", None, 2, 0.85, 1)
    out = [base, replace(base, speculative=mtp), replace(base, kv_role="prefill"), replace(base, kv_role="decode"),
           replace(base, cuda_graphs=False)]  # --enforce-eager / --disable-cuda-graph
    if engine == "vllm":
        out += [replace(base, dp=1, ep=1, max_loras=4, max_lora_rank=64),
                replace(base, speculative=Speculation("draft", "meta-llama/Llama-3.2-1B", 4, 0.7))]
    return out


@needs_vllm
def test_vllm_parser_accepts_issue_20_flags() -> None:
    extra = ["data_parallel_size", "enable_expert_parallel", "enable_lora", "max_loras", "max_lora_rank",
             "speculative_config", "kv_transfer_config", "enforce_eager"]
    settings = _issue20_settings("vllm")
    done = _engine("engine_parse.py", json.dumps([command(s) for s in settings]), ENGINE_PYTHON, json.dumps(extra))
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for s, answer in zip(settings, answers, strict=True):
        assert "error" not in answer, (command(s), answer)
        assert (answer["tensor_parallel_size"], answer["data_parallel_size"]) == (s.tp, s.dp)
        assert bool(answer["enable_expert_parallel"]) == (s.ep > 1)
        if s.max_loras:
            assert (answer["enable_lora"], answer["max_loras"], answer["max_lora_rank"]) == (True, 4, 64)
        assert bool(answer["speculative_config"]) == (s.speculative is not None)
        assert bool(answer["kv_transfer_config"]) == bool(s.kv_role)
        assert bool(answer["enforce_eager"]) == (not s.cuda_graphs)


@pytest.mark.skipif(not SGLANG_PYTHON.exists(), reason="no .venv-sglang with SGLang installed (module doc)")
def test_sglang_parser_accepts_issue_20_flags() -> None:
    extra = ["dp_size", "enable_dp_attention", "ep_size", "speculative_algorithm", "speculative_num_steps",
             "speculative_num_draft_tokens", "disaggregation_mode", "disable_cuda_graph"]
    settings = _issue20_settings("sglang")
    done = _engine("engine_parse.py", json.dumps([command(s) for s in settings]), SGLANG_PYTHON, json.dumps(extra))
    assert done.returncode == 0, done.stderr[-2000:]
    answers = json.loads(done.stdout.strip().splitlines()[-1])
    for s, answer in zip(settings, answers, strict=True):
        assert "error" not in answer, (command(s), answer)
        assert (answer["tp_size"], answer["dp_size"], answer["ep_size"]) == (s.tp * s.dp, s.dp, s.ep)
        assert answer["enable_dp_attention"] is True
        assert (answer["speculative_num_steps"] == 2) == (s.speculative is not None)
        if s.kv_role:
            assert answer["disaggregation_mode"] == s.kv_role
        assert bool(answer["disable_cuda_graph"]) == (not s.cuda_graphs)
