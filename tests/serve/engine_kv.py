"""KV bytes computed by vLLM's own classes (run by the engine's Python, not gpuplan's).

Usage: ``python engine_kv.py JSON`` where JSON is a list of cases; each case names the spec vLLM's model
code builds for one layer kind and its sizes (``vllm/v1/kv_cache_interface.py``: FullAttentionSpec,
MLAAttentionSpec, SlidingWindowSpec; ``vllm/model_executor/layers/mamba/mamba_utils.py``:
MambaStateShapeCalculator). Prints a list of {"token_bytes", "sequence_bytes", "state_bytes"} per case.
"""

from __future__ import annotations

import json
import math
import sys
from types import SimpleNamespace
from typing import Any


def main() -> int:
    import torch
    from vllm.model_executor.layers.mamba.mamba_utils import MambaStateShapeCalculator as Calc
    from vllm.v1.kv_cache_interface import FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec

    dtypes = {"bfloat16": torch.bfloat16, "float16": torch.float16, "fp8": torch.float8_e4m3fn}
    out: list[dict[str, Any]] = []
    for case in json.loads(sys.argv[1]):
        dtype, block = dtypes[case["dtype"]], case["block_size"]
        config = SimpleNamespace(model_config=SimpleNamespace(max_model_len=case["max_model_len"]),
                                 parallel_config=SimpleNamespace(decode_context_parallel_size=1),
                                 max_in_flight_tokens=case["max_num_batched_tokens"],
                                 scheduler_config=SimpleNamespace(max_num_batched_tokens=case["max_num_batched_tokens"]))
        kind = case["kind"]
        result: dict[str, Any] = {"token_bytes": 0, "sequence_bytes": 0, "state_bytes": 0}
        if kind in ("full", "sliding"):
            spec: Any
            if kind == "full":
                spec = FullAttentionSpec(block_size=block, num_kv_heads=case["kv_heads"], head_size=case["head_dim"],
                                         dtype=dtype)
            else:
                spec = SlidingWindowSpec(block_size=block, num_kv_heads=case["kv_heads"], head_size=case["head_dim"],
                                         dtype=dtype, sliding_window=case["window"])
            result["token_bytes"] = spec.page_size_bytes // block
            result["sequence_bytes"] = spec.max_memory_usage_bytes(config)
        elif kind == "mla":
            spec = MLAAttentionSpec(block_size=block, num_kv_heads=1, head_size=case["latent_dim"], dtype=dtype)
            result["token_bytes"] = spec.page_size_bytes // block
            result["sequence_bytes"] = spec.max_memory_usage_bytes(config)
        else:
            tp, args = case["tp"], case["args"]
            shapes = {"mamba1": Calc.mamba1_state_shape, "mamba2": Calc.mamba2_state_shape,
                      "gdn": Calc.gated_delta_net_state_shape}[kind](tp, *args)
            result["state_bytes"] = sum(math.prod(s) for s in shapes) * dtype.itemsize
        out.append(result)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
