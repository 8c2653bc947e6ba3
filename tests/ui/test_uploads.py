"""Uploads: a config.json or a safetensors header, checked by the library's readers before an id is
handed out; size-limited; messages name the user's file, never the server's folder."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from gpuplan.errors import ModelSourceError
from gpuplan.models.sources import SafetensorsSource
from gpuplan.ui.uploads import UPLOAD_MAX_BYTES, UploadStore, load_upload


def safetensors_header(tensors: dict[str, tuple[str, list[int]]]) -> tuple[bytes, int]:
    """(the header bytes of a safetensors file holding ``tensors``, their element count)."""
    bits = {"F32": 32, "BF16": 16, "F16": 16}
    header, offset, numel = {}, 0, 0
    for name, (dtype, shape) in tensors.items():
        n = 1
        for d in shape:
            n *= d
        size = n * bits[dtype] // 8
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset, numel = offset + size, numel + n
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text, numel


def test_config_upload_gets_a_stable_id_and_becomes_the_config_source(tmp_path: Path, tiny_config_bytes: bytes) -> None:
    store = UploadStore(tmp_path)
    first = store.add(tiny_config_bytes, "config.json")
    assert store.add(tiny_config_bytes, "other-name.json") == first  # same bytes, same share link
    source = load_upload(tmp_path, first)
    assert source.name == f"upload:{first}"
    assert source.config_dict["n_embd"] == json.loads(tiny_config_bytes)["n_embd"]


def test_header_only_safetensors_counts_the_weights_without_storing_them(tmp_path: Path) -> None:
    # 7B-sized tensors: the upload is the header (a few hundred bytes), the data section is never sent
    header, numel = safetensors_header({"embed.weight": ("BF16", [32000, 4096]),
                                        "layers.0.mlp.weight": ("BF16", [11008, 4096]), "norm": ("F32", [4096])})
    store = UploadStore(tmp_path)
    upload_id = store.add(header, "model.safetensors")
    source = load_upload(tmp_path, upload_id)
    assert isinstance(source, SafetensorsSource)
    assert source.summary.params_count == numel == 32000 * 4096 + 11008 * 4096 + 4096  # exact: shapes summed
    assert source.summary.weight_bytes == 2 * (32000 + 11008) * 4096 + 4 * 4096
    on_disk = sum(p.stat().st_blocks * 512 for p in (tmp_path / upload_id).iterdir())
    assert on_disk < 1_000_000  # sparse: the declared 350 MB of weights take no disk


@pytest.mark.parametrize(("data", "words"), [
    (b"{\"model_type\": 3}", "'model_type' must be a non-empty string"),
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "neither a config.json"),
    (b"   ", "is empty"),
    (struct.pack("<Q", 10**9) + b"{}", "header of 1,000,000,000 bytes"),
    (struct.pack("<Q", 2) + b"[]", "not an object"),
])
def test_bad_files_are_one_line_naming_the_users_file(tmp_path: Path, data: bytes, words: str) -> None:
    with pytest.raises(ModelSourceError) as info:
        UploadStore(tmp_path / "store").add(data, "my-config.json")
    message = str(info.value)
    assert words in message and "\n" not in message
    assert str(tmp_path) not in message  # the server's folder is nobody's business
    assert not [p for p in (tmp_path / "store").iterdir()]  # nothing half-stored


def test_oversized_upload_is_refused_with_the_limit(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match=f"at most {UPLOAD_MAX_BYTES:,}"):
        UploadStore(tmp_path).add(b"{" + b" " * UPLOAD_MAX_BYTES + b"}", "big.json")


def test_unknown_upload_id_says_to_upload_again(tmp_path: Path) -> None:
    with pytest.raises(ModelSourceError, match="upload the file again"):
        load_upload(tmp_path, "0123456789abcdef")


def test_concurrent_identical_uploads_all_get_the_id(tmp_path: Path, tiny_config_bytes: bytes) -> None:
    """Issue 18 item 6: identical uploads at once raced on one temporary name (FileExistsError -> HTTP 500)."""
    from concurrent.futures import ThreadPoolExecutor

    store = UploadStore(tmp_path)
    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(lambda _: store.add(tiny_config_bytes, "config.json"), range(32)))
    assert len(set(ids)) == 1
    assert [p.name for p in tmp_path.iterdir()] == [ids[0]]  # no temporary folder left behind
