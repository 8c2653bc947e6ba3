"""The web query: validated in the server before any worker is asked; canonical, so that a share link,
the cache key and the worker's job agree; web input never names a path, a Hub id or code."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import ConfigError, GpuplanError, UnknownModelError
from gpuplan.models.catalog import catalog_names
from gpuplan.ui.query import VERB_OPTIONS, parse_query
from gpuplan.workload import Workload

CATALOG = tuple(catalog_names())


def test_no_model_is_the_empty_form() -> None:
    assert parse_query({}, CATALOG) is None
    assert parse_query({"model": "", "batch_size": ""}, CATALOG) is None


def test_fields_become_the_library_workload_and_a_canonical_link() -> None:
    q = parse_query({"model": "gpt2", "verb": "estimate", "batch_size": "4", "seq_len": " 128 ", "precision": "bf16",
                     "gpu": "h100", "max_gpus": "3", "mode": ""}, CATALOG)
    assert q is not None
    assert q.workload == Workload(batch_size=4, seq_len=128, precision="bf16")
    assert q.option("gpu") == "H100-SXM"  # canonical id: 'h100' and 'H100-SXM' share a link and a cache entry
    assert q.ignored == ("max_gpus",)  # recommend's field, filled in on the same form: left out
    assert q.params() == {"verb": "estimate", "model": "gpt2", "batch_size": "4", "precision": "bf16",
                          "seq_len": "128", "gpu": "H100-SXM"}


def test_serve_takes_no_workload_and_says_which_fields_it_left_out() -> None:
    q = parse_query({"model": "gpt2", "verb": "serve", "gpu": "l4", "batch_size": "8", "tp": "2",
                     "engine": "sglang"}, CATALOG)
    assert q is not None and q.workload == Workload()
    assert q.ignored == ("batch_size",)
    assert q.params() == {"verb": "serve", "model": "gpt2", "engine": "sglang", "gpu": "L4", "tp": "2"}


@pytest.mark.parametrize("model", ["../../etc/passwd", "/tmp/config.json", "meta-llama/Llama-3.1-8B", "x.py:build",
                                   "os:system", "https://example.com/config.json", "gpt2@main", "upload:../../x",
                                   "upload:XYZ"])
def test_web_input_never_names_a_path_a_hub_id_or_code(model: str) -> None:
    with pytest.raises((UnknownModelError, ConfigError)) as info:
        parse_query({"model": model}, CATALOG)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("params", "words"), [
    ({"model": "gpt2", "batch_size": "two"}, "batch_size: expected a whole number, got 'two'"),  # the CLI's words
    ({"model": "gpt2", "batch_size": "0"}, "batch size 0 is out of range"),
    ({"model": "gpt2", "precision": "fp64"}, "fp64"),
    ({"model": "gpt2", "verb": "estimat"}, "did you mean estimate"),
    ({"model": "gpt2", "bogus": "1"}, "unknown parameter(s) bogus"),
    ({"model": "gpt2", "verb": "fit"}, "fit needs gpu"),
    ({"model": "gpt2", "verb": "plan", "gpu": "H100-SXM"}, "plan needs gpus"),
    ({"model": "gpt2", "gpu": "H100-SMX"}, "H100-SXM"),
    ({"model": "gpt2", "verb": "plan", "gpu": "H100", "gpus": "8", "zero": "4"},
     "zero: invalid choice: 4 (choose from 0, 1, 2, 3)"),
    ({"model": "gpt2", "verb": "recommend", "budget_usd": "nan"}, "expected an amount of US dollars, got 'nan'"),
    ({"model": "gpt2", "seq_len": "9" * 300}, "too long"),
])
def test_bad_values_are_one_line_naming_the_value(params: dict[str, str], words: str) -> None:
    with pytest.raises(GpuplanError) as info:
        parse_query(params, CATALOG)
    assert words in str(info.value)
    assert "\n" not in str(info.value)


FIELDS = ["model", "verb", "batch_size", "seq_len", "mode", "precision", "gpu", "gpus", "zero", "fsdp",
          *sorted({k for spec in VERB_OPTIONS.values() for k in spec})]


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), st.one_of(st.text(max_size=12), st.sampled_from(
    ["gpt2", "estimate", "fit", "plan", "recommend", "4", "H100-SXM", "train", "bf16", "on", "2"]))))
def test_any_query_is_a_query_or_one_line_error_and_canonical_form_is_stable(params: dict[str, str]) -> None:
    try:
        q = parse_query(params, CATALOG)
    except GpuplanError as exc:
        assert "\n" not in str(exc)
        return
    if q is None:
        return
    again = parse_query(q.params(), CATALOG)  # the share link parses to the same query
    assert again is not None and again.key() == q.key() and again.workload == q.workload


def test_every_workload_field_is_offered_or_refused_never_dropped() -> None:
    """Issue 18 item 6: ``peft`` was a Workload field the page neither read nor refused."""
    from dataclasses import fields

    from gpuplan.ui.query import WORKLOAD_PARAMS

    assert sorted(WORKLOAD_PARAMS) == sorted(f.name for f in fields(Workload))


def test_peft_parameters_reach_the_workload_and_bad_ones_are_refused_by_name() -> None:
    """``/api/estimate?model=gpt2&peft=lora&lora_rank=16`` answered a full fine-tune before."""
    q = parse_query({"model": "gpt2", "peft": "lora", "lora_rank": "16", "lora_alpha": "32",
                     "lora_targets": "c_attn, c_proj", "load_in": "4bit"}, CATALOG)
    assert q is not None
    assert (q.workload.peft, q.workload.lora_rank, q.workload.lora_alpha) == ("lora", 16, 32.0)
    assert q.workload.lora_targets == ("c_attn", "c_proj") and q.workload.load_in == "4bit"
    assert q.params()["lora_targets"] == "c_attn,c_proj"  # canonical share link
    for params, words in (({"peft": "banana"}, "banana"), ({"lora_rank": "16"}, "lora_rank"),
                          ({"peft": "lora", "lora_dropout": "2"}, "LoRA dropout 2.0"),
                          ({"peft": "lora", "lora_targets": "a,,b"}, "lora_targets")):
        with pytest.raises(GpuplanError) as info:
            parse_query({"model": "gpt2", **params}, CATALOG)
        assert words in str(info.value) and "\n" not in str(info.value)
