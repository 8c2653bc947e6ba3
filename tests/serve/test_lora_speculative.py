"""Issue 20 item 5: multi-LoRA slots and speculative decoding (a draft model or MTP layers) in the serving
budget as the engine allocates them, and their effect on the decode step. Tiny configs; the LoRA slot shapes
are vLLM's (``vllm/lora/layers/base_linear.py`` at 01235a494f17: per output slice ``lora_a [max_loras, 1, rank,
input]`` and ``lora_b [max_loras, 1, output, rank]``), written out here per layer independently of serve/lora.py."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from gpuplan.cli.main import main
from gpuplan.serve import serve
from gpuplan.serve.speculative import Speculation
from tests.serve.test_serve_v2 import SMALL, SMALL_ARGS, TINY_LLAMA_LM

TINY_DRAFT = {**TINY_LLAMA_LM, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "num_key_value_heads": 2}
TINY_DEEPSEEK_MTP: dict[str, Any] = {
    "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_hidden_layers": 3, "first_k_dense_replace": 1,
    "num_attention_heads": 4, "num_key_value_heads": 4, "n_routed_experts": 8, "n_shared_experts": 1,
    "num_experts_per_tok": 2, "n_group": 1, "topk_group": 1, "q_lora_rank": 48, "kv_lora_rank": 32,
    "qk_nope_head_dim": 16, "qk_rope_head_dim": 8, "v_head_dim": 16, "max_position_embeddings": 2048,
    "rope_theta": 10000, "vocab_size": 100, "torch_dtype": "bfloat16", "num_nextn_predict_layers": 1}


@pytest.fixture(scope="module")
def configs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("lora-spec")
    out = {}
    for name, config in (("llama", TINY_LLAMA_LM), ("draft", TINY_DRAFT), ("deepseek", TINY_DEEPSEEK_MTP)):
        path = folder / f"{name}.json"
        path.write_text(json.dumps(config))
        out[name] = str(path)
    return out


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["serve", *argv])
    return code, out.getvalue(), err.getvalue()


def vllm_slot_elements(rank: int, tp: int) -> int:
    """One adapter's slot elements per layer of TINY_LLAMA_LM on one TP rank: (input, [output slices]) of each
    LoRA linear as vLLM builds it — column-parallel qkv / gate_up (whole input, outputs / tp), row-parallel o /
    down (input / tp, whole output)."""
    h, inter, q, kv = 64, 256, 4 * 16, 2 * 16
    kv_rank = max(16, kv // tp)  # 2 KV heads: one per rank past tp 2 (replicated)
    layers = [(h, [q // tp, kv_rank, kv_rank]), (q // tp, [h]), (h, [inter // tp, inter // tp]), (inter // tp, [h])]
    return sum(len(outs) * rank * inp + sum(o * rank for o in outs) for inp, outs in layers)


@pytest.mark.parametrize("tp, rank", [(1, 16), (2, 64)])
def test_lora_slots_are_vllm_s_tensors_counted_with_the_weights(configs: dict[str, str], tp: int, rank: int) -> None:
    plain = serve(configs["llama"], gpu="H100-SXM", tp=tp, **SMALL)
    lora = serve(configs["llama"], gpu="H100-SXM", tp=tp, max_loras=4, max_lora_rank=rank, **SMALL)
    assert lora.lora is not None
    assert lora.lora.slot_bytes == 4 * 2 * vllm_slot_elements(rank, tp) * 2  # 4 slots, 2 layers, bf16
    tokens, seqs = SMALL["max_num_batched_tokens"], SMALL["max_num_seqs"]
    # punica_gpu.py: 2 LoRAKernelMeta (int32 token maps, 3 per-LoRA vectors of max_loras + 2) + the base wrapper's
    # int64 token, embedding (2 ×) and sampler (2 ×, over sequences) indices
    assert lora.lora.punica_bytes == 2 * (2 * tokens * 4 + 3 * 6 * 4) + 8 * (3 * tokens + 2 * seqs)
    assert lora.budget.weights_bytes - plain.budget.weights_bytes == lora.lora.slot_bytes + lora.lora.punica_bytes
    # add_lora_linear's float32 shrink buffer [3 slices, tokens, rank] in the profile run's peak
    assert lora.budget.activation_peak_bytes - plain.budget.activation_peak_bytes == 3 * tokens * rank * 4
    assert f"--enable-lora --max-loras 4 --max-lora-rank {rank}" in lora.command


def test_mtp_layers_add_one_decoder_layer_s_weights_and_kv(configs: dict[str, str]) -> None:
    plain = serve(configs["deepseek"], gpu="H100-SXM", **SMALL)
    mtp = serve(configs["deepseek"], gpu="H100-SXM", speculative_method="mtp", **SMALL)
    assert mtp.drafter is not None and mtp.drafter.spec.tokens == 1
    # one more MLA layer's latent per token: kv_lora_rank + qk_rope_head_dim in bf16 (vLLM MLAAttentionSpec)
    assert mtp.kv.bytes_per_token - plain.kv.bytes_per_token == (32 + 8) * 2
    assert mtp.budget.weights_bytes - plain.budget.weights_bytes == mtp.drafter.weights_bytes > 0
    per_layer = (plain.budget.weights_bytes - 2 * 100 * 64 * 2) / 3  # rope cache aside, < one layer each
    assert 0.5 * per_layer < mtp.drafter.weights_bytes < 3 * per_layer
    assert '"method": "deepseek_mtp", "num_speculative_tokens": 1' in mtp.command
    assert mtp.ok


def test_draft_model_budget_and_vllm_0_10_refusal(configs: dict[str, str]) -> None:
    plain = serve(configs["llama"], gpu="H100-SXM", **SMALL)
    spec = serve(configs["llama"], gpu="H100-SXM", speculative_model=configs["draft"], num_speculative_tokens=3,
                 **SMALL)
    draft = serve(configs["draft"], gpu="H100-SXM", **SMALL)
    assert spec.drafter is not None
    assert spec.kv.bytes_per_token == plain.kv.bytes_per_token + draft.kv.bytes_per_token
    assert spec.drafter.weights_bytes == draft.params_count * 2
    assert not spec.ok and spec.reason.startswith("NotImplementedError: Speculative decoding with draft model")
    assert """--speculative-config '{"model": """ in spec.command


