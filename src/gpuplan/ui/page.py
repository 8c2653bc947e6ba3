"""The HTML of the page: the form (every input labelled, usable from the keyboard alone) and the
result, rendered from the verb's ``--json`` object. Plain strings, escaped; no script, no network."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, Final
from urllib.parse import urlencode

from gpuplan.report.labels import label, value_text
from gpuplan.report.verbs import VIEWS
from gpuplan.serve.engines import PAGED_ENGINES as ENGINES  # the page sizes paged engines only
from gpuplan.serve.kv import KV_CACHE_DTYPES
from gpuplan.ui.jobs import Outcome
from gpuplan.ui.query import VERBS, Query
from gpuplan.ui.uploads import UPLOAD_MAX_BYTES
from gpuplan.units import format_bytes, format_count
from gpuplan.workload import (
    ATTENTIONS,
    CHECKPOINTING,
    COMPONENT_QUANTS,
    LOAD_INS,
    LOSSES,
    MODES,
    OPTIMIZER_IMPLS,
    OPTIMIZERS,
    PEFTS,
    PIPELINE_OFFLOADS,
    PRECISIONS,
    WEIGHT_QUANTS,
    ZERO_GRADS,
)

MAX_ROWS: Final = 60
"""Rows shown of a long list (recommend's excluded GPUs); the JSON API has them all."""

HEADLINE: Final = ("fits", "ok", "max_batch_size", "target_fits", "peak_allocated_bytes", "total_required_bytes",
                   "min_required_bytes", "per_gpu_peak_bytes", "headroom_bytes", "step_time_s", "mfu",
                   "params_count", "weight_bytes", "reason", "seconds_per_output", "outputs_per_hour",
                   "usd_per_1000_outputs", "host_memory_bytes")


STYLE: Final = """
body{font-family:system-ui,sans-serif;margin:1.5rem;max-width:70rem;color:#111}
fieldset{margin:.6rem 0;border:1px solid #bbb}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(15rem,1fr));gap:.4rem .9rem}
label{display:block;font-size:.9rem}
input,select,button{font:inherit;padding:.2rem}
:focus{outline:3px solid #1a5fb4;outline-offset:1px}
table{border-collapse:collapse;margin:.5rem 0}
td,th{border:1px solid #ccc;padding:.15rem .5rem;text-align:left;font-size:.9rem}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.error{color:#a00;font-weight:bold;border-left:4px solid #a00;padding-left:.5rem}
.verdict{font-size:1.2rem;font-weight:bold}
#picture svg{max-width:100%;height:auto}
"""


def _select(name: str, label: str, choices: Sequence[str], value: str, default_label: str | None) -> str:
    options = [] if default_label is None else [f'<option value=""{" selected" if not value else ""}>'
                                                f"{escape(default_label)}</option>"]
    options += [f'<option value="{escape(c)}"{" selected" if c == value else ""}>{escape(c)}</option>'
                for c in choices]
    return (f'<div><label for="f-{name}">{escape(label)}</label>'
            f'<select id="f-{name}" name="{name}">{"".join(options)}</select></div>')


def _input(name: str, label: str, value: str, *, kind: str = "text", extra: str = "") -> str:
    return (f'<div><label for="f-{name}">{escape(label)}</label>'
            f'<input id="f-{name}" name="{name}" type="{kind}" value="{escape(value)}"{extra}></div>')


def _number(name: str, label: str, value: str, minimum: int = 1) -> str:
    return _input(name, label, value, kind="number", extra=f' min="{minimum}" step="1" inputmode="numeric"')


def _checkbox(name: str, label: str, g: Any) -> str:
    checked = " checked" if g(name) else ""
    return (f'<div><input id="f-{name}" name="{name}" type="checkbox"{checked}>'
            f'<label for="f-{name}" style="display:inline">{escape(label)}</label></div>')


def render_form(values: Mapping[str, str], catalog: Sequence[str], gpus: Sequence[str], *,
                collapsed: bool = False) -> str:
    """The form; ``collapsed`` (below an answer) folds it under a summary so the answer comes first."""
    v = {k: str(x) for k, x in values.items()}
    g = v.get
    models = "".join(f'<option value="{escape(m)}"></option>' for m in catalog)
    gpu_list = "".join(f'<option value="{escape(x)}"></option>' for x in gpus)
    fold = '<details id="ask"><summary>Ask another question (the form)</summary>' if collapsed else ""
    return f"""
{fold}<form method="get" action="/" id="query">
 <div class="grid">
  {_select("verb", "Question", VERBS, g("verb", "estimate"), None)}
  {_input("model", "Model (catalog name or upload:ID)", g("model", ""),
          extra=' list="models" required autocomplete="off" spellcheck="false"')}
  {_input("gpu", "GPU (needed for fit, plan and serve)", g("gpu", ""), extra=' list="gpus" autocomplete="off"')}
 </div>
 <datalist id="models">{models}</datalist><datalist id="gpus">{gpu_list}</datalist>
 <fieldset><legend>Workload</legend><div class="grid">
  {_select("mode", "Mode", MODES, g("mode", ""), "default (train)")}
  {_number("batch_size", "Batch size (per forward)", g("batch_size", ""))}
  {_number("seq_len", "Sequence length (tokens)", g("seq_len", ""))}
  {_number("image_size", "Image size (pixels)", g("image_size", ""), 8)}
  {_number("new_tokens", "New tokens (generate)", g("new_tokens", ""))}
  {_select("precision", "Precision", PRECISIONS, g("precision", ""), "default (fp32)")}
  {_select("optimizer", "Optimizer (train)", OPTIMIZERS, g("optimizer", ""), "default (adamw)")}
  {_select("checkpointing", "Activation checkpointing", CHECKPOINTING, g("checkpointing", ""), "default (none)")}
  {_number("grad_accum", "Gradient accumulation steps", g("grad_accum", ""))}
  {_number("high_precision_blocks", "Blocks kept in bf16 (fp8 / mxfp8 / nvfp4)", g("high_precision_blocks", ""))}
  {_select("attention", "Attention kernel", ATTENTIONS, g("attention", ""), "default (auto)")}
  {_select("optimizer_impl", "Optimizer implementation", OPTIMIZER_IMPLS, g("optimizer_impl", ""), "default (auto)")}
  {_select("zero_grad", "zero_grad", ZERO_GRADS, g("zero_grad", ""), "default (set-to-none)")}
  {_select("loss", "Loss", LOSSES, g("loss", ""), "default (auto)")}
 </div></fieldset>
 <fieldset><legend>Fine-tuning adapters and quantized base weights</legend><div class="grid">
  {_select("peft", "PEFT method", PEFTS, g("peft", ""), "default (none: full fine-tune)")}
  {_number("lora_rank", "LoRA rank", g("lora_rank", ""))}
  {_input("lora_alpha", "LoRA alpha", g("lora_alpha", ""), kind="number",
          extra=' min="0" step="any" inputmode="decimal"')}
  {_input("lora_dropout", "LoRA dropout (0-1)", g("lora_dropout", ""), kind="number",
          extra=' min="0" max="1" step="any" inputmode="decimal"')}
  {_input("lora_targets", "LoRA target modules (comma-separated, or all-linear)", g("lora_targets", ""),
          extra=' autocomplete="off" spellcheck="false"')}
  {_input("train_modules", "Modules trained whole (comma-separated)", g("train_modules", ""),
          extra=' autocomplete="off" spellcheck="false"')}
  {_select("load_in", "Load the base in (bitsandbytes)", LOAD_INS, g("load_in", ""), "default (none)")}
 </div></fieldset>
 <fieldset><legend>Diffusion and video pipelines (flux.1-dev, sdxl, wan2.1-t2v-1.3b, ...)</legend><div class="grid">
  {_number("steps", "Denoising steps", g("steps", ""))}
  {_number("frames", "Video frames", g("frames", ""))}
  {_number("image_width", "Image width (pixels; the size above is the height)", g("image_width", ""), 8)}
  {_select("offload", "Offload (diffusers)", PIPELINE_OFFLOADS, g("offload", ""), "default (none)")}
  {_input("quantize_components", "Quantized components (comma-separated)", g("quantize_components", ""),
          extra=' autocomplete="off" spellcheck="false"')}
  {_select("component_quant", "Component weight format", COMPONENT_QUANTS, g("component_quant", ""),
           "default (none)")}
  {_checkbox("vae_tiling", "VAE tiling", g)}
  {_checkbox("vae_slicing", "VAE slicing", g)}
  {_checkbox("cache_latents", "Training: latents cached", g)}
  {_checkbox("cache_text_embeddings", "Training: text embeddings cached", g)}
 </div></fieldset>
 <fieldset><legend>Estimate and fit</legend><div class="grid">
  {_select("weight_quant", "Weight-only quantization (inference)", WEIGHT_QUANTS,
           g("weight_quant", ""), "default (none)")}
  {_select("cuda_module_loading", "CUDA module loading", ("lazy", "eager"), g("cuda_module_loading", ""),
           "default (lazy)")}
  {_number("target_batch_size", "Fit: target batch size", g("target_batch_size", ""))}
 </div></fieldset>
 <fieldset><legend>Recommend</legend><div class="grid">
  {_number("max_gpus", "Most GPUs per option", g("max_gpus", ""))}
  {_input("budget_usd", "Budget (US dollars)", g("budget_usd", ""), kind="number",
          extra=' min="0" step="any" inputmode="decimal"')}
 </div></fieldset>
 <fieldset><legend>Plan (multi-GPU training)</legend><div class="grid">
  {_number("gpus", "GPUs in all", g("gpus", ""))}
  {_number("nodes", "Nodes", g("nodes", ""))}
  {_number("tp", "Tensor parallel", g("tp", ""))}
  {_number("pp", "Pipeline parallel", g("pp", ""))}
  {_number("dp", "Data parallel", g("dp", ""))}
  {_select("zero", "ZeRO stage", ("0", "1", "2", "3"), g("zero", ""), "searched")}
  <div><input id="f-fsdp" name="fsdp" type="checkbox"{" checked" if g("fsdp") else ""}>
   <label for="f-fsdp" style="display:inline">FSDP2</label></div>
  {_number("global_batch_size", "Global batch size", g("global_batch_size", ""))}
  {_number("micro_batch_size", "Micro-batch size", g("micro_batch_size", ""))}
 </div></fieldset>
 <fieldset><legend>Serve (inference engine; tensor and pipeline parallel above)</legend><div class="grid">
  {_select("engine", "Engine", ENGINES, g("engine", ""), "default (vllm)")}
  {_number("max_model_len", "Max model length (tokens)", g("max_model_len", ""))}
  {_number("context", "Context per sequence", g("context", ""))}
  {_number("concurrency", "Concurrent sequences", g("concurrency", ""))}
  {_number("input_len", "Prompt tokens per request", g("input_len", ""))}
  {_number("output_len", "Generated tokens per request", g("output_len", ""))}
  {_input("rate", "Requests per second", g("rate", ""), kind="number", extra=' min="0" step="any" inputmode="decimal"')}
  {_input("gpu_memory_utilization", "GPU memory utilization (0-1)", g("gpu_memory_utilization", ""), kind="number",
          extra=' min="0" max="1" step="any" inputmode="decimal"')}
  {_select("kv_cache_dtype", "KV cache dtype", KV_CACHE_DTYPES, g("kv_cache_dtype", ""), "default (auto)")}
  {_number("max_num_batched_tokens", "Max batched tokens", g("max_num_batched_tokens", ""))}
  {_number("max_num_seqs", "Max sequences", g("max_num_seqs", ""))}
  {_select("quantization", "Weight quantization", WEIGHT_QUANTS, g("quantization", ""), "default (none)")}
 </div></fieldset>
 <button type="submit" id="submit">Answer</button>
</form>
<form method="post" action="/upload" enctype="multipart/form-data" id="upload">
 <fieldset><legend>Or upload your model's file</legend>
  <label for="f-file">config.json, or a safetensors file's header
   (at most {format_bytes(UPLOAD_MAX_BYTES)}; never code)</label>
  <input id="f-file" name="file" type="file" accept=".json,.safetensors,application/json">
  <button type="submit" id="upload-submit">Upload</button>
 </fieldset>
</form>{"</details>" if collapsed else ""}"""


def _cell(key: str, value: Any) -> str:
    text, num = value_text(key, value)
    return f'<td class="num">{escape(text)}</td>' if num else f"<td>{escape(text)}</td>"


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (bool, int, float, str)) or (
        isinstance(value, dict) and set(value) == {"value", "unit"})


