"""Read ``data/gpus/<id>.yaml`` into validated :class:`GPU` records.

Every file is checked on load: no missing or unknown keys, each value of the declared type, the
filename equal to the ``id``, a source and an ISO retrieval date, ``dense: true``. A bad file is a
bug in the shipped data, so it raises :class:`CatalogDataError` naming the file and the key.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping
from importlib import resources
from typing import Any

import yaml

from gpuplan.errors import GpuplanError
from gpuplan.hardware.gpu import GPU, MIGProfile
from gpuplan.hardware.interconnect import LINK_TYPES

DATA_PACKAGE = "gpuplan.hardware"
DATA_DIR = ("data", "gpus")


# The C loader parses the 66 files ~5x faster than the pure-Python one; both are safe loaders.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class CatalogDataError(GpuplanError):
    """A shipped GPU data file is malformed (a packaging or editing bug, not user input)."""


_NUM = (int, float)
# key -> (accepted python types, required non-null)
_SCHEMA: dict[str, tuple[tuple[type, ...], bool]] = {
    "id": ((str,), True),
    "name": ((str,), True),
    "vendor": ((str,), True),
    "segment": ((str,), True),
    "arch": ((str,), True),
    "chip": ((str,), False),
    "compute_capability": ((str,), False),
    "memory_labelled_gb": (_NUM, True),
    "memory_type": ((str,), False),
    "memory_bandwidth_gb_per_s": (_NUM, True),
    "boost_clock_mhz": (_NUM, False),
    "fp32_tflops": (_NUM, False),
    "tf32_tflops": (_NUM, False),
    "fp16_tflops": (_NUM, False),
    "bf16_tflops": (_NUM, False),
    "fp16_fp16acc_tflops": (_NUM, False),
    "fp8_tflops": (_NUM, False),
    "fp8_fp16acc_tflops": (_NUM, False),
    "int8_tops": (_NUM, False),
    "fp4_tflops": (_NUM, False),
    "tensor_dtypes": ((str,), False),
    "interconnect": ((str,), False),
    "interconnect_gb_per_s_bidirectional": (_NUM, False),
    "pcie_gen": ((int,), False),
    "tdp_w": ((int,), False),
    "mig_max_instances": ((int,), False),
    "form_factor": ((str,), False),
    "release_year": ((int,), False),
    "launch_price_usd": ((int,), False),
    "derived_fields": ((str,), False),
    "source": ((str,), True),
    "verification": ((str,), False),
    "notes": ((str,), False),
    "memory_total_bytes": ((int,), True),
    "memory_total_source": ((str,), True),
    "cuda_total_memory_bytes": ((int,), False),
    "cuda_total_memory_source": ((str,), False),
    "dense": ((bool,), True),
    "fp32_accumulate_half_rate": ((bool,), True),
    "intra_node_link": ((str,), True),
    "pcie_lanes": ((int,), False),
    "sm_count": ((int,), False),
    "devices_per_package": ((int,), True),
    "aliases": ((list,), True),
    "shorthands": ((list,), True),
    "mig_profiles": ((list,), True),
    "mig_source": ((str,), False),
    "reference": ((str,), True),
    "retrieved": ((str, datetime.date), True),
}
_MIG_SCHEMA: dict[str, tuple[tuple[type, ...], bool]] = {
    "name": ((str,), True),
    "compute_slices": ((int,), True),
    "max_compute_slices": ((int,), True),
    "memory_slices": ((int,), True),
    "max_memory_slices": ((int,), True),
    "max_instances": ((int,), True),
    "memory_bytes": ((int,), True),
    "memory_source": ((str,), True),
    "sm_count": ((int,), False),
}
_MIG_NAME = re.compile(r"^\d+g\.\d+gb$")
_CC = re.compile(r"^(\d+)\.(\d+)$")
_RATE_KEYS = ("fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "fp16_fp16acc_tflops",
              "fp8_tflops", "fp8_fp16acc_tflops", "int8_tops", "fp4_tflops")


def _check(where: str, data: Mapping[str, Any], schema: Mapping[str, tuple[tuple[type, ...], bool]]) -> None:
    missing = sorted(set(schema) - set(data))
    unknown = sorted(set(data) - set(schema))
    if missing or unknown:
        raise CatalogDataError(f"{where}: missing keys {missing}, unknown keys {unknown}")
    for key, (types, required) in schema.items():
        value = data[key]
        if value is None:
            if required:
                raise CatalogDataError(f"{where}: {key} must not be empty")
            continue
        # bool is an int subclass: keep true/false out of numeric fields.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise CatalogDataError(f"{where}: {key}={value!r} is not {'/'.join(t.__name__ for t in types)}")
        if isinstance(value, _NUM) and not isinstance(value, bool) and value < 0:
            raise CatalogDataError(f"{where}: {key}={value!r} is negative")


def _mig_profile(where: str, raw: Any) -> MIGProfile:
    if not isinstance(raw, dict):
        raise CatalogDataError(f"{where}: each mig_profiles entry must be a mapping")
    _check(where, raw, _MIG_SCHEMA)
    if not _MIG_NAME.match(raw["name"]):
        raise CatalogDataError(f"{where}: MIG profile name {raw['name']!r} is not like '3g.40gb'")
    if not (0 < raw["compute_slices"] <= raw["max_compute_slices"]
            and 0 < raw["memory_slices"] <= raw["max_memory_slices"]):
        raise CatalogDataError(f"{where}: MIG profile {raw['name']} has slices outside 1..max")
    return MIGProfile(**raw)


def _compute_capability(where: str, text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    m = _CC.match(text)
    if not m:
        raise CatalogDataError(f"{where}: compute_capability {text!r} is not like '8.0'")
    return int(m.group(1)), int(m.group(2))


def gpu_from_mapping(data: Mapping[str, Any], *, filename_stem: str) -> GPU:
    """Validate one parsed data file and build its :class:`GPU`."""
    where = f"gpu data file {filename_stem}.yaml"
    if not isinstance(data, Mapping):
        raise CatalogDataError(f"{where}: top level must be a mapping")
    _check(where, data, _SCHEMA)
    if data["id"] != filename_stem:
        raise CatalogDataError(f"{where}: id {data['id']!r} differs from the file name")
    if data["dense"] is not True:
        raise CatalogDataError(f"{where}: tensor rates must be dense (dense: true); halve sparse figures")
    if data["intra_node_link"] not in LINK_TYPES:
        raise CatalogDataError(f"{where}: intra_node_link must be one of {', '.join(LINK_TYPES)}")
    if all(data[k] is None for k in _RATE_KEYS) and not data["notes"]:
        raise CatalogDataError(f"{where}: no compute rate at all and no note saying why")
    retrieved = data["retrieved"]
    try:
        datetime.date.fromisoformat(str(retrieved))
    except ValueError as exc:
        raise CatalogDataError(f"{where}: retrieved {retrieved!r} is not an ISO date") from exc
    for key in ("aliases", "shorthands"):
        if not all(isinstance(a, str) and a.strip() for a in data[key]):
            raise CatalogDataError(f"{where}: {key} must be a list of non-empty strings")
    profiles = tuple(_mig_profile(f"{where} mig_profiles", p) for p in data["mig_profiles"])
    if profiles and not data["mig_source"]:
        raise CatalogDataError(f"{where}: MIG profiles need a mig_source")
    fields = dict(data)
    fields.update(
        compute_capability=_compute_capability(where, data["compute_capability"]),
        aliases=tuple(data["aliases"]),
        shorthands=tuple(data["shorthands"]),
        mig_profiles=profiles,
        retrieved=str(retrieved),
        memory_labelled_gb=float(data["memory_labelled_gb"]),
        memory_bandwidth_gb_per_s=float(data["memory_bandwidth_gb_per_s"]),
    )
    return GPU(**fields)


def _data_file_names() -> tuple[str, ...]:
    folder = resources.files(DATA_PACKAGE).joinpath(*DATA_DIR)
    return tuple(sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".yaml")))


def data_file_ids() -> tuple[str, ...]:
    """The ids of the shipped GPU files (each file is named after its id), in catalog order; nothing is parsed."""
    ids = tuple(name[: -len(".yaml")] for name in _data_file_names())
    if not ids:
        raise CatalogDataError("no GPU data files found (package data missing?)")
    return ids


def load_gpu(stem: str) -> GPU:
    """Parse and validate the one shipped file ``<stem>.yaml`` (no caching here; see catalog)."""
    folder = resources.files(DATA_PACKAGE).joinpath(*DATA_DIR)
    text = folder.joinpath(f"{stem}.yaml").read_text(encoding="utf-8")
    try:
        data = yaml.load(text, Loader=_YAML_LOADER)  # a SafeLoader variant: no object construction
    except yaml.YAMLError as exc:
        raise CatalogDataError(f"gpu data file {stem}.yaml is not valid YAML: {exc}") from exc
    return gpu_from_mapping(data, filename_stem=stem)


def load_gpus() -> tuple[GPU, ...]:
    """Parse and validate every shipped GPU file, sorted by file name (no caching here; see catalog)."""
    return tuple(load_gpu(stem) for stem in data_file_ids())
