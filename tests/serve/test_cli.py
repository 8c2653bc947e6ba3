"""``gpuplan serve`` end to end on the tiny GPT-2 (tests/fixtures): one JSON object, the contract's fields,
the budget identity, the engine's refusals (exit 1) and bad input (one line, exit 2)."""

from __future__ import annotations

import contextlib
import io
import json
import math
from typing import Any

import pytest

from gpuplan.cli.main import main
from gpuplan.serve import serve
from gpuplan.serve.engines import VLLM_NO_CACHE_MESSAGE

CONTRACT = ("ok", "reason", "weights_bytes", "activation_peak_bytes", "non_torch_bytes", "cuda_graph_bytes",
            "kv_cache_bytes", "kv_bytes_per_token", "kv_cache_tokens", "max_concurrency", "max_model_len_fits",
            "prefill", "decode", "engine", "command")
SMALL = ["--max-num-batched-tokens", "256", "--max-num-seqs", "16"]


@pytest.fixture(scope="module")
def tiny_gpt2_params() -> int:
    """Parameters of TINY_GPT2_LM, counted by building it (tied embeddings counted once)."""
    import transformers

    from tests.fixtures.tiny_models import TINY_GPT2_LM

    config = transformers.AutoConfig.for_model(**TINY_GPT2_LM)
    return sum(p.numel() for p in transformers.AutoModelForCausalLM.from_config(config).parameters())


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["serve", *argv])
    return code, out.getvalue(), err.getvalue()


