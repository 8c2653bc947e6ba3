"""GGUF files (issue 11): weight bytes per quantization type from the header alone, exact.

Files are written in the test with the ``gguf`` package's own writer (tests/fixtures/model_files.py).
Expected bytes come two ways: the bytes of the arrays handed to the writer (exact accounting), and
ggml's documented block layouts (ggml/src/ggml-common.h: ``block_q8_0`` = fp16 scale + 32 int8 = 34 bytes
per 32 weights; ``block_q4_0`` = fp16 scale + 16 bytes = 18 per 32; ``block_q4_K`` = 2 fp16 + 12 scale
bytes + 128 = 144 per 256; ``block_q6_K`` = 128 + 64 + 16 + fp16 = 210 per 256).
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import quantize
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuplan.cli.main import main
from gpuplan.errors import ModelSourceError
from gpuplan.models.gguf import read_gguf_header
from gpuplan.models.sources import GGUFSource, HFConfigSource, resolve_model
from tests.fixtures.model_files import write_gguf
from tests.fixtures.tiny_models import TINY_LLAMA

# (weights per block, bytes per block) as ggml-common.h lays the blocks out
DOCUMENTED_BLOCKS = {"Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_K": (256, 144), "Q6_K": (256, 210)}
ROWS = 64


def _mixed_file(path: Path) -> dict[str, int]:
    """A Q4_K_M-like mix: two quantized matrices from real values, two K-quant matrices as raw blocks,
    an fp32 norm and an fp16 embedding."""
    rng = np.random.default_rng(0)
    weights = rng.standard_normal((ROWS, 256)).astype(np.float32)
    return write_gguf(path, {
        "blk.0.attn_q.weight": (quantize(weights, Q.Q8_0), Q.Q8_0),
        "blk.0.attn_k.weight": (quantize(weights, Q.Q4_0), Q.Q4_0),
        "blk.0.ffn_up.weight": (np.zeros((ROWS, 2 * 144), dtype=np.uint8), Q.Q4_K),   # 512 weights per row
        "blk.0.ffn_down.weight": (np.zeros((ROWS, 210), dtype=np.uint8), Q.Q6_K),
        "blk.0.attn_norm.weight": (np.ones(256, dtype=np.float32), None),
        "token_embd.weight": (np.ones((10, 256), dtype=np.float16), None),
    })


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, dict[str, int]]:
    path = tmp_path / "tiny-Q4_K_M.gguf"
    return path, _mixed_file(path)


def test_weight_bytes_per_quant_type_are_exact(mixed: tuple[Path, dict[str, int]]) -> None:
    path, written = mixed
    summary = read_gguf_header(path)
    assert summary.format == "gguf" and summary.architecture == "llama"
    assert summary.dtype_bytes == written  # the bytes the writer was handed, type by type
    params = {"Q8_0": ROWS * 256, "Q4_0": ROWS * 256, "Q4_K": ROWS * 512, "Q6_K": ROWS * 256, "F32": 256,
              "F16": 10 * 256}
    assert summary.dtypes == params
    for qtype, (block, nbytes) in DOCUMENTED_BLOCKS.items():
        assert summary.dtype_bytes[qtype] == params[qtype] // block * nbytes, qtype
    assert summary.params_count == sum(params.values())
    assert summary.weight_bytes == sum(written.values()) == sum(summary.tensor_bytes)


def test_the_header_parser_agrees_with_the_gguf_packages_reader(mixed: tuple[Path, dict[str, int]]) -> None:
    from gguf import GGUFReader

    path, _ = mixed
    reader = GGUFReader(path)
    summary = read_gguf_header(path)
    assert summary.tensor_bytes == tuple(int(t.n_bytes) for t in reader.tensors)
    by_type: dict[str, int] = {}
    for t in reader.tensors:
        by_type[t.tensor_type.name] = by_type.get(t.tensor_type.name, 0) + int(t.n_elements)
    assert summary.dtypes == by_type
    assert summary.architecture == reader.fields["general.architecture"].contents()


def _estimate(*argv: str) -> tuple[int, dict[str, Any], str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["estimate", *argv, "--json"])
    return code, (json.loads(out.getvalue()) if out.getvalue() else {}), err.getvalue()


def test_a_gguf_alone_is_a_weights_only_estimate(mixed: tuple[Path, dict[str, int]]) -> None:
    path, written = mixed
    assert isinstance(resolve_model(str(path)), GGUFSource)
    assert isinstance(resolve_model(str(path.parent)), GGUFSource)  # its folder, holding one model
    code, result, err = _estimate(str(path), "--mode", "infer")
    assert code == 0, err
    assert result["components"]["parameters"] == sum(written.values())
    assert result["params_count"] == read_gguf_header(path).params_count
    assert any("gguf headers" in a and "Q4_K" in a for a in result["assumptions"])
    code, result, err = _estimate(str(path), "--mode", "train")
    assert code == 2 and err.count("\n") == 1 and "config.json" in err


def test_with_a_config_json_beside_it_the_estimate_is_full_and_knows_the_stored_bytes(
        mixed: tuple[Path, dict[str, int]]) -> None:
    path, written = mixed
    (path.parent / "config.json").write_text(json.dumps(TINY_LLAMA))
    source = resolve_model(str(path))
    assert isinstance(source, HFConfigSource) and source.config_dict == TINY_LLAMA
    stored = source.stored_weights()
    assert stored is not None and stored.format == "gguf" and stored.dtype_bytes == written
    assert source.describe()["stored_weights"]["weight_bytes"] == sum(written.values())


def test_a_split_model_is_summed_and_unrelated_files_are_refused(tmp_path: Path) -> None:
    total = 0
    for i in (1, 2):
        total += sum(write_gguf(tmp_path / f"m-0000{i}-of-00002.gguf",
                                {f"w{i}": (np.ones((4, 32), dtype=np.float32), None)}).values())
    assert read_gguf_header(tmp_path).weight_bytes == total
    _mixed_file(tmp_path / "other-Q8_0.gguf")
    with pytest.raises(ModelSourceError, match="not one split model") as info:
        resolve_model(str(tmp_path))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(("damage", "words"), [
    (lambda data: b"", "starts with"),
    (lambda data: b"GGML" + data[4:], "starts with"),
    (lambda data: data[:40], "not a valid GGUF file"),
    (lambda data: data[:-100], "not a valid GGUF file"),
])
def test_damaged_files_are_one_line(mixed: tuple[Path, dict[str, int]], damage: Any, words: str) -> None:
    path, _ = mixed
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(ModelSourceError, match=words) as info:
        resolve_model(str(path))
    assert "\n" not in str(info.value) and len(str(info.value)) < 400


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.integers(min_value=0, max_value=4000), flip=st.integers(min_value=0, max_value=4000),
       value=st.integers(min_value=0, max_value=255))
def test_any_truncated_or_corrupted_header_is_a_model_source_error(tmp_path: Path, cut: int, flip: int,
                                                                   value: int) -> None:
    """Invariant: whatever the damage, the answer is a consistent summary or one ModelSourceError line."""
    path = tmp_path / "fuzz.gguf"
    if not path.exists():
        _mixed_file(path)
    data = bytearray(path.read_bytes())
    if flip < len(data):
        data[flip] = value
    damaged = tmp_path / "damaged.gguf"
    damaged.write_bytes(bytes(data[: len(data) - cut]))
    try:
        summary = read_gguf_header(damaged)
    except ModelSourceError as exc:
        assert "\n" not in str(exc)
        return
    assert summary.weight_bytes == sum(summary.tensor_bytes) == sum(summary.dtype_bytes.values())
    assert summary.params_count == sum(summary.dtypes.values())
