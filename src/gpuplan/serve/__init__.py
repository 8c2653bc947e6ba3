"""Serving capacity for paged-KV engines (vLLM, SGLang) and transformers: ``gpuplan serve``; local
inference with llama.cpp / Ollama on GGUF models: ``serve_local``."""

from gpuplan.serve.capacity import ServeResult, serve
from gpuplan.serve.llamacpp import LocalServeResult, serve_local

__all__ = ["LocalServeResult", "ServeResult", "serve", "serve_local"]