def serve_json(*argv: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run(*argv, "--json")
    assert code in (0, 1), err
    data = json.loads(out)
    assert isinstance(data, dict)
    return code, data


def test_json_contract_and_budget_identity(tiny_gpt2: str) -> None:
    code, data = serve_json(tiny_gpt2, "--gpu", "H100-SXM", "--context", "128", "--concurrency", "4", *SMALL)
    assert code == 0 and data["ok"] is True
    assert set(CONTRACT) <= set(data)
    # TINY_GPT2_LM: 2 layers × 2 heads × head_dim 32, K and V, bf16 (served 16-bit)
    assert data["kv_bytes_per_token"] == 2 * 2 * 2 * 32 * 2
    requested = data["requested_memory_bytes"]
    assert requested == int(data["total_memory_bytes"] * 0.9)
    # vLLM 0.10.0 sizes the KV cache before it captures the CUDA graphs: they are not subtracted
    # (gpu_worker.py determine_available_memory; vLLM PR #21489's description)
    assert data["kv_cache_bytes"] == requested - data["weights_bytes"] - data["activation_peak_bytes"] - \
        data["non_torch_bytes"]
    assert data["cuda_graph_bytes"] > 0
    assert data["kv_cache_tokens"] == data["kv_cache_bytes"] // (16 * 512) * 16
    assert data["max_concurrency"] == data["kv_cache_bytes"] // (128 * 512)
    assert data["max_model_len_fits"] == 128  # the trained context; memory allows far more
    assert data["engine"]["name"] == "vllm" and data["engine"]["max_num_batched_tokens"] == 256
    assert data["command"].startswith("vllm serve ")
    assert data["decode"]["step_s"] > 0 and data["prefill"]["ttft_s"] > 0


def test_weights_are_the_traced_parameters_in_16_bits(tiny_gpt2: str, tiny_gpt2_params: int) -> None:
    _, data = serve_json(tiny_gpt2, "--gpu", "H100-SXM", *SMALL)
    assert data["weights_bytes"] == 2 * tiny_gpt2_params  # learned positions: no rotary cache


def test_engine_refusal_is_exit_1_with_its_message(tiny_gpt2: str) -> None:
    code, data = serve_json(tiny_gpt2, "--gpu", "H100-SXM", "--gpu-memory-utilization", "0.0005", *SMALL)
    assert code == 1 and data["ok"] is False
    assert data["reason"] == f"ValueError: {VLLM_NO_CACHE_MESSAGE}"


def test_max_model_len_that_does_not_fit_is_refused_with_the_longest_that_does(tiny_gpt2: str) -> None:
    first = serve(tiny_gpt2, gpu="H100-SXM", max_num_batched_tokens=256, max_num_seqs=16)
    fixed = first.budget.requested_bytes - first.budget.kv_cache_bytes
    # room for 40 tokens of KV (2.5 blocks): 128 do not fit, 32 do
    total = math.ceil((fixed + 40 * 512) / 0.9)
    tight = serve(tiny_gpt2, gpu="H100-SXM", max_num_batched_tokens=256, max_num_seqs=16, total_memory_bytes=total)
    assert tight.ok is False and tight.max_model_len_fits == 32
    assert "To serve at least one request with the models's max seq len (128)" in tight.reason
    assert "the estimated maximum model length is 32" in tight.reason


def test_concurrency_that_does_not_fit_is_exit_1(tiny_gpt2: str) -> None:
    code, data = serve_json(tiny_gpt2, "--gpu", "T4", "--context", "128", "--concurrency", "10000000", *SMALL)
    assert code == 1 and data["ok"] is True and data["concurrency_fits"] is False


@pytest.mark.parametrize("argv, message", [
    (["--max-model-len", "256"], "above the 128 tokens"),
    (["--context", "129"], "above the 128 tokens"),
    (["--max-model-len", "64", "--context", "65"], "above --max-model-len 64"),
    (["--tp", "3"], "does not divide the 2 attention heads"),
    (["--gpu-memory-utilization", "1.5"], "outside (0, 1]"),
    (["--gpu-memory-utilization", "0"], "outside (0, 1]"),
    (["--rate", "5"], "--rate needs --input-len and --output-len"),
    (["--concurrency", "2", "--rate", "5", "--input-len", "8", "--output-len", "8"], "not both"),
    (["--pp", "3"], "--pp 3 is above"),  # 2 layers: a stage holds at least one
    (["--engine", "llama.cpp", "--gguf-type", "Q4_K_M", "--disaggregate", "1:1"], "--disaggregate: flags of the paged"),
])
def test_bad_input_is_one_line_exit_2(tiny_gpt2: str, argv: list[str], message: str) -> None:
    code, out, err = run(tiny_gpt2, "--gpu", "H100-SXM", *argv, *SMALL)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_a_model_that_is_not_a_decoder_is_exit_2() -> None:
    code, out, err = run("bert-base-uncased", "--gpu", "H100-SXM")
    assert code == 2 and out == "" and "not a decoder" in err and err.count("\n") == 1


def test_rate_and_prices(tiny_gpt2: str, tmp_path: Any) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("H100-SXM: 2.5\n")
    code, data = serve_json(tiny_gpt2, "--gpu", "H100-SXM", "--tp", "2", "--input-len", "64", "--output-len", "32",
                            "--rate", "1000", "--prices", str(prices), *SMALL)
    assert code == 0
    rate = data["rate"]
    per_replica = rate["requests_per_s_per_replica"]
    assert rate["replicas"] == math.ceil(1000 / per_replica) and rate["gpus"] == 2 * rate["replicas"]
    # two GPUs at $2.5/h make per_replica × 32 output tokens per second
    assert rate["usd_per_million_output_tokens"] == pytest.approx(2 * 2.5 / (per_replica * 32 * 3600) * 1e6)


def test_sglang_starts_and_caps_requests_where_vllm_refuses(tiny_gpt2: str) -> None:
    # mem_fraction_static 0.5: the other half holds activations, graphs and non-torch memory
    first = serve(tiny_gpt2, gpu="H100-SXM", engine="sglang", max_num_seqs=16, gpu_memory_utilization=0.5)
    fixed = first.budget.requested_bytes - first.budget.kv_cache_bytes  # weights + CUDA context
    total = math.ceil((fixed + 40 * 512) / first.settings.gpu_memory_utilization)
    tight = serve(tiny_gpt2, gpu="H100-SXM", engine="sglang", max_num_seqs=16, gpu_memory_utilization=0.5,
                  total_memory_bytes=total)
    assert tight.ok is True and tight.kv_cache_tokens == 40  # page size 1
    assert "SGLang caps each request at 39 tokens" in tight.reason


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_enforce_eager_drops_the_graph_pool_and_pays_eager_dispatch(tiny_gpt2: str, engine: str) -> None:
    # the same engine with and without CUDA graphs: the budget loses exactly the graph pool (vLLM 0.10.0 sizes
    # the KV cache before capturing, SGLang keeps the graphs outside its static pool: the KV cache is unchanged)
    # and a decode step costs the longer of its GPU time and the traced forward's launches × the eager dispatch
    from gpuplan.hardware import resolve_gpu
    from gpuplan.perf.efficiency import efficiency_for

    asked = dict(gpu="H100-SXM", engine=engine, max_num_batched_tokens=256, max_num_seqs=16, concurrency=4,
                 context=64)
    graphs, eager = serve(tiny_gpt2, **asked), serve(tiny_gpt2, enforce_eager=True, **asked)
    assert graphs.budget.cuda_graph_bytes > 0 and eager.budget.cuda_graph_bytes == 0
    assert eager.budget.kv_cache_bytes == graphs.budget.kv_cache_bytes
    assert eager.budget.asleep_bytes == graphs.budget.asleep_bytes - graphs.budget.cuda_graph_bytes
    assert eager.shape is not None and eager.shape.kernels_per_forward > 0
    dispatch_s = eager.shape.kernels_per_forward * efficiency_for(resolve_gpu("H100-SXM")).launch_overhead_s
    assert eager.decode.seconds == pytest.approx(max(graphs.decode.seconds, dispatch_s))
    assert eager.decode.seconds > graphs.decode.seconds  # the tiny model's kernels are shorter than dispatch
    assert eager.prefill.seconds == graphs.prefill.seconds
    assert any("no CUDA graphs captured" in a for a in eager.assumptions)


def test_enforce_eager_without_graphs_to_turn_off_is_one_line_exit_2(tiny_gpt2: str) -> None:
    code, out, err = run(tiny_gpt2, "--gpu", "H100-SXM", "--engine", "hf", "--enforce-eager")
    assert code == 2 and out == "" and "--enforce-eager" in err and err.count("\n") == 1


def test_one_list_of_the_paged_engine_flags_and_their_defaults(tiny_gpt2: str) -> None:
    # cli/serve.py: the paged engines' flags (refused by llama.cpp / ollama) and the language-model engine flags
    # (refused by a diffusion pipeline) both come from the one description of serve's options (report/options.py),
    # whose defaults are the parser's
    import argparse

    from gpuplan.cli.serve import _engine_flags, _paged_flags, add_parser
    from gpuplan.report.verb_options import verb_options

    parser = argparse.ArgumentParser()
    add_parser(parser)
    defaults = vars(parser.parse_args([tiny_gpt2, "--gpu", "H100-SXM"]))
    assert all(defaults[o.name] == o.default for o in verb_options("serve") if o.name != "gpu")
    assert {"pp", "enforce_eager", "disaggregate", "gpus"} <= set(_paged_flags()) & set(_engine_flags())
