"""``quantization_config`` of config.json (issue 11): parsed into one typed record, or refused in one line.

The configs below have the shape and values of published checkpoints' config.json files (named per
case); transformers' quantizer classes (transformers/utils/quantization_config.py) define the fields.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.cli.main import main
from gpuplan.errors import ModelSourceError
from gpuplan.models.quant_config import QUANT_METHODS, SCHEMES, QuantizationConfig, parse_quantization_config
from gpuplan.models.sources import HFConfigSource
from tests.fixtures.tiny_models import TINY_LLAMA

PUBLISHED: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # unsloth/llama-3-8b-bnb-4bit (QLoRA's base: NF4, double quantization, bf16 compute)
    "bnb-nf4": ({"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": False,
                 "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": True, "bnb_4bit_compute_dtype": "bfloat16",
                 "llm_int8_skip_modules": None, "llm_int8_threshold": 6.0, "llm_int8_has_fp16_weight": False},
                {"scheme": "bnb-nf4", "bits": 4, "group_size": 64, "double_quant": True, "compute_dtype": "bfloat16"}),
    # a transformers < 4.31 LLM.int8 save: no quant_method, load_in_8bit only
    "bnb-int8": ({"load_in_8bit": True, "llm_int8_threshold": 6.0},
                 {"method": "bitsandbytes", "scheme": "bnb-int8", "bits": 8, "strategy": "channel"}),
    # TheBloke/Llama-2-7B-GPTQ
    "gptq": ({"quant_method": "gptq", "bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": False,
              "sym": True, "true_sequential": True, "model_name_or_path": None, "model_file_base_name": "model"},
             {"scheme": "gptq", "bits": 4, "group_size": 128, "symmetric": True, "act_order": False}),
    # TheBloke/Llama-2-7B-AWQ
    "awq": ({"quant_method": "awq", "zero_point": True, "group_size": 128, "bits": 4, "version": "gemm"},
            {"scheme": "awq", "bits": 4, "group_size": 128, "symmetric": False, "version": "gemm"}),
    # Qwen/Qwen3-8B-FP8 (fine-grained FP8, 128×128 weight blocks)
    "fp8": ({"quant_method": "fp8", "activation_scheme": "dynamic", "modules_to_not_convert": None,
             "weight_block_size": [128, 128]},
            {"scheme": "fp8", "bits": 8, "strategy": "block", "block_shape": (128, 128)}),
    # meta-llama/Llama-3.1-405B-Instruct-FP8
    "fbgemm_fp8": ({"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                    "modules_to_not_convert": ["lm_head"]},
                   {"scheme": "fp8", "bits": 8, "strategy": "channel", "skip_modules": ("lm_head",)}),
    # openai/gpt-oss-20b
    "mxfp4": ({"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]},
              {"scheme": "mxfp4", "bits": 4, "group_size": 32}),
    # neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8 (compressed-tensors, per-channel FP8 weights)
    "ct-fp8": ({"quant_method": "compressed-tensors", "format": "float-quantized", "quantization_status": "compressed",
                "ignore": ["lm_head"], "config_groups": {"group_0": {
                    "targets": ["Linear"], "output_activations": None,
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True,
                                "dynamic": False, "group_size": None},
                    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": True}}}},
               {"scheme": "fp8", "bits": 8, "strategy": "channel", "skip_modules": ("lm_head",)}),
    # neuralmagic/Meta-Llama-3.1-8B-Instruct-quantized.w4a16 (compressed-tensors, packed int4, groups of 128)
    "ct-w4a16": ({"quant_method": "compressed-tensors", "format": "pack-quantized", "ignore": ["lm_head"],
                  "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": None,
                                                "weights": {"num_bits": 4, "type": "int", "strategy": "group",
                                                            "group_size": 128, "symmetric": True}}}},
                 {"scheme": "int4", "bits": 4, "group_size": 128, "strategy": "group", "version": "pack-quantized"}),
}


@pytest.mark.parametrize("case", list(PUBLISHED))
def test_published_configs_parse(case: str) -> None:
    raw, expected = PUBLISHED[case]
    parsed = parse_quantization_config(raw, where="config.json")
    for field, value in expected.items():
        assert getattr(parsed, field) == value, (case, field)
    assert parsed.method in QUANT_METHODS and parsed.scheme in SCHEMES and parsed.raw == raw


def _config(tmp_path: Path, quant: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY_LLAMA, "quantization_config": quant}))
    return path


def test_the_source_exposes_it_and_plain_configs_have_none() -> None:
    raw = PUBLISHED["gptq"][0]
    assert HFConfigSource("q", {**TINY_LLAMA, "quantization_config": raw}).quantization() == \
        parse_quantization_config(raw, where="q")
    assert HFConfigSource("plain", TINY_LLAMA).quantization() is None


@pytest.mark.parametrize(("quant", "words"), [
    ({"quant_method": "quanto", "weights": "int8"}, "allowed: bitsandbytes, gptq, awq, fp8, compressed-tensors"),
    ({"quant_method": "GPTQ", "bits": 4}, "did you mean gptq"),
    ({"quant_method": "gptq", "bits": 5}, "'bits' is 5"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "load_in_8bit": True}, "exactly one"),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf5"}, "nf4, fp4"),
    ({"quant_method": "fp8", "weight_block_size": [128]}, "two positive integers"),
    ({"quant_method": "compressed-tensors", "config_groups": {}}, "config_groups"),
    (["gptq"], "not an object"),
])
def test_bad_quantization_configs_are_one_line_and_exit_2(tmp_path: Path, quant: object, words: str) -> None:
    path = _config(tmp_path, quant)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", str(path), "--json"])
    assert code == 2 and out.getvalue() == "" and err.getvalue().count("\n") == 1
    assert words in err.getvalue() and str(path) in err.getvalue()


_JSON = st.recursive(st.none() | st.booleans() | st.integers(-3, 300) | st.sampled_from(
    ["nf4", "fp4", "int", "float", "channel", "group", "gemm", "bfloat16", "lm_head"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["num_bits", "type", "strategy", "group_size", "weights", "symmetric", "block_structure"]), inner,
        max_size=4), max_leaves=8)
_KEYS = st.sampled_from(["quant_method", "bits", "group_size", "load_in_4bit", "load_in_8bit", "bnb_4bit_quant_type",
                         "bnb_4bit_use_double_quant", "desc_act", "sym", "zero_point", "version", "weight_block_size",
                         "config_groups", "ignore", "modules_to_not_convert", "llm_int8_skip_modules", "format"])


@settings(max_examples=300)
@given(st.dictionaries(_KEYS, _JSON | st.sampled_from(QUANT_METHODS), max_size=8))
def test_any_field_values_give_a_record_or_one_line(raw: dict[str, Any]) -> None:
    """Invariant: a parsed record always has a known method, scheme and a positive bit width; anything else
    is one ModelSourceError line (never a KeyError, TypeError or AttributeError from a bad value)."""
    try:
        parsed = parse_quantization_config(raw, where="config.json")
    except ModelSourceError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 400
        return
    assert isinstance(parsed, QuantizationConfig)
    assert parsed.method in QUANT_METHODS and parsed.scheme in SCHEMES and parsed.bits in (2, 3, 4, 8)
    assert parsed.group_size is None or parsed.group_size > 0
