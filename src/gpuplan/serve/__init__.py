"""Serving capacity for paged-KV engines (vLLM, SGLang) and transformers: ``gpuplan serve``."""

from gpuplan.serve.capacity import ServeResult, serve

__all__ = ["ServeResult", "serve"]
