"""An on-disk cache of traced steps, so a repeated or slightly varied query skips the trace.

Tracing is the only slow part of an answer (seconds to a minute); everything after it — memory on
any GPU, step time, the planner's layouts — is arithmetic on the :class:`TracedStep`. A query that
changes only the GPU (within the same kernel-choice class), the layout or the price list reads the
stored step back in milliseconds, without importing torch.

* **Keyed by everything the trace depends on:** the model's identity (the HF config as JSON, or a
  torchvision/timm builder's name and package version), the whole workload, the compute-capability
  class that picks kernels (:data:`gpuplan.trace.capability.TRACE_CC_THRESHOLDS`), the versions
  of torch, transformers and the other libraries that build or wrap the model, and a hash of
  gpuplan's own source (a changed rule never reads an old answer). Models built by user code
  (``file.py:factory``, ``package.module:factory``) are never cached: their code can change in ways
  no key sees.
* **Never unpickled:** entries are JSON, decoded into an allow-list of plain dataclasses whose field
  names must match exactly; anything else is a corrupt entry.
* **Safe:** a header carries the key and a SHA-256 of the payload; a corrupt, truncated or foreign
  entry is ignored (and replaced) with a note in the answer, never trusted. Writers write a
  private temporary file and rename it into place (atomic on POSIX), so concurrent writers of one key
  leave one whole entry. The directory is capped in size; the least recently used entries go first.

The library uses no cache unless asked (``with use_trace_cache(TraceCache(...))``); the command line
turns it on by default in the user cache directory (``--no-cache`` or ``GPUPLAN_CACHE=off`` bypass it).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import hashlib
import json
import os
import tempfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.trace.capability import trace_cc_class
from gpuplan.trace.records import MemEvent, OpRecord, RawTrace, RunResult, StepPoint, StorageInfo, TracedStep

if TYPE_CHECKING:
    from gpuplan.models.sources import HFConfigSource, ModelSource
    from gpuplan.workload import Workload

FORMAT = "gpuplan-trace-cache"
FORMAT_VERSION = 1
DEFAULT_MAX_BYTES = 512 * 2**20
"""Cap of the cache directory (``GPUPLAN_CACHE_MAX_MB`` overrides it): a scaled trace of an 8B model
is about 0.1 MB compressed, so this keeps thousands of answers."""
_MAX_ENTRY_BYTES = 64 * 2**20
"""An entry larger than this is not read (a stray or hostile file is never decompressed in full)."""
_FACTS_SUFFIX = ".facts"
"""Entries of facts about a model read with a library (its layer counts), beside its ``.trace`` entries."""
_MAX_FACTS_BYTES = 64 * 2**10
# Libraries whose version changes what is built or traced.
_LIBRARIES: tuple[str, ...] = ("torch", "transformers", "peft", "timm", "torchvision", "bitsandbytes", "torchao")

_active: contextvars.ContextVar[TraceCache | None] = contextvars.ContextVar("gpuplan_trace_cache", default=None)


class CorruptEntry(Exception):
    """A cache entry that cannot be trusted (its text says why)."""


# -- the codec: JSON of an allow-list of plain dataclasses ----------------------------------------


def _classes() -> dict[str, type]:
    return {c.__name__: c for c in (TracedStep, RunResult, RawTrace, OpRecord, StepPoint, StorageInfo, MemEvent)}


# Lists of one record type are stored column by column: a trace is mostly such lists.
_COLUMNAR = (OpRecord, StepPoint, MemEvent)


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"t": type(value).__name__,
                "f": {f.name: _encode(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if isinstance(value, (list, tuple)):
        kind = "tuple" if isinstance(value, tuple) else "list"
        first = value[0] if value else None
        if first is not None and type(first) in _COLUMNAR and all(type(v) is type(first) for v in value):
            names = [f.name for f in dataclasses.fields(first)]
            return {"t": "columns", "of": type(first).__name__, "as": kind,
                    "c": {n: [_encode(getattr(v, n)) for v in value] for n in names}}
        return {"t": kind, "v": [_encode(v) for v in value]}
    if isinstance(value, frozenset):
        return {"t": "frozenset", "v": sorted(_encode(v) for v in value)}
    if isinstance(value, dict):
        return {"t": "dict", "v": [[_encode(k), _encode(v)] for k, v in value.items()]}
    raise TypeError(f"cannot store {type(value).__name__} in the trace cache")


def _decode(node: Any, classes: dict[str, type]) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if not isinstance(node, dict) or not isinstance(node.get("t"), str):
        raise CorruptEntry(f"unexpected {type(node).__name__} in the payload")
    tag = node["t"]
    if tag in ("list", "tuple", "frozenset"):
        items = [_decode(v, classes) for v in _as_list(node.get("v"))]
        return {"list": list, "tuple": tuple, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        pairs = [_as_list(p) for p in _as_list(node.get("v"))]
        if any(len(p) != 2 for p in pairs):
            raise CorruptEntry("a mapping entry is not a key-value pair")
        return {_decode(k, classes): _decode(v, classes) for k, v in pairs}
    if tag == "columns":
        cls = _allowed(node.get("of"), classes)
        columns = node.get("c")
        if not isinstance(columns, dict):
            raise CorruptEntry("columns without values")
        names = _check_fields(cls, columns)
        lengths = {len(_as_list(columns[n])) for n in names}
        if len(lengths) > 1:
            raise CorruptEntry(f"columns of {cls.__name__} differ in length")
        rows = zip(*(columns[n] for n in names), strict=True)
        records = [cls(**{n: _decode(v, classes) for n, v in zip(names, row, strict=True)}) for row in rows]
        return tuple(records) if node.get("as") == "tuple" else records
    cls = _allowed(tag, classes)
    fields = node.get("f")
    if not isinstance(fields, dict):
        raise CorruptEntry(f"{tag} without fields")
    _check_fields(cls, fields)
    try:
        return cls(**{k: _decode(v, classes) for k, v in fields.items()})
    except TypeError as exc:
        raise CorruptEntry(f"{tag}: {exc}") from exc


def _as_list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise CorruptEntry(f"expected a list, found {type(value).__name__}")
    return value


def _allowed(name: Any, classes: dict[str, type]) -> type:
    if not isinstance(name, str) or name not in classes:
        raise CorruptEntry(f"type {name!r} is not one the cache stores")
    return classes[name]


def _check_fields(cls: type, given: dict[str, Any]) -> list[str]:
    names = [f.name for f in dataclasses.fields(cls)]
    if set(given) != set(names):
        raise CorruptEntry(f"{cls.__name__} fields differ from this gpuplan's ({sorted(set(given) ^ set(names))})")
    return names


def encode_step(step: TracedStep) -> bytes:
    """``step`` as the cache's compressed JSON payload."""
    return zlib.compress(json.dumps(_encode(step), separators=(",", ":")).encode(), 6)