def test_adapters_and_speculation_in_the_decode_step_of_an_8b_shape() -> None:
    # Llama-3.1-8B's shape on an H100 (tiny models sit on the kernels' latency floors): LoRA reads the adapters
    # in use and runs every token through one
    import dataclasses

    from gpuplan.hardware import resolve_gpu
    from gpuplan.serve.timing import ModelShape, decode_step

    h100 = resolve_gpu("H100-SXM")
    assert h100 is not None
    shape = ModelShape(8_030_261_248, 16_060_522_496, 32, 32, 4096, 32, 128, "bfloat16", 2)
    adapters = dataclasses.replace(shape, adapter_params=42_000_000, max_adapters=8)
    base = decode_step(shape, h100, 1, batch=64, context=2048, kv_read_bytes=64 * 2048 * 131072)
    with_lora = decode_step(adapters, h100, 1, batch=64, context=2048, kv_read_bytes=64 * 2048 * 131072)
    assert with_lora.seconds > base.seconds


@pytest.mark.parametrize("tokens", [1, 4])
def test_more_acceptance_never_slower(configs: dict[str, str], tokens: int) -> None:
    steps = [serve(configs["deepseek"], gpu="H100-SXM", speculative_method="mtp", num_speculative_tokens=tokens,
                   spec_acceptance=a, **SMALL).decode.seconds for a in (0.0, 0.5, 0.9, 1.0)]
    assert steps == sorted(steps, reverse=True)
    assert Speculation("mtp", None, tokens, 1.0).accepted_per_step == tokens + 1
    assert Speculation("mtp", None, tokens, 0.0).accepted_per_step == 1


