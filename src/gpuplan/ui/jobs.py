"""What a worker process does with one :class:`~gpuplan.ui.query.Query`: the library call the CLI
verb of the same name makes, its ``to_dict()`` (the ``--json`` object) and a picture.

Runs in the worker (it imports torch); the server only sees the returned :class:`Outcome`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuplan.errors import GpuplanError, one_line
from gpuplan.ui.query import Query


@dataclass(frozen=True, slots=True)
class Outcome:
    """A job's answer (``data``: the verb's ``--json`` object) or its one-line ``error``."""

    data: dict[str, Any] | None = None
    svg: str | None = None
    """An inline SVG picture of the result, when the report layer can draw one."""
    error: str | None = None
    status: int = 200
    """HTTP status: 200, 400 (bad input), 413, 500 (a bug), 503 (busy), 504 (time limit)."""
    cacheable: bool = True
    """False for answers that depend on the moment (busy, time limit, a worker that died)."""

    @property
    def ok(self) -> bool:
        return self.error is None


MEMORY_LIMIT_MESSAGE = ("the work needed more host memory than the UI allows its worker (gpuplan ui --memory-gib); "
                        "try a smaller model, batch or sequence, or raise the limit")


def failure(message: str, status: int = 400, *, cacheable: bool = True) -> Outcome:
    return Outcome(error=one_line(message), status=status, cacheable=cacheable)


def _source(query: Query, upload_dir: Path | None) -> Any:
    """The model source, built without reading any path the web named (catalog entry or upload)."""
    from gpuplan.models.catalog import get_catalog_model
    from gpuplan.models.sources import HFConfigSource

    upload = query.upload_id
    if upload is None and query.pipeline:
        from gpuplan.models.pipeline import PipelineSource, catalog_pipeline

        return PipelineSource(catalog_pipeline(query.model))
    if upload is None:
        entry = get_catalog_model(query.model)
        return HFConfigSource(entry.name, entry.config, task=entry.task, default_seq_len=entry.default_seq_len,
                              kind="catalog")
    from gpuplan.ui.uploads import load_upload

    if upload_dir is None:
        raise GpuplanError(f"{query.model}: this server keeps no uploads; upload the file again")
    return load_upload(upload_dir, upload)


def _int(query: Query, name: str) -> int | None:
    text = query.option(name)
    return int(text) if text is not None else None


def _float(query: Query, name: str) -> float | None:
    text = query.option(name)
    return float(text) if text is not None else None


def _call(query: Query, source: Any) -> tuple[dict[str, Any], Any]:
    """(the ``--json`` object, the result) of the library call behind ``query.verb``."""
    from gpuplan.measure.calibration import calibration_for_gpu

    w = query.workload
    gpu = query.option("gpu")
    if query.verb == "estimate":
        from gpuplan.estimate import estimate

        result: Any = estimate(source, workload=w, gpu=gpu,
                               cuda_module_loading=query.option("cuda_module_loading") or "lazy",  # type: ignore[arg-type]
                               weight_quant=query.option("weight_quant") or "none",  # type: ignore[arg-type]
                               calibration=calibration_for_gpu(gpu))
    elif query.verb == "fit":
        from gpuplan.advise.fit import fit

        assert gpu is not None  # parse_query requires it
        result = fit(source, gpu, w, target_batch_size=_int(query, "target_batch_size"),
                     calibration=calibration_for_gpu(gpu))
    elif query.verb == "recommend":
        from gpuplan.advise.recommend import recommend

        budget = query.option("budget_usd")
        result = recommend(source, w, max_gpus=_int(query, "max_gpus") or 8,
                           budget_usd=float(budget) if budget is not None else None,
                           precision_per_gpu="precision" not in dict(query.given))  # as the command line
    elif query.verb == "serve" and getattr(source, "kind", "") == "pipeline":
        from gpuplan.serve.pipeline import serve_pipeline

        assert gpu is not None
        result = serve_pipeline(source, gpu, w, quantization=query.option("quantization") or "none")
    elif query.verb == "serve":
        from gpuplan.serve import serve

        assert gpu is not None
        result = serve(source, gpu=gpu, tp=_int(query, "tp") or 1, pp=_int(query, "pp") or 1,
                       engine=query.option("engine") or "vllm", max_model_len=_int(query, "max_model_len"),
                       context=_int(query, "context"), concurrency=_int(query, "concurrency"),
                       input_len=_int(query, "input_len"), output_len=_int(query, "output_len"),
                       rate=_float(query, "rate"), gpu_memory_utilization=_float(query, "gpu_memory_utilization"),
                       kv_cache_dtype=query.option("kv_cache_dtype") or "auto",
                       max_num_batched_tokens=_int(query, "max_num_batched_tokens"),
                       max_num_seqs=_int(query, "max_num_seqs"), quantization=query.option("quantization") or "none")
    else:
        from gpuplan.parallel.plan import plan

        assert gpu is not None
        gpus = _int(query, "gpus")
        assert gpus is not None
        zero = _int(query, "zero")
        result = plan(source, gpus=gpus, gpu=gpu, nodes=_int(query, "nodes"), tp=_int(query, "tp"),
                      pp=_int(query, "pp"), dp=_int(query, "dp"), zero=zero,
                      fsdp=True if query.option("fsdp") else None,
                      global_batch_size=_int(query, "global_batch_size"),
                      micro_batch_size=_int(query, "micro_batch_size"), workload=w,
                      checkpointing_fixed="checkpointing" in dict(query.given))
    # the CLI prints json.dumps(result.to_dict()): the same object, checked to be plain JSON
    data: dict[str, Any] = json.loads(json.dumps(result.to_dict()))
    return data, result


def _picture(query: Query, data: dict[str, Any], result: Any) -> str | None:
    """The report layer's picture of ``result`` as inline SVG (the ``--plot`` figure); without
    matplotlib (the ``plot`` extra), an estimate's component bar drawn as plain SVG."""
    try:
        import matplotlib  # noqa: F401  (the optional extra is there)
    except ImportError:
        from gpuplan.ui.picture import component_bar_svg

        return component_bar_svg(data) if query.verb == "estimate" else None
    from gpuplan.report.plot import figure_svg
    from gpuplan.report.verbs import VIEWS

    view = VIEWS.get(query.verb)
    return figure_svg(view.figure(data, result)) if view is not None else None


