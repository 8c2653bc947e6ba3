"""``gpuplan ui``: a local web page and JSON API over the library calls the CLI makes.

The server process never imports torch: it validates the query (:mod:`.query`), hands the work to a
worker process with a time and memory limit (:mod:`.worker`, which runs :mod:`.jobs`), and renders the
JSON the worker returns (:mod:`.page`). Web input names a catalog model or an uploaded config.json /
safetensors header (:mod:`.uploads`), never a path, a Hub id or code.
"""

from __future__ import annotations

__all__: list[str] = []
