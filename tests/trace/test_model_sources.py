"""MODEL sources other than the catalog: config.json files and folders, safetensors headers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from gpuplan.errors import ModelSourceError, UnknownModelError
from gpuplan.estimate import estimate
from gpuplan.models.sources import resolve_model
from tests.fixtures.tiny_models import TINY_LLAMA


@pytest.mark.slow
def test_config_json_file_and_folder(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({**TINY_LLAMA, "architectures": ["LlamaForCausalLM"]}))
    by_file = estimate(str(tmp_path / "config.json"), mode="infer", batch_size=1, seq_len=16)
    by_folder = estimate(str(tmp_path), mode="infer", batch_size=1, seq_len=16)
    assert by_file.params_count == by_folder.params_count > 0
    assert by_file.peak_allocated_bytes == by_folder.peak_allocated_bytes


def test_safetensors_headers_alone_give_weights_memory(tmp_path: Path) -> None:
    tensors = {"embed.weight": torch.zeros(1000, 64, dtype=torch.bfloat16),
               "layer.weight": torch.zeros(64, 64, dtype=torch.float32)}
    path = tmp_path / "model.safetensors"
    save_file(tensors, str(path))
    est = estimate(str(path), mode="infer")
    assert est.params_count == 1000 * 64 + 64 * 64
    assert est.components["parameters"] == 1000 * 64 * 2 + 64 * 64 * 4
    assert est.peak_reserved_bytes >= est.peak_allocated_bytes >= est.components["parameters"]
    with pytest.raises(ModelSourceError, match=r"no config\.json beside it"):
        estimate(str(path), mode="train")


def test_safetensors_with_config_beside_it_is_the_full_model(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    save_file({"w": torch.zeros(2)}, str(tmp_path / "model.safetensors"))
    assert resolve_model(str(tmp_path / "model.safetensors")).kind == "hf-config"


def test_garbled_safetensors_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.safetensors"
    path.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00not json at all!")
    with pytest.raises(ModelSourceError, match=r"safetensors header of .* is not valid JSON"):
        resolve_model(str(path))


def test_unknown_model_lists_close_names() -> None:
    with pytest.raises(UnknownModelError, match=r"llama-3\.1-8b"):
        resolve_model("llama-3.1-8")
