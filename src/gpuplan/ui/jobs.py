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
from gpuplan.ui.uploads import CONFIG_NAME


@dataclass(frozen=True, slots=True)
class Outcome:
    """A job's answer (``data``: the verb's ``--json`` object) or its one-line ``error``."""

    data: dict[str, Any] | None = None
    svg: str | None = None
    """An inline SVG picture of the result, when the report layer can draw one."""
    caption: str = ""
    """What the picture shows (the result type's caption, report/verbs.py)."""
    text: str | None = None
    """The command line's text report of the result (its registered renderer, report/registry.py)."""
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


def _call(query: Query, source: Any, upload_dir: Path | None = None) -> tuple[dict[str, Any], Any]:
    """(the ``--json`` object, the result) of the library call behind ``query.verb``: the command line's
    call, with the options' values under their flag names (report/options.py)."""
    from gpuplan.measure.calibration import calibration_for_gpu

    w = query.workload
    kw = query.values()
    gpu = kw.get("gpu")
    if query.verb == "estimate":
        from gpuplan.estimate import estimate

        result: Any = estimate(source, workload=w, calibration=calibration_for_gpu(gpu), **kw)
    elif query.verb == "fit":
        from gpuplan.advise.fit import fit

        assert gpu is not None  # parse_query requires it
        axis = kw.pop("axis", "batch")
        if axis == "seq-len":  # the command line's calls of each axis (cli/fit.py)
            from gpuplan.advise.fit import largest_seq_len

            result = largest_seq_len(source, gpu, w, calibration=calibration_for_gpu(gpu), ladder=True)
        elif axis == "resolution":
            from gpuplan.advise.fit import largest_resolution

            result = largest_resolution(source, gpu, w, calibration=calibration_for_gpu(gpu))
        else:
            result = fit(source, kw.pop("gpu"), w, calibration=calibration_for_gpu(gpu), **kw)
    elif query.verb == "recommend":
        from gpuplan.advise.recommend import recommend

        kw.pop("top", None)
        result = recommend(source, w, precision_per_gpu="precision" not in dict(query.given), **kw)  # as the CLI
    elif query.verb == "serve" and getattr(source, "kind", "") == "pipeline":
        from gpuplan.serve.pipeline import serve_pipeline

        assert gpu is not None
        result = serve_pipeline(source, gpu, w, quantization=kw.get("quantization", "none"))
    elif query.verb == "serve":
        from gpuplan.serve import serve

        assert gpu is not None
        result = serve(source, **{k: v for k, v in kw.items() if v is not None})
    elif query.verb == "rl":
        from gpuplan.report.verb_options import rl_settings_fields
        from gpuplan.rl import rl
        from gpuplan.rl.settings import RLSettings

        result = rl(RLSettings(**rl_settings_fields(_model_name(query, upload_dir), kw)))
    else:
        from gpuplan.parallel.plan import plan

        assert gpu is not None
        result = plan(source, workload=w, checkpointing_fixed="checkpointing" in dict(query.given), **kw)
    # the CLI prints json.dumps(result.to_dict()): the same object, checked to be plain JSON
    data: dict[str, Any] = json.loads(json.dumps(result.to_dict()))
    return data, result


def _model_name(query: Query, upload_dir: Path | None) -> str:
    """What rl resolves by name: a catalog name, or the uploaded config.json the server stored."""
    upload = query.upload_id
    if upload is None:
        return query.model
    path = (upload_dir / upload / CONFIG_NAME) if upload_dir is not None else None
    if path is None or not path.is_file():
        raise GpuplanError(f"{query.model}: rl takes an uploaded config.json (a safetensors header has no "
                           "architecture to train); upload it again")
    return str(path)


def _picture(query: Query, data: dict[str, Any], result: Any) -> str | None:
    """The result type's picture (report/verbs.py, the command line's ``--plot`` figure) as inline SVG; without
    matplotlib (the ``plot`` extra), an estimate's component bar drawn as plain SVG."""
    try:
        import matplotlib  # noqa: F401  (the optional extra is there)
    except ImportError:
        from gpuplan.ui.picture import component_bar_svg

        return component_bar_svg(data) if query.verb == "estimate" else None
    from gpuplan.report.plot import figure_svg
    from gpuplan.report.verbs import view_of

    view = view_of(result)  # fit --axis seq-len has none (the command line draws none either)
    return figure_svg(view.figure(data, result, query.values())) if view.figure is not None else None


def _text(query: Query, result: Any, upload_dir: Path | None) -> str:
    """The text report (``str(result)``, the command line's output) with the server's paths named as uploads."""
    text = str(result)
    if query.upload_id is not None and upload_dir is not None:
        text = text.replace(str(upload_dir / query.upload_id / CONFIG_NAME), query.model)
    return text


def _named(query: Query, data: dict[str, Any], upload_dir: Path | None) -> dict[str, Any]:
    """rl names its model by the path it resolved: an upload is shown as ``upload:ID``, never the server's path."""
    if query.upload_id is None or upload_dir is None:
        return data
    path = json.dumps(str(upload_dir / query.upload_id / CONFIG_NAME))[1:-1]
    named: dict[str, Any] = json.loads(json.dumps(data).replace(path, query.model))
    return named


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
        data, result = _call(query, source, upload_dir)
        text = _text(query, result, upload_dir)
        try:
            svg = _picture(query, data, result)
        except Exception as exc:  # a picture must never cost the answer: the tables still show it
            data.setdefault("assumptions", []).append(f"no picture: {type(exc).__name__}: {one_line(exc, 120)}")
            svg = None
        from gpuplan.report.verbs import view_of

        return Outcome(data=_named(query, data, upload_dir), svg=svg, text=text, caption=view_of(result).caption)
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