@pytest.mark.parametrize("argv, message", [
    (["--max-loras", "2", "--max-lora-rank", "12"], "--max-lora-rank 12 is not one vLLM accepts"),
    (["--max-lora-rank", "16"], "add --max-loras"),
    (["--max-loras", "2", "--engine", "sglang"], "--max-loras is modelled for --engine vllm only"),
    (["--speculative-method", "mtp"], "has no multi-token-prediction layers"),
    (["--speculative-method", "draft"], "needs --speculative-model"),
    (["--speculative-method", "mtp", "--spec-acceptance", "1.5"], "must be a probability"),
])
def test_bad_lora_or_speculative_input_is_one_line_exit_2(configs: dict[str, str], argv: list[str],
                                                          message: str) -> None:
    model = configs["deepseek"] if "1.5" in argv else configs["llama"]
    code, out, err = run(model, "--gpu", "H100-SXM", *argv, *SMALL_ARGS)
    assert code == 2 and out == "" and message in err and err.count("\n") == 1


def test_cli_json_and_sglang_nextn(configs: dict[str, str]) -> None:
    code, out, _ = run(configs["deepseek"], "--gpu", "H100-SXM", "--engine", "sglang", "--speculative-method", "mtp",
                       "--num-speculative-tokens", "2", "--json", *SMALL_ARGS)
    data = json.loads(out)
    assert code == 0 and data["speculative"]["accepted_tokens_per_step"] == pytest.approx(1 + 0.85 + 0.85 ** 2)
    assert "--speculative-algorithm NEXTN --speculative-num-steps 2 --speculative-eagle-topk 1 " \
           "--speculative-num-draft-tokens 3" in data["command"]
    code, out, _ = run(configs["llama"], "--gpu", "H100-SXM", "--max-loras", "2", "--json", *SMALL_ARGS)
    data = json.loads(out)
    assert code == 0 and data["lora"]["max_lora_rank"] == 16 and data["engine"]["max_loras"] == 2
    code, out, _ = run(configs["llama"], "--gpu", "H100-SXM", "--speculative-method", "draft", "--speculative-model",
                       configs["draft"], "--num-speculative-tokens", "2", "--spec-acceptance", "0.9", "--json",
                       *SMALL_ARGS)
    data = json.loads(out)
    assert code == 1 and data["ok"] is False  # vLLM 0.10.0 refuses a draft model; the budget is still shown
    assert data["speculative"]["acceptance"] == 0.9 and data["speculative"]["kv_bytes_per_token"] == 128


@pytest.mark.slow
def test_deepseek_v3_parameters_and_mtp_module_against_the_model_card(tmp_path: Any) -> None:
    """deepseek-ai/DeepSeek-V3 model card: "685B, which includes 671B of the Main Model weights and 14B of the
    Multi-Token Prediction (MTP) Module weights"; the MTP checkpoint layer carries its own copies of the
    embedding and the output head (2 × 129,280 × 7,168 = 1.853B), which vLLM shares with the model. Traced at 3
    and 2 blocks with 2 of the 3 dense layers kept (models/sources.py), the experts are counted (before: 37.4B,
    every traced block dense)."""
    config = json.loads((Path(__file__).parent / "data" / "deepseek-v3" / "config.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, "num_nextn_predict_layers": 1}))
    r = serve(str(path), gpu="H200", tp=8, quantization="fp8", speculative_method="mtp", context=4096)
    assert r.params_count == pytest.approx(671e9, rel=0.005)
    assert r.drafter is not None
    mtp_params = r.drafter.shape.params_count
    assert mtp_params == pytest.approx(14e9 - 2 * 129_280 * 7_168, abs=0.6e9)  # "14B" is rounded (±0.5B)
