"""``quantization_config`` of a Hugging Face config.json, parsed and checked.

A quantized checkpoint says how its weights are stored in the ``quantization_config`` field that
transformers' quantizers read (``transformers/utils/quantization_config.py``: BitsAndBytesConfig,
GPTQConfig, AwqConfig, FineGrainedFP8Config, CompressedTensorsConfig, FbgemmFp8Config, Mxfp4Config).
This module turns that field into one typed record, :class:`QuantizationConfig`, and rejects what
gpuplan cannot model with one line. It knows nothing about byte layouts: the stand-in quantized
layers (``trace/quantized.py``) build the tensors of each format from this record.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuplan.errors import ModelSourceError, did_you_mean, one_line

QUANT_METHODS: Final[tuple[str, ...]] = (
    "bitsandbytes", "gptq", "awq", "fp8", "compressed-tensors", "fbgemm_fp8", "mxfp4")
"""``quant_method`` values gpuplan models (transformers' ``QuantizationMethod`` names)."""

SCHEMES: Final[tuple[str, ...]] = (
    "bnb-nf4", "bnb-fp4", "bnb-int8", "gptq", "awq", "fp8", "int8", "int4", "mxfp4")
"""How the weights are stored, one name per layout (see :attr:`QuantizationConfig.scheme`)."""

BNB_4BIT_BLOCK: Final = 64
"""bitsandbytes 4-bit: weights per absmax block (``bnb.functional.quantize_4bit`` blocksize default)."""
MXFP4_BLOCK: Final = 32
"""OCP Microscaling: FP4 (E2M1) values sharing one E8M0 scale (OCP MX spec v1.0, §5)."""
DEFAULT_GROUP_SIZE: Final = 128
"""GPTQConfig / AwqConfig default ``group_size``."""


@dataclass(frozen=True, slots=True)
class QuantizationConfig:
    """A checkpoint's weight quantization, as its config.json states it."""

    method: str
    """``quant_method``: one of :data:`QUANT_METHODS`."""
    scheme: str
    """The storage layout: ``bnb-nf4`` / ``bnb-fp4`` (packed 4-bit + absmax per 64), ``bnb-int8``
    (LLM.int8: int8 + fp32 row scale), ``gptq`` / ``awq`` (packed int32 + scales + zeros per group),
    ``fp8`` (float8_e4m3fn + scales), ``int8`` / ``int4`` (compressed-tensors integer), ``mxfp4``."""
    bits: int
    """Bits of one stored weight value (before scales)."""
    group_size: int | None = None
    """Weights sharing one scale along the input dimension; None: one scale per output channel
    (or per tensor, see :attr:`strategy`)."""
    strategy: str = "group"
    """Scale granularity: ``group``, ``channel``, ``tensor`` or ``block`` (:attr:`block_shape`)."""
    block_shape: tuple[int, int] | None = None
    """FP8 block scaling (``weight_block_size``, e.g. DeepSeek-V3's 128×128)."""
    symmetric: bool = True
    """False where a zero point is stored next to each scale (AWQ with ``zero_point``, GPTQ ``sym=false``)."""
    double_quant: bool = False
    """bitsandbytes 4-bit ``bnb_4bit_use_double_quant`` (absmax quantized again to 8 bits)."""
    compute_dtype: str | None = None
    """bitsandbytes ``bnb_4bit_compute_dtype`` (the dtype weights are dequantized to), if stated."""
    act_order: bool = False
    """GPTQ ``desc_act`` (a ``g_idx`` int32 per input row is stored)."""
    version: str | None = None
    """AWQ kernel layout (``gemm`` / ``gemv`` / ...), GPTQ ``checkpoint_format``, compressed-tensors ``format``."""
    skip_modules: tuple[str, ...] = ()
    """Modules left unquantized (``llm_int8_skip_modules`` / ``modules_to_not_convert`` / ``ignore``);
    empty: the library's default (the output head)."""
    raw: Mapping[str, Any] = field(default_factory=dict)
    """The field as the file holds it."""

    def describe(self) -> dict[str, Any]:
        """JSON-friendly summary (for ``describe()`` and reports)."""
        out: dict[str, Any] = {"quant_method": self.method, "scheme": self.scheme, "bits": self.bits,
                               "group_size": self.group_size, "strategy": self.strategy}
        if self.block_shape:
            out["block_shape"] = list(self.block_shape)
        if self.skip_modules:
            out["skip_modules"] = list(self.skip_modules)
        return out


def parse_quantization_config(value: object, *, where: str) -> QuantizationConfig:
    """The ``quantization_config`` field of the config.json ``where`` names, checked; one line otherwise."""
    if not isinstance(value, Mapping):
        raise ModelSourceError(f"{where}: 'quantization_config' is a JSON {type(value).__name__}, not an object; "
                               "compare with the checkpoint's published config.json")
    method = value.get("quant_method")
    if method is None and (value.get("load_in_4bit") or value.get("load_in_8bit")):
        method = "bitsandbytes"  # configs saved before quant_method existed (transformers < 4.31)
    if not isinstance(method, str) or method not in _PARSERS:
        shown = one_line(json.dumps(method), 60) if not isinstance(method, str) else repr(method)
        hint = did_you_mean(method, QUANT_METHODS) if isinstance(method, str) else ""
        raise ModelSourceError(
            f"{where}: quantization_config quant_method {shown} is not a format gpuplan models{hint} "
            f"(allowed: {', '.join(QUANT_METHODS)}); use the unquantized checkpoint's config.json, or "
            "--weight-quant int8|fp8|int4 for an approximate layout")
    return _PARSERS[method](_Fields(value, where, method))


class _Fields:
    """Typed access to the fields of one quantization_config, each failure one line naming the field."""

    def __init__(self, raw: Mapping[str, Any], where: str, method: str) -> None:
        self.raw, self.where, self.method = raw, where, method

    def _bad(self, key: str, want: str) -> ModelSourceError:
        shown = one_line(json.dumps(self.raw.get(key), default=str), 60)
        return ModelSourceError(f"{self.where}: quantization_config ({self.method}) field {key!r} is {shown}; "
                                f"it must be {want} (compare with the checkpoint's published config.json)")

    def int_(self, key: str, default: int | None, allowed: tuple[int, ...] = ()) -> int | None:
        value = self.raw.get(key, default)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or (allowed and value not in allowed):
            raise self._bad(key, "one of " + ", ".join(map(str, allowed)) if allowed else "an integer")
        return value

    def bool_(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def str_(self, key: str, default: str | None, allowed: tuple[str, ...] = ()) -> str | None:
        value = self.raw.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or (allowed and value.lower() not in allowed):
            raise self._bad(key, "one of " + ", ".join(allowed) if allowed else "a string")
        return value.lower() if allowed else value

    def names(self, *keys: str) -> tuple[str, ...]:
        for key in keys:
            value = self.raw.get(key)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise self._bad(key, "a list of module names")
            return tuple(value)
        return ()

    def group_size(self, key: str = "group_size") -> int | None:
        """GPTQ/AWQ group size; -1 (or absent in a compressed-tensors channel strategy) is per channel."""
        value = self.int_(key, DEFAULT_GROUP_SIZE)
        if value == -1:
            return None
        if value is None or value <= 0:
            raise self._bad(key, "a positive integer or -1 (one group per output channel)")
        return value


def _bitsandbytes(f: _Fields) -> QuantizationConfig:
    four, eight = f.bool_("load_in_4bit", False), f.bool_("load_in_8bit", False)
    if four == eight:
        raise ModelSourceError(f"{f.where}: bitsandbytes quantization_config must set exactly one of load_in_4bit "
                               f"and load_in_8bit (it sets {'both' if four else 'neither'})")
    skip = f.names("llm_int8_skip_modules")
    if eight:
        return QuantizationConfig("bitsandbytes", "bnb-int8", 8, None, "channel", skip_modules=skip, raw=f.raw)
    quant_type = f.str_("bnb_4bit_quant_type", "fp4", ("nf4", "fp4"))
    compute = f.str_("bnb_4bit_compute_dtype", None)
    return QuantizationConfig("bitsandbytes", f"bnb-{quant_type}", 4, BNB_4BIT_BLOCK, "group",
                              double_quant=f.bool_("bnb_4bit_use_double_quant", False),
                              compute_dtype=compute, skip_modules=skip, raw=f.raw)


def _gptq(f: _Fields) -> QuantizationConfig:
    bits = f.int_("bits", None, (2, 3, 4, 8))
    if bits is None:
        raise f._bad("bits", "one of 2, 3, 4, 8")
    group = f.group_size()
    return QuantizationConfig("gptq", "gptq", bits, group, "group" if group else "channel",
                              symmetric=f.bool_("sym", True), act_order=f.bool_("desc_act", False),
                              version=f.str_("checkpoint_format", None),
                              skip_modules=f.names("modules_to_not_convert"), raw=f.raw)


def _awq(f: _Fields) -> QuantizationConfig:
    bits = f.int_("bits", 4, (4,))
    assert bits is not None
    group = f.group_size()
    return QuantizationConfig("awq", "awq", bits, group, "group" if group else "channel",
                              symmetric=not f.bool_("zero_point", True), version=f.str_("version", "gemm"),
                              skip_modules=f.names("modules_to_not_convert"), raw=f.raw)


def _fp8(f: _Fields) -> QuantizationConfig:
    block = f.raw.get("weight_block_size")
    shape: tuple[int, int] | None = None
    if block is not None:
        if not (isinstance(block, list) and len(block) == 2
                and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise f._bad("weight_block_size", "two positive integers such as [128, 128]")
        shape = (block[0], block[1])
    return QuantizationConfig("fp8", "fp8", 8, None, "block" if shape else "channel", block_shape=shape,
                              skip_modules=f.names("modules_to_not_convert"), raw=f.raw)


def _fbgemm_fp8(f: _Fields) -> QuantizationConfig:
    # FbgemmFp8Linear: float8_e4m3fn weight, one fp32 scale per output channel
    return QuantizationConfig("fbgemm_fp8", "fp8", 8, None, "channel",
                              skip_modules=f.names("modules_to_not_convert"), raw=f.raw)


def _mxfp4(f: _Fields) -> QuantizationConfig:
    return QuantizationConfig("mxfp4", "mxfp4", 4, MXFP4_BLOCK, "group",
                              skip_modules=f.names("modules_to_not_convert"), raw=f.raw)


_CT_STRATEGIES: Final = ("tensor", "channel", "group", "block", "tensor_group")


def _compressed_tensors(f: _Fields) -> QuantizationConfig:
    groups = f.raw.get("config_groups")
    if not isinstance(groups, Mapping) or not groups:
        raise f._bad("config_groups", "an object of quantization groups, each with a 'weights' scheme")
    schemes = set()
    for name, group in groups.items():
        weights = group.get("weights") if isinstance(group, Mapping) else None
        if not isinstance(weights, Mapping):
            raise ModelSourceError(f"{f.where}: compressed-tensors group {one_line(repr(name), 40)} has no 'weights' "
                                   "scheme; gpuplan models weight quantization (compare with the published config)")
        sub = _Fields(weights, f.where, "compressed-tensors weights")
        bits = sub.int_("num_bits", 8, (4, 8))
        kind = sub.str_("type", "int", ("int", "float"))
        strategy = sub.str_("strategy", "tensor", _CT_STRATEGIES)
        group_size = sub.int_("group_size", None)
        if group_size is not None and group_size <= 0:
            raise sub._bad("group_size", "a positive integer or null")
        block = weights.get("block_structure")
        if block is not None and not (isinstance(block, list) and len(block) == 2 and all(
                isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
            raise sub._bad("block_structure", "two positive integers such as [128, 128]")
        schemes.add((bits, kind, strategy, group_size, tuple(block) if block else None,
                     sub.bool_("symmetric", True)))
    if len(schemes) > 1:
        raise ModelSourceError(f"{f.where}: compressed-tensors config_groups quantize weights in "
                               f"{len(schemes)} different ways; gpuplan models one weight scheme per checkpoint")
    bits, kind, strategy, group_size, block, symmetric = schemes.pop()
    assert bits is not None and kind is not None and strategy is not None
    if kind == "float" and bits != 8:
        raise ModelSourceError(f"{f.where}: compressed-tensors float weights of {bits} bits are not modelled "
                               "(float weights: 8 bits, FP8)")
    scheme = "fp8" if kind == "float" else f"int{bits}"
    shape = (block[0], block[1]) if block else None
    return QuantizationConfig("compressed-tensors", scheme, bits, group_size, strategy, block_shape=shape,
                              symmetric=symmetric, version=f.str_("format", None),
                              skip_modules=f.names("ignore"), raw=f.raw)


_PARSERS: Final = {
    "bitsandbytes": _bitsandbytes, "gptq": _gptq, "awq": _awq, "fp8": _fp8,
    "compressed-tensors": _compressed_tensors, "fbgemm_fp8": _fbgemm_fp8, "mxfp4": _mxfp4,
}


__all__ = ["BNB_4BIT_BLOCK", "DEFAULT_GROUP_SIZE", "MXFP4_BLOCK", "QUANT_METHODS", "SCHEMES", "QuantizationConfig",
           "parse_quantization_config"]
