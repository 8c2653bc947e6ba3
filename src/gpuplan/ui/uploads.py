"""Files users upload to the web page: a config.json or a safetensors header, never code.

Each upload is stored under the server's own temporary folder as ``<id>/config.json`` or
``<id>/model.safetensors`` (the id is a hash of the bytes, so the same file gets the same share link)
and checked by the library's readers (:mod:`gpuplan.models.files`) before an id is handed out.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, Final

from gpuplan.errors import ModelSourceError, one_line
from gpuplan.models.files import CONFIG_MAX_BYTES, read_config_json, read_safetensors_headers
from gpuplan.userio import parse_user_json

UPLOAD_MAX_BYTES: Final = CONFIG_MAX_BYTES
"""Largest upload: the library's config.json limit. A safetensors *header* is well under it (a 405B
checkpoint shard's header is about 100 KB); a whole checkpoint is refused with this number."""

MAX_UPLOADS: Final = 256
"""Uploads kept; the oldest go first (each is at most UPLOAD_MAX_BYTES on disk)."""

MAX_DATA_BYTES: Final = 1 << 44
"""Largest data section a header may declare (16 TiB): the header-only file is padded to it sparsely."""

CONFIG_NAME: Final = "config.json"
SAFETENSORS_NAME: Final = "model.safetensors"


def _hint(exc: ModelSourceError, path: Path, filename: str) -> ModelSourceError:
    """The library's message with the server's temporary path replaced by the user's file name."""
    return ModelSourceError(one_line(str(exc).replace(str(path), repr(filename)[1:-1])))


def _safetensors_data_end(data: bytes, filename: str) -> int:
    """The largest data offset the header declares (what a header-only upload is padded to)."""
    header_len = int.from_bytes(data[:8], "little") if len(data) >= 8 else 0
    if not 2 <= header_len <= len(data) - 8:
        raise ModelSourceError(
            f"{filename!r} is neither a config.json (a JSON object) nor a safetensors header: its first 8 bytes "
            f"give a header of {header_len:,} bytes but {max(len(data) - 8, 0):,} follow; upload the config.json, "
            f"or the first bytes of the .safetensors file up to the end of its header")
    try:
        text = data[8:8 + header_len].decode("utf-8")
    except UnicodeDecodeError:
        raise ModelSourceError(f"{filename!r}: the safetensors header is not UTF-8 JSON") from None
    header = parse_user_json(text, what=f"the safetensors header of {filename!r}", error=ModelSourceError)
    ends = [meta["data_offsets"][1] for meta in (header.values() if isinstance(header, dict) else ())
            if isinstance(meta, dict) and isinstance(meta.get("data_offsets"), list)
            and len(meta["data_offsets"]) == 2 and isinstance(meta["data_offsets"][1], int)]
    end = max(ends, default=0)
    if not 0 <= end <= MAX_DATA_BYTES:
        raise ModelSourceError(f"{filename!r}: the header declares {end:,} bytes of weights; at most "
                               f"{MAX_DATA_BYTES:,} are accepted")
    return int(end)


class UploadStore:
    """Uploaded model files under ``root`` (the server's temporary folder)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def add(self, data: bytes, filename: str) -> str:
        """Store and check ``data``; return its id, or raise a one-line ModelSourceError."""
        if len(data) > UPLOAD_MAX_BYTES:
            raise ModelSourceError(f"{filename!r} is {len(data):,} bytes; uploads are at most {UPLOAD_MAX_BYTES:,} "
                                   "(a config.json, or a safetensors file's header only)")
        if not data.strip():
            raise ModelSourceError(f"{filename!r} is empty; upload a config.json or a safetensors header")
        upload_id = hashlib.sha256(data).hexdigest()[:16]
        folder = self.root / upload_id
        if folder.exists():
            return upload_id
        # a fresh folder per request: identical uploads at once each write their own, and the first rename wins
        tmp = Path(tempfile.mkdtemp(prefix=f".{upload_id}.", suffix=".partial", dir=self.root))
        try:
            if data.lstrip()[:1] == b"{":
                path = tmp / CONFIG_NAME
                path.write_bytes(data)
                try:
                    read_config_json(path)
                except ModelSourceError as exc:
                    raise _hint(exc, path, filename) from None
            else:
                path = tmp / SAFETENSORS_NAME
                end = _safetensors_data_end(data, filename)
                header_bytes = 8 + int.from_bytes(data[:8], "little")
                with path.open("wb") as fh:
                    fh.write(data[:header_bytes])
                    fh.truncate(header_bytes + end)  # sparse: the weights are never needed, only their size
                try:
                    read_safetensors_headers(path)
                except ModelSourceError as exc:
                    raise _hint(exc, path, filename) from None
            try:
                tmp.rename(folder)
            except OSError:
                if not (folder / path.name).exists():  # not a concurrent twin that landed first
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._evict()
        return upload_id

    def _evict(self) -> None:
        aged: list[tuple[float, Path]] = []
        for p in self.root.iterdir():
            if p.name.startswith("."):
                continue
            try:  # another request may evict the same folder meanwhile
                aged.append((p.stat().st_mtime, p))
            except FileNotFoundError:
                continue
        for _, old in sorted(aged)[:-MAX_UPLOADS]:
            shutil.rmtree(old, ignore_errors=True)


def load_upload(root: Path, upload_id: str) -> Any:
    """The model source of an upload: an HFConfigSource for a config.json, a SafetensorsSource for a header."""
    from gpuplan.models.sources import HFConfigSource, SafetensorsSource

    folder = root / upload_id
    if (folder / CONFIG_NAME).exists():
        return HFConfigSource(f"upload:{upload_id}", read_config_json(folder / CONFIG_NAME))
    if (folder / SAFETENSORS_NAME).exists():
        source = SafetensorsSource(folder / SAFETENSORS_NAME)
        source.name = f"upload:{upload_id}"
        return source
    raise ModelSourceError(f"upload:{upload_id} is not on this server (uploads are kept while it runs, "
                           f"{MAX_UPLOADS} at most); upload the file again")