def _pairs_table(caption: str, items: Sequence[tuple[str, Any]], table_id: str = "", unit_key: str = "") -> str:
    """Name / value rows; ``unit_key`` (the dict's own key, e.g. ``components`` or ``by_phase_s``) gives
    the unit of values whose names carry none."""
    rows = "".join(f"<tr><th scope=\"row\">{escape(label(k))}</th>{_cell(unit_key or k, v)}</tr>"
                   for k, v in items)
    attr = f' id="{table_id}"' if table_id else ""
    return f"<table{attr}><caption>{escape(caption)}</caption><tbody>{rows}</tbody></table>"


def _list_table(caption: str, rows: list[dict[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns += [k for k, v in row.items() if _is_scalar(v) and k not in columns]
    head = "".join(f'<th scope="col">{escape(label(c))}</th>' for c in columns)
    body = "".join("<tr>" + "".join(_cell(c, r.get(c)) for c in columns) + "</tr>" for r in rows[:MAX_ROWS])
    more = f"<p>{len(rows) - MAX_ROWS} more rows in the JSON.</p>" if len(rows) > MAX_ROWS else ""
    return (f"<table><caption>{escape(caption)}</caption><thead><tr>{head}</tr></thead>"
            f"<tbody>{body}</tbody></table>{more}")


def _verdict(verb: str, data: dict[str, Any]) -> str:
    if data.get("kind") == "pipeline" and data.get("seconds_per_output"):  # serve PIPELINE: its generations
        unit = data.get("unit") or "image"
        return (f"{'Fits' if data.get('fits') else 'Does not fit'} on {data.get('gpu')}: "
                f"{data['seconds_per_output']:.2f} s per {unit}, {data.get('outputs_per_hour') or 0:,.0f} {unit}s per "
                "hour.")
    if verb == "serve" and data.get("reason"):
        return str(data["reason"])
    if "fits" in data and data["fits"] is not None:
        gpu = data.get("gpu") or "the GPU"
        return f"Fits on {gpu}." if data["fits"] else f"Does not fit on {gpu}."
    if verb == "fit" and "max_batch_size" in data:
        return f"Largest batch that fits {data.get('gpu')}: {data['max_batch_size']}."
    if verb == "recommend":
        recs = data.get("recommendations") or []
        return f"Best option: {recs[0]['count']} × {recs[0]['gpu']}." if recs else "Nothing in the catalog fits."
    if "params_count" in data and "weight_bytes" in data:
        return f"{format_count(data['params_count'])} parameters, {format_bytes(data['weight_bytes'])} of weights."
    return "Answer:"


def render_result(query: Query, outcome: Outcome) -> str:
    params = query.params()
    share = "/?" + urlencode(params)
    api = f"/api/{query.verb}?" + urlencode({k: v for k, v in params.items() if k != "verb"})
    links = (f'<p><a href="{escape(share)}" id="share">Link to this result</a> · '
             f'<a href="{escape(api)}" id="api">the same as JSON</a></p>')
    if not outcome.ok or outcome.data is None:
        return (f'<section id="result" aria-labelledby="result-h"><h2 id="result-h" tabindex="-1">Result</h2>'
                f'<p role="alert" class="error" id="error">{escape(outcome.error or "no answer")}</p>{links}</section>')
    data = outcome.data
    parts = [f'<section id="result" aria-labelledby="result-h"><h2 id="result-h" tabindex="-1">{escape(query.verb)}: '
             f'{escape(str(data.get("model", query.model)))}</h2>',
             f'<p class="verdict" id="verdict">{escape(_verdict(query.verb, data))}</p>']
    head = [(k, data[k]) for k in HEADLINE if k in data and _is_scalar(data[k])]
    if head:
        parts.append(_pairs_table("Headline figures", head, "headline"))
    if outcome.svg:
        caption = VIEWS[query.verb].caption if query.verb in VIEWS else ""
        parts.append(f'<figure id="picture">{outcome.svg}<figcaption>{escape(caption)}</figcaption></figure>')
    for key, value in data.items():
        if key in HEADLINE or key == "assumptions":
            continue
        if isinstance(value, dict) and value and all(_is_scalar(v) for v in value.values()) \
                and set(value) != {"value", "unit"}:
            parts.append(_pairs_table(label(key), list(value.items()),
                                      "components" if key == "components" else "",
                                      unit_key=key if key == "components" or key.endswith(("_bytes", "_s")) else ""))
        elif isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
            parts.append(_list_table(label(key), value))
    pipe = data.get("pipeline") or (data.get("estimate") or {}).get("pipeline")
    if isinstance(pipe, dict):  # a diffusion pipeline's components and the peak of each phase
        parts.append(_list_table("Pipeline components", list(pipe.get("components") or [])))
        parts.append(_pairs_table("Peak live tensors by phase", list((pipe.get("phase_peak_bytes") or {}).items()),
                                  "", unit_key="phase_peak_bytes"))
    rest = [(k, v) for k, v in data.items() if k not in HEADLINE and _is_scalar(v)]
    if rest:
        parts.append(_pairs_table("Other figures", rest))
    notes = data.get("assumptions") or []
    if notes:
        parts.append("<h3>Assumptions</h3><ul>" + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>")
    parts.append(links)
    parts.append("</section>")
    return "".join(parts)


def render_page(values: Mapping[str, str], catalog: Sequence[str], gpus: Sequence[str], *,
                result_html: str = "", error: str | None = None, notes: Sequence[str] = ()) -> str:
    error_html = f'<p role="alert" class="error" id="error">{escape(error)}</p>' if error else ""
    notes_html = "".join(f'<p class="note">{escape(n)}</p>' for n in notes)
    skip = '<a href="#result-h" id="skip">Skip to the result</a>' if result_html else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>gpuplan</title><style>{STYLE}</style></head>
<body>{skip}<header><h1>gpuplan</h1><p>What a PyTorch workload needs from a GPU: memory, time, fit, GPUs to use,
and a multi-GPU plan. The same answers as the command line; JSON at <code>/api/VERB</code>.</p></header>
<main>{error_html}{notes_html}{result_html}{render_form(values, catalog, gpus, collapsed=bool(result_html))}</main>
</body></html>"""