def _weights_only(source: Any) -> dict[str, Any]:
    summary = source.summary
    return {"model": source.name, "params_count": summary.params_count, "weight_bytes": summary.weight_bytes,
            "dtypes": dict(summary.dtypes),
            "assumptions": ["only the weights are known (a safetensors header): upload the model's config.json "
                            "for the memory and time of a step"]}


def execute(query: Query, upload_dir: Path | None) -> Outcome:
    """Run ``query``; every failure is an Outcome with one line (the worker never raises)."""
    try:
        source = _source(query, upload_dir)
        if getattr(source, "kind", "") == "safetensors":  # weights only: what the header says, no trace
            return Outcome(data=_weights_only(source))
        data, result = _call(query, source)
        try:
            svg = _picture(query, data, result)
        except Exception as exc:  # a picture must never cost the answer: the tables still show it
            data.setdefault("assumptions", []).append(f"no picture: {type(exc).__name__}: {one_line(exc, 120)}")
            svg = None
        return Outcome(data=data, svg=svg)
    except GpuplanError as exc:
        return failure(str(exc), 400)
    except MemoryError:
        return failure(MEMORY_LIMIT_MESSAGE, 400)
    except ImportError as exc:  # under the address-space limit, loading torch's libraries is what fails first
        if "map segment" in str(exc) or "allocate memory" in str(exc):
            return failure(MEMORY_LIMIT_MESSAGE, 400)
        return failure(f"cannot import {exc.name or 'a library'}: {exc}", 500, cacheable=False)
    except RecursionError:
        return failure("recursion too deep (the model nests too deeply to trace)", 400)
    except Exception as exc:
        first = str(exc).splitlines()[0] if str(exc) else ""
        return failure(f"internal error: {type(exc).__name__}: {first} (please report it with the share link)",
                       500, cacheable=False)
