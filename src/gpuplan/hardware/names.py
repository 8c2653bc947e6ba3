"""Turn what people type (or what nvidia-smi / torch print) into a catalog GPU.

Order of resolution, first hit wins:

1. a MIG suffix (``A100-80GB-SXM:1g.10gb``, ``A100-80GB 3g.40gb``, torch's
   ``NVIDIA A100-SXM4-80GB MIG 3g.40gb``): resolve the base name, then cut to that profile;
2. an exact id, full name or alias, compared as normalised tokens (case, separators, vendor
   words such as "NVIDIA"/"GeForce"/"Tesla", and ``sxm4``/``sxm5`` vs ``sxm`` do not matter);
3. a *shorthand*: a short name that could mean several variants but where one is meant in
   practice, declared in that GPU's file (``H100`` -> H100-SXM, ``H200`` -> H200-SXM,
   ``A100-80GB`` -> A100-80GB-SXM). Shorthands are kept few on purpose: ``A100`` (40 vs 80 GB)
   and ``V100`` (16 vs 32 GB) stay ambiguous because the variants differ in memory, which is the
   first thing a plan depends on;
4. a name whose tokens all appear in one key of exactly one GPU (``4090``, ``L40S``,
   ``H100 PCIe``);

otherwise an ambiguous name raises :class:`UnknownGPUError` listing the candidates and an
unknown one lists the closest ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from gpuplan.errors import UnknownGPUError, closest
from gpuplan.hardware.gpu import GPU

# Words that add nothing to identify a GPU.
_NOISE = frozenset(
    {"nvidia", "tesla", "geforce", "amd", "instinct", "intel", "habana", "apple", "radeon", "gpu"}
)
_MIG = re.compile(r"(?i)(\d+)g\.(\d+)gb(?:\+me)?")
_MAX_LISTED = 8


def tokens(text: str) -> tuple[str, ...]:
    """Normalised tokens: lowercase, letters and numbers split apart, noise words dropped."""
    text = re.sub(r"sxm[45]", "sxm", text.lower())
    found = re.findall(r"[a-z]+|\d+(?:\.\d+)?", text)
    return tuple(t for t in found if t not in _NOISE)


@dataclass(frozen=True, slots=True)
class NameIndex:
    """Lookup tables built once from the catalog."""

    by_exact: dict[tuple[str, ...], GPU]
    by_shorthand: dict[tuple[str, ...], GPU]
    keys: tuple[tuple[tuple[str, ...], GPU], ...]
    ids: tuple[str, ...]

    @classmethod
    def build(cls, gpus: Iterable[GPU]) -> NameIndex:
        by_exact: dict[tuple[str, ...], GPU] = {}
        by_short: dict[tuple[str, ...], GPU] = {}
        keys: list[tuple[tuple[str, ...], GPU]] = []
        gpus = tuple(gpus)
        for gpu in gpus:
            # A multi-device package (MI250X: two GCDs) carries the vendor name that torch prints for
            # each of its devices; that name belongs to the per-device entry, not to the package.
            full = (gpu.name,) if gpu.devices_per_package == 1 else ()
            for text in (gpu.id, *full, *gpu.aliases):
                key = tokens(text)
                _claim(by_exact, key, gpu, text)
                keys.append((key, gpu))
            for text in gpu.shorthands:
                _claim(by_short, tokens(text), gpu, text)
        for key, gpu in by_short.items():
            other = by_exact.get(key)
            if other is not None and other.id != gpu.id:
                raise ValueError(f"shorthand of {gpu.id} is already a name of {other.id}: {' '.join(key)}")
        return cls(by_exact, by_short, tuple(keys), tuple(g.id for g in gpus))

    def resolve(self, name: str) -> GPU:
        text = name.strip()
        if not text:
            raise UnknownGPUError("empty GPU name; run `gpuplan gpus` for the catalog ids")
        mig = _MIG.search(text)
        if mig:
            return self._resolve_mig(text, mig)
        return self._resolve_plain(text)

    def candidates(self, name: str) -> tuple[GPU, ...]:
        """GPUs that have a key containing every token of ``name`` (in catalog order)."""
        query = tokens(name)
        if not query:
            return ()
        seen: dict[str, GPU] = {}
        for key, gpu in self.keys:
            if _contains(key, query):
                seen.setdefault(gpu.id, gpu)
        return tuple(seen.values())

    def _resolve_plain(self, text: str) -> GPU:
        key = tokens(text)
        hit = self.by_exact.get(key) or self.by_shorthand.get(key)
        if hit is not None:
            return hit
        found = self.candidates(text)
        if len(found) == 1:
            return found[0]
        if found:
            raise UnknownGPUError(_ambiguous(text, [g.id for g in found]))
        raise UnknownGPUError(_unknown(text, self.ids))

    def _resolve_mig(self, text: str, match: re.Match[str]) -> GPU:
        profile = f"{int(match.group(1))}g.{int(match.group(2))}gb"
        base = (text[: match.start()] + " " + text[match.end():]).replace(":", " ")
        base = re.sub(r"(?i)\bmig\b", " ", base).strip(" -_/")
        if not base:
            raise UnknownGPUError(f"MIG profile {profile!r} needs a GPU, e.g. A100-80GB-SXM:{profile}")
        key = tokens(base)
        hit = self.by_exact.get(key) or self.by_shorthand.get(key)
        if hit is not None:
            return hit.mig(profile)
        found = [g for g in self.candidates(base) if any(p.name == profile for p in g.mig_profiles)]
        if len(found) == 1:
            return found[0].mig(profile)
        if found:
            raise UnknownGPUError(_ambiguous(text, [f"{g.id}:{profile}" for g in found]))
        return self._resolve_plain(base).mig(profile)  # unknown base, or a GPU without this profile


def _claim(table: dict[tuple[str, ...], GPU], key: tuple[str, ...], gpu: GPU, text: str) -> None:
    if not key:
        raise ValueError(f"name {text!r} of {gpu.id} has no identifying token")
    other = table.get(key)
    if other is not None and other.id != gpu.id:
        raise ValueError(f"name {text!r} is claimed by both {other.id} and {gpu.id}")
    table[key] = gpu


def _contains(key: tuple[str, ...], query: tuple[str, ...]) -> bool:
    pool = list(key)
    for tok in query:
        if tok not in pool:
            return False
        pool.remove(tok)
    return True


def _ambiguous(text: str, ids: list[str]) -> str:
    more = len(ids) - _MAX_LISTED
    shown = ", ".join(ids[:_MAX_LISTED]) + (f" (+{more} more)" if more > 0 else "")
    return f"ambiguous GPU {text!r}: it matches {shown}; name one of these"


def _unknown(text: str, ids: Iterable[str]) -> str:
    hits = closest(text, ids)
    hint = f"; did you mean {' or '.join(hits)}?" if hits else ""
    return f"unknown GPU {text!r}{hint} (`gpuplan gpus` lists the catalog)"
