"""The HTML of the page: the form (every input labelled, usable from the keyboard alone) and the
result, rendered from the verb's ``--json`` object. Plain strings, escaped; no script, no network."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any, Final
from urllib.parse import urlencode

from gpuplan.report.labels import label, value_text
from gpuplan.report.options import PEFT_GROUP, PIPELINE, WORKLOAD, Option
from gpuplan.report.verbs import REGISTRY
from gpuplan.ui.jobs import Outcome
from gpuplan.ui.query import VERB_OPTIONS, VERBS, WORKLOAD_OPTIONS, Query
from gpuplan.ui.uploads import UPLOAD_MAX_BYTES
from gpuplan.units import format_bytes, format_count

MAX_ROWS: Final = 60
"""Rows shown of a long list (recommend's excluded GPUs); the JSON API has them all."""

HEADLINE: Final = ("fits", "ok", "max_batch_size", "target_fits", "peak_allocated_bytes", "total_required_bytes",
                   "min_required_bytes", "per_gpu_peak_bytes", "headroom_bytes", "step_time_s", "mfu",
                   "params_count", "weight_bytes", "reason", "seconds_per_output", "outputs_per_hour",
                   "usd_per_1000_outputs", "host_memory_bytes", "tokens_per_s_per_gpu", "limiting_phase")


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


WORKLOAD_FIELDSETS: Final = ((WORKLOAD, "Workload"), (PEFT_GROUP, PEFT_GROUP),
                             (PIPELINE, "Diffusion and video pipelines (flux.1-dev, sdxl, wan2.1-t2v-1.3b, ...)"))
VERB_FIELDSETS: Final[Mapping[str, str]] = {verb: REGISTRY[verb].legend for verb in VERBS}
"""Each verb's fieldset legend: the verb's entry in the one registry (report/verbs.py)."""


def _all_fields() -> dict[str, list[Option]]:
    """Every web parameter and the options that name it (a name some verbs share, as tp or offload)."""
    found: dict[str, list[Option]] = {}
    for option in (*WORKLOAD_OPTIONS.values(), *(o for spec in VERB_OPTIONS.values() for o in spec.values())):
        found.setdefault(option.param, []).append(option)
    return found


FIELDS: Final = _all_fields()


def field_label(param: str) -> str:
    """The form's label of a parameter: the first described one (every web option has one, tests check)."""
    return next((o.label for o in FIELDS[param] if o.label), param.replace("_", " "))


def _control(param: str, value: str) -> str:
    """The form control of one parameter, made from its description (kind, choices, bounds)."""
    options = FIELDS[param]
    option = options[0]
    text = field_label(param)
    if len({o.kind for o in options}) > 1:  # one name, several kinds (offload: a choice, rl's list): typed
        names = sorted({c for o in options for c in (o.web_choices or o.choices)})
        listing = "".join(f'<option value="{escape(c)}"></option>' for c in names)
        return (_input(param, text, value, extra=f' list="l-{param}" autocomplete="off" spellcheck="false"')
                + f'<datalist id="l-{param}">{listing}</datalist>')
    if option.kind == "switch":
        checked = " checked" if value else ""
        return (f'<div><input id="f-{param}" name="{param}" type="checkbox"{checked}>'
                f'<label for="f-{param}" style="display:inline">{escape(text)}</label></div>')
    if option.kind == "choice":
        unset = option.unset or (f"default ({option.default})" if option.default is not None else "default")
        return _select(param, text, option.web_choices or option.choices, value, unset)
    bounds = "".join(f' {k}="{v:g}"' for k, v in (("min", option.minimum), ("max", option.maximum)) if v is not None)
    if option.kind == "int" and option.parse is None:
        return _input(param, text, value, kind="number", extra=f'{bounds} step="1" inputmode="numeric"')
    if option.kind == "float":
        return _input(param, text, value, kind="number", extra=f'{bounds} step="any" inputmode="decimal"')
    listing = ' list="models"' if option.kind == "model" else ""
    return _input(param, text, value, extra=f'{listing} autocomplete="off" spellcheck="false"')


def _fieldsets(v: Mapping[str, str]) -> str:
    """The workload's fieldsets, then each verb's: every web parameter once, where it is first described."""
    shown = {"gpu"}  # at the top, beside the model
    parts = []
    for group, legend in WORKLOAD_FIELDSETS:
        params = [p for p, o in WORKLOAD_OPTIONS.items() if o.group == group and p not in shown]
        shown.update(params)
        parts.append(_fieldset(legend, params, v))
    for verb in VERBS:
        params = [p for p in VERB_OPTIONS[verb] if p not in shown]
        shown.update(params)
        if params:
            parts.append(_fieldset(VERB_FIELDSETS[verb], params, v))
    return "\n ".join(parts)


def _fieldset(legend: str, params: Sequence[str], v: Mapping[str, str]) -> str:
    controls = "\n  ".join(_control(p, v.get(p, "")) for p in params)
    return f'<fieldset><legend>{escape(legend)}</legend><div class="grid">\n  {controls}\n </div></fieldset>'


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
  {_input("gpu", field_label("gpu"), g("gpu", ""), extra=' list="gpus" autocomplete="off"')}
 </div>
 <datalist id="models">{models}</datalist><datalist id="gpus">{gpu_list}</datalist>
 {_fieldsets(v)}
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
        parts.append(f'<figure id="picture">{outcome.svg}<figcaption>{escape(outcome.caption)}</figcaption></figure>')
    if outcome.text:  # the command line's text report, from the same renderer (report/registry.py)
        opened = "" if outcome.svg else " open"
        parts.append(f'<details id="report"{opened}><summary>The text report (as gpuplan {escape(query.verb)} '
                     f'prints it)</summary><pre>{escape(outcome.text)}</pre></details>')
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