def decode_step(payload: bytes) -> TracedStep:
    """The :class:`TracedStep` of a payload made by :func:`encode_step`; :class:`CorruptEntry` otherwise."""
    try:
        decompressor = zlib.decompressobj()
        text = decompressor.decompress(payload, _MAX_ENTRY_BYTES * 8)
        if decompressor.unconsumed_tail:
            raise CorruptEntry("the payload expands past the size limit")
        node = json.loads(text)
    except (zlib.error, ValueError, RecursionError) as exc:
        raise CorruptEntry(f"unreadable payload ({type(exc).__name__})") from exc
    step = _decode(node, _classes())
    if not isinstance(step, TracedStep):
        raise CorruptEntry(f"the payload holds a {type(step).__name__}, not a traced step")
    return step


# -- the key ------------------------------------------------------------------------------------


def model_identity(source: ModelSource) -> dict[str, Any] | None:
    """What a model is, as far as the trace can tell, or None where it cannot be known (user code)."""
    from gpuplan.models.sources import HFConfigSource

    if isinstance(source, HFConfigSource):
        # the class too: a subclass may build, feed or score the model differently from the same config
        kind = type(source)
        identity: dict[str, Any] = {"form": "hf-config", "class": f"{kind.__module__}.{kind.__qualname__}",
                                    "task": source.task, "config": source.config_dict}
        # a source that traces more than the model's own step (serve's profile run) says what
        step = getattr(source, "trace_identity", None)
        return identity if step is None else {**identity, "step": step}
    if source.kind in ("torchvision", "timm"):
        return {"form": source.kind, "name": source.name}
    return None


@functools.lru_cache(maxsize=1)
def _environment() -> dict[str, Any]:
    from importlib import metadata

    from gpuplan.version import VERSION

    versions: dict[str, str | None] = {}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"gpuplan": VERSION, "code": _code_hash(), "libraries": versions}


def _code_hash() -> str:
    """SHA-256 over gpuplan's own Python source: an edited rule never reads an answer of the old one."""
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


FactValue = int | dict[str, Any] | None
"""What a model fact holds: a count, counts by name, a config document ``{"config": {...}}``, or None (the
model has none)."""


