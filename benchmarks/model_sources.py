"""Cost of the header-only model sources on realistic sizes (issue 11): what resolving MODEL costs
before any trace.

* a GGUF file shaped like llama.cpp's Llama-3.1-8B Q4_K_M conversion: 292 tensors (Q4_K / Q6_K /
  F32 as that file mixes them) and a 128,256-token vocabulary with 280,147 merges in the header. The
  tensor data is a sparse hole (the file is 4.9 GB long and uses a few MB of disk): the reader must
  never touch it, so the RSS growth shows whether it does.
* a Hub id resolved from a local cache (config.json + a safetensors index whose shards are absent);
* ``timm:resnet50`` built on fake tensors (meta build + fake storage), without tracing.

    python benchmarks/model_sources.py
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np

VOCAB = 128_256
MERGES = 280_147
LAYERS = 32
HIDDEN, FFN, KV = 4096, 14336, 1024


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _llama_gguf(path: Path) -> int:
    """Header and tensor infos of an 8B Q4_K_M-like file; the data section left as a sparse hole."""
    import gguf
    from gguf import GGMLQuantizationType as Q

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(LAYERS)
    writer.add_context_length(131072)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(VOCAB)])
    writer.add_token_types([1] * VOCAB)
    writer.add_token_merges([f"a{i} b{i}" for i in range(MERGES)])
    shapes: list[tuple[str, tuple[int, int] | tuple[int], object]] = [
        ("token_embd.weight", (VOCAB, HIDDEN), Q.Q4_K), ("output.weight", (VOCAB, HIDDEN), Q.Q6_K),
        ("output_norm.weight", (HIDDEN,), Q.F32)]
    per_layer = [("attn_q", (HIDDEN, HIDDEN), Q.Q4_K), ("attn_k", (KV, HIDDEN), Q.Q4_K),
                 ("attn_v", (KV, HIDDEN), Q.Q6_K), ("attn_output", (HIDDEN, HIDDEN), Q.Q4_K),
                 ("ffn_gate", (FFN, HIDDEN), Q.Q4_K), ("ffn_up", (FFN, HIDDEN), Q.Q4_K),
                 ("ffn_down", (HIDDEN, FFN), Q.Q6_K), ("attn_norm", (HIDDEN,), Q.F32), ("ffn_norm", (HIDDEN,), Q.F32)]
    for i in range(LAYERS):
        shapes += [(f"blk.{i}.{name}.weight", shape, qtype) for name, shape, qtype in per_layer]
    total = 0
    for name, shape, qtype in shapes:
        block, type_bytes = gguf.GGML_QUANT_SIZES[qtype]  # type: ignore[index]
        numel = int(np.prod(shape))
        nbytes = numel // block * type_bytes
        if qtype == Q.F32:
            writer.add_tensor_info(name, shape, np.dtype(np.float32), nbytes)
        else:  # quantized tensors are described by their byte shape (whole blocks per row)
            byte_shape = (*shape[:-1], shape[-1] // block * type_bytes)
            writer.add_tensor_info(name, byte_shape, np.dtype(np.uint8), nbytes,
                                   raw_dtype=qtype)  # type: ignore[arg-type]
        total += nbytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    # the data section: padding per tensor as the writer aligns it, left as a hole
    with path.open("r+b") as fh:
        fh.truncate(path.stat().st_size + total + 32 * len(shapes) + 4096)
    return total


def main() -> int:
    from gpuplan.models.gguf import read_gguf_header

    rows: list[tuple[str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "llama-3.1-8b-Q4_K_M.gguf"
        _llama_gguf(path)
        before = _rss_mib()
        start = time.perf_counter()
        summary = read_gguf_header(path)
        elapsed = time.perf_counter() - start
        rows.append(("GGUF header, 8B Q4_K_M-like (292 tensors, 128k vocab)", f"{elapsed:.2f} s",
                     f"{summary.params_count / 1e9:.2f}B params, {summary.weight_bytes / 2**30:.2f} GiB, "
                     f"max RSS +{_rss_mib() - before:.0f} MiB"))

        import os
        import sys

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: tests.fixtures
        from tests.fixtures.model_files import hub_repo

        os.environ["HF_HUB_CACHE"] = str(Path(tmp) / "hub")
        os.environ["HF_HUB_OFFLINE"] = "1"
        config = json.loads((Path(__file__).parents[1] / "src/gpuplan/models/catalog/llama-3.1-8b.json")
                            .read_text())["config"]
        index = {"weight_map": {f"w{i}": f"model-0000{i % 4 + 1}-of-00004.safetensors" for i in range(292)}}
        hub_repo(Path(tmp) / "hub", "acme/llama", {"config.json": config, "model.safetensors.index.json": index})
        from gpuplan.models.sources import resolve_model

        start = time.perf_counter()
        source = resolve_model("acme/llama")
        stored = source.stored_weights()
        rows.append(("Hub id from the local cache (shards absent)", f"{time.perf_counter() - start:.3f} s",
                     f"{source.name}, stored weights {'none (partial)' if stored is None else 'read'}"))

    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from gpuplan.models.timm import TimmSource
    from gpuplan.workload import Workload

    start = time.perf_counter()
    with FakeTensorMode():
        model = TimmSource("timm:resnet50").build(Workload())
    params = sum(p.numel() for p in model.parameters())
    rows.append(("timm:resnet50 built on fake tensors", f"{time.perf_counter() - start:.2f} s",
                 f"{params:,} params, fake: {type(next(model.parameters())).__name__}"))
    del torch

    width = max(len(r[0]) for r in rows)
    print(f"{'case':<{width}}  {'time':>8}  result")
    for case, took, result in rows:
        print(f"{case:<{width}}  {took:>8}  {result}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