def fact_key(source: ModelSource, fact: str, workload: Workload | None = None) -> str | None:
    """The cache key of a fact about ``source`` (None: this model is not cached): the same identity and
    library versions as its traces, so an upgraded transformers reads its config again."""
    identity = model_identity(source)
    if identity is None:
        return None
    document = {"format": FORMAT_VERSION, "model": identity, "fact": fact, "environment": _environment(),
                "workload": workload.to_dict() if workload is not None else None}
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


def model_fact(source: ModelSource, fact: str, compute: Callable[[], FactValue],
               workload: Workload | None = None) -> FactValue:
    """``compute()``, read from the active cache when it holds the answer for this model (and ``workload``).
    For facts a library gives (transformers' reading of a config, a one-block build's position table), whose
    reading imports torch: kept beside the traces, a cached ``plan`` or ``fit`` never imports it."""
    cache = active_trace_cache()
    key = fact_key(source, fact, workload) if cache is not None else None
    if cache is None or key is None:
        return compute()
    found = cache.load_fact(key)
    if found is not None:
        return found[0]
    value = compute()
    cache.store_fact(key, value)
    return value


def layer_counts_of(source: ModelSource) -> dict[str, int]:
    """``source.layer_counts()`` through :func:`model_fact`: for a transformers config it is transformers' own
    reading (``AutoConfig``: the class defaults, derived ``layer_types``), and making one imports torch."""
    counts = model_fact(source, "layer_counts", source.layer_counts)
    return dict(counts) if isinstance(counts, dict) else {}


def hf_config_dict_of(source: HFConfigSource) -> dict[str, Any]:
    """``source.hf_config().to_dict()`` through :func:`model_fact`: transformers' full reading of the config (the
    class defaults filled in), which imports transformers and torch; a cached ``serve`` reads it from here."""
    # read as JSON from the first call on (id2label's int keys become strings), so a cache hit and a miss agree
    found = model_fact(source, "hf_config",
                       lambda: {"config": json.loads(json.dumps(source.hf_config().to_dict(), default=str))})
    if isinstance(found, dict) and isinstance(found.get("config"), dict):
        return dict(found["config"])
    raise AssertionError(f"model_fact gave {type(found).__name__} for a config")  # only what compute() gave


def trace_key(source: ModelSource, workload: Workload, compute_capability: tuple[int, int]) -> str | None:
    """The cache key of tracing ``source`` under ``workload`` for a GPU of ``compute_capability``
    (None: this model is not cached)."""
    identity = model_identity(source)
    if identity is None:
        return None
    # --high-precision-blocks only prices the traced program (perf/step_time.py): one trace serves every value
    traced = {k: v for k, v in workload.to_dict().items() if k != "high_precision_blocks"}
    document = {"format": FORMAT_VERSION, "model": identity, "workload": traced,
                "cc_class": trace_cc_class(compute_capability), "environment": _environment()}
    return hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()


# -- the store ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Lookup:
    """What a lookup found: the step (None on a miss) and a note when an entry had to be ignored."""

    step: TracedStep | None
    note: str | None = None


class TraceCache:
    """Traced steps under ``directory``, at most ``max_bytes`` in all."""

    def __init__(self, directory: Path, *, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.directory = Path(directory)
        self.max_bytes = max_bytes

    @classmethod
    def default(cls) -> TraceCache | None:
        """The user's cache (``$GPUPLAN_CACHE_DIR``, else ``$XDG_CACHE_HOME/gpuplan/traces``, else
        ``~/.cache/gpuplan/traces``); None when ``GPUPLAN_CACHE=off``."""
        if os.environ.get("GPUPLAN_CACHE", "").strip().lower() in ("off", "0", "no", "false"):
            return None
        explicit = os.environ.get("GPUPLAN_CACHE_DIR")
        base = Path(explicit) if explicit else Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") \
            / "gpuplan" / "traces"
        try:
            max_mb = float(os.environ.get("GPUPLAN_CACHE_MAX_MB", DEFAULT_MAX_BYTES / 2**20))
        except ValueError:
            max_mb = DEFAULT_MAX_BYTES / 2**20
        return cls(base, max_bytes=max(0, int(max_mb * 2**20)))

    def path_for(self, key: str) -> Path:
        return self.directory / f"{key}.trace"

    def load_fact(self, key: str) -> tuple[FactValue] | None:
        """(the fact stored under ``key``,); None when absent or not exactly what :meth:`store_fact`
        writes (then removed: it is rewritten)."""
        path = self.directory / f"{key}{_FACTS_SUFFIX}"
        try:
            with path.open("rb") as f:
                data = f.read(_MAX_FACTS_BYTES + 1)
        except OSError:
            return None
        try:
            doc = json.loads(data) if len(data) <= _MAX_FACTS_BYTES else None
        except ValueError:
            doc = None
        if (isinstance(doc, dict) and doc.get("format") == FORMAT and doc.get("version") == FORMAT_VERSION
                and doc.get("key") == key and "value" in doc and _is_fact(doc["value"])):
            return (doc["value"],)
        with contextlib.suppress(OSError):
            path.unlink()
        return None

    def store_fact(self, key: str, value: FactValue) -> None:
        """Keep ``value`` under ``key`` (best effort, as :meth:`store`)."""
        doc = {"format": FORMAT, "version": FORMAT_VERSION, "key": key, "value": value}
        with contextlib.suppress(OSError, TypeError, ValueError):  # a value JSON cannot hold is not kept
            self._write(self.directory / f"{key}{_FACTS_SUFFIX}", json.dumps(doc, allow_nan=False).encode())

    def load(self, key: str) -> Lookup:
        path = self.path_for(key)
        try:
            size = path.stat().st_size
            if size > _MAX_ENTRY_BYTES:
                raise CorruptEntry(f"{size} bytes, more than any trace")
            with path.open("rb") as f:
                data = f.read(_MAX_ENTRY_BYTES + 1)
        except FileNotFoundError:
            return Lookup(None)
        except CorruptEntry as exc:
            return Lookup(None, self._ignored(path, str(exc)))
        except OSError as exc:
            return Lookup(None, f"trace cache not readable ({type(exc).__name__}: {exc}); traced instead")
        try:
            step = self._parse(data, key)
        except CorruptEntry as exc:
            return Lookup(None, self._ignored(path, str(exc)))
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used goes first
        return Lookup(step)

    @staticmethod
    def _parse(data: bytes, key: str) -> TracedStep:
        header_line, sep, payload = data.partition(b"\n")
        if not sep:
            raise CorruptEntry("no header")
        try:
            header = json.loads(header_line)
        except ValueError as exc:
            raise CorruptEntry("unreadable header") from exc
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            raise CorruptEntry("not a gpuplan trace-cache entry")
        if header.get("version") != FORMAT_VERSION:
            raise CorruptEntry(f"format version {header.get('version')!r}, this gpuplan reads {FORMAT_VERSION}")
        if header.get("key") != key:
            raise CorruptEntry("it belongs to another query (foreign key)")
        if header.get("sha256") != hashlib.sha256(payload).hexdigest():
            raise CorruptEntry("its checksum does not match (truncated or altered)")
        return decode_step(payload)

    def _ignored(self, path: Path, why: str) -> str:
        with contextlib.suppress(OSError):
            path.unlink()
        return f"trace cache entry {path.name[:12]}… ignored ({why}); traced again"

    def store(self, key: str, step: TracedStep) -> None:
        """Keep ``step`` under ``key`` (best effort: a cache that cannot be written is skipped)."""
        try:
            payload = encode_step(step)
        except TypeError:
            return  # a field the codec does not know: not cached rather than stored wrong
        header = json.dumps({"format": FORMAT, "version": FORMAT_VERSION, "key": key,
                             "sha256": hashlib.sha256(payload).hexdigest()}).encode()
        with contextlib.suppress(OSError):
            self._write(self.path_for(key), header + b"\n" + payload)

    def _write(self, path: Path, data: bytes) -> None:
        """``data`` at ``path`` through a private temporary file renamed into place (atomic on POSIX), then
        the directory brought under its cap."""
        self.directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=self.directory)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        self._evict()

    def _evict(self) -> None:
        entries: list[tuple[float, int, Path]] = []
        for path in (*self.directory.glob("*.trace"), *self.directory.glob(f"*{_FACTS_SUFFIX}")):
            with contextlib.suppress(OSError):
                st = path.stat()
                entries.append((st.st_mtime, st.st_size, path))
        total = sum(size for _, size, _ in entries)
        for _, size, path in sorted(entries):
            if total <= self.max_bytes:
                break
            with contextlib.suppress(OSError):
                path.unlink()
                total -= size


def _is_fact(value: Any) -> bool:
    def count(v: Any) -> bool:
        return type(v) is int and v > 0

    if isinstance(value, dict) and set(value) == {"config"}:  # hf_config_dict_of's document
        return isinstance(value["config"], dict) and all(isinstance(k, str) for k in value["config"])
    return value is None or count(value) or (isinstance(value, dict)
                                             and all(isinstance(k, str) and count(v) for k, v in value.items()))


@contextlib.contextmanager
def use_trace_cache(cache: TraceCache | None) -> Iterator[None]:
    """Trace through ``cache`` inside the block (None: no cache)."""
    token = _active.set(cache)
    try:
        yield
    finally:
        _active.reset(token)


def active_trace_cache() -> TraceCache | None:
    return _active.get()
