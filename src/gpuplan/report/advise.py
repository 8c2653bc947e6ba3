"""Terminal text for fit and recommend results (GiB throughout). Result types are imported for
type checking only: advise/ imports this module, never the other way round."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from gpuplan.report.text import table
from gpuplan.units import GIB, distinguishing_digits, format_bytes, format_seconds

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpuplan.advise.fit import FitResult, Point, ResolutionFit, SeqLenFit
    from gpuplan.advise.recommend import Recommendation


def _tp(tp: Mapping[str, Any] | None) -> str:
    return f"{tp['value']:,.1f} {tp['unit']}" if tp else "-"


def _time(t: float | None) -> str:
    return format_seconds(t) if t is not None else "-"


def _gib(n: int | None, digits: int = 2) -> str:
    return f"{n / GIB:.{digits}f}" if n is not None else "-"


def _point_row(label: str, p: Point, digits: int = 2) -> list[str]:
    w = p.workload
    shape = f"{w.batch_size}" + (f"×{w.grad_accum}" if w.grad_accum > 1 else "")
    return [
        label,
        shape,
        _gib(p.need_bytes, digits),
        "yes" if p.fits else "no",
        _time(p.step_time_s),
        p.interval.span() if p.interval is not None else "-",
        _tp(p.throughput),
    ]


def _interval_basis(points: list[Point]) -> list[str]:
    """The line naming the public rows the 80% column comes from."""
    basis = next((p.interval.basis for p in points if p.interval is not None), None)
    return [f"80%: prediction interval of the step time, from {basis}"] if basis else []


def render_fit(r: FitResult) -> str:
    points = [p for p in (r.max_point, r.over_point, *(t.point for t in r.techniques)) if p is not None]
    # the needs column and the usable figure it is judged against print with enough decimals to differ
    digits = distinguishing_digits([p.need_bytes for p in points],
                                   r.gpu.usable_memory_bytes, GIB)
    usable = format_bytes(r.gpu.usable_memory_bytes, "GiB" if digits > 2 else None, digits)
    peft = f", --peft {r.workload.peft} rank {r.workload.lora_rank}" if r.workload.uses_peft else ""
    lines = [f"{r.model} on {r.gpu.id} ({usable} usable) — {r.workload.mode}, {r.workload.precision}{peft}"]
    if r.max_batch_size >= 1 and r.bytes_per_sample is not None:
        lines.append(
            f"largest batch that fits: {r.max_batch_size} (~{format_bytes(r.bytes_per_sample)} per extra sample)"
            + (" — the largest batch size gpuplan accepts; memory is not the limit" if r.over_point is None else "")
        )
    else:
        lines.append("batch 1 does not fit as given")
    confirm = [p for p in (r.max_point, r.over_point) if p is not None]
    if confirm:
        lines += [
            "",
            table(
                [_point_row("confirmed by trace", p, digits) for p in confirm],
                ["", "batch", "needs GiB", "fits", "step", "80%", "throughput"],
            ),
        ]
    if r.techniques:
        lines += [
            "",
            f"techniques for batch {r.target_batch_size or 1} (cheapest in speed first, cumulative):",
        ]
        lines.append(
            table(
                [_point_row(t.name, t.point, digits) for t in r.techniques],
                ["technique", "batch", "needs GiB", "fits", "step", "80%", "throughput"],
            )
        )
        lines.append(
            "answer: " + answer_flags(r) if r.target_fits else "answer: does not fit even with every technique"
        )
    lines += _interval_basis(points)
    if not r.ok and r.largest_gpu:
        lines.append(
            f"needs at least {format_bytes(r.needed_bytes or 0)}; {r.gpu.id} has {usable}; the largest "
            f"{r.gpu.vendor.split()[0]} GPU in the catalog is {r.largest_gpu} — try `gpuplan recommend` for "
            "multi-GPU layouts"
        )
    if r.assumptions:
        lines += ["", "assumptions:"] + [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)


def render_seq_len_fit(r: SeqLenFit) -> str:
    """The text of ``gpuplan fit --axis seq-len``."""
    w = r.workload
    setup = f", --peft {w.peft} rank {w.lora_rank}" if w.peft != "none" else ""
    answer = (f"largest sequence length that fits: {r.max_seq_len:,} tokens "
              f"(~{format_bytes(r.bytes_per_token)} per extra token)"
              + (f" — the search's limit ({r.limit_tokens:,}); memory is not the limit" if r.over_point is None else "")
              if r.ok else r.reason or "")
    text = _frontier_text(r, setup, answer, "seq-len", lambda p: p.workload.seq_len, "step")
    if not r.ladder:
        return text
    rows = [[rung.name, f"{rung.max_seq_len:,}", rung.description] for rung in r.ladder]
    return text + "\n\nlong-context rungs (each keeps the ones above):\n" + table(rows, ["rung", "max seq-len", "what"])


def render_resolution_fit(r: ResolutionFit) -> str:
    """The text of ``gpuplan fit --axis resolution`` (a diffusion pipeline's largest square image)."""
    w = r.workload
    setup = (f", {w.frames} frames" if w.frames else "") + (f", --offload {w.offload}" if w.offload != "none" else "")
    answer = (f"largest image that fits: {r.max_image_size:,}×{r.max_image_size:,} px (steps of {r.step_px} px, "
              f"~{format_bytes(r.bytes_per_step)} per step)"
              + (f" — the search's limit ({r.limit_px:,} px); memory is not the limit" if r.over_point is None else "")
              if r.ok else r.reason or "")
    return _frontier_text(r, setup, answer, "image px", lambda p: p.workload.image_size,
                          "step" if w.trains else "generation")


def _frontier_text(r: SeqLenFit | ResolutionFit, setup: str, answer: str, column: str,
                   value: Callable[[Point], int | None], time_header: str) -> str:
    """A largest-value search's text (fit --axis seq-len | resolution): the answer and its confirming traces."""
    w = r.workload
    points = [p for p in (r.max_point, r.over_point) if p is not None]
    digits = distinguishing_digits([p.need_bytes for p in points], r.gpu.usable_memory_bytes, GIB)
    usable = format_bytes(r.gpu.usable_memory_bytes, "GiB" if digits > 2 else None, digits)
    lines = [f"{r.model} on {r.gpu.id} ({usable} usable) — {w.mode}, batch {w.batch_size}, {w.precision}{setup}",
             answer]
    if points:
        rows = [["confirmed by trace", f"{value(p) or 0:,}", _gib(p.need_bytes, digits), "yes" if p.fits else "no",
                 _time(p.step_time_s), p.interval.span() if p.interval is not None else "-", _tp(p.throughput)]
                for p in points]
        lines += ["", table(rows, ["", column, "needs GiB", "fits", time_header, "80%", "throughput"])]
        lines += _interval_basis(points)
    if r.assumptions:
        lines += ["", "assumptions:"] + [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)


def answer_flags(r: FitResult) -> str:
    """The flags that turn the given workload into the one that fits (the ladder's last rung)."""
    if not r.techniques:
        return "fits as given"
    final, base = r.techniques[-1].point.workload, r.workload
    flags = [
        f"--{name.replace('_', '-')} {getattr(final, name)}"
        for name in ("precision", "optimizer", "checkpointing", "peft", "lora_rank")
        if getattr(final, name) != getattr(base, name)
    ]
    if final.load_in != base.load_in:
        flags.append(f"--load-in-{final.load_in}")
    if final.lora_targets != base.lora_targets:  # the ladder only drops them: PEFT's default targets
        flags.append("(no --lora-targets: PEFT's default)")
    if final.grad_accum != base.grad_accum or final.batch_size != (r.target_batch_size or base.batch_size):
        flags.append(
            f"--batch-size {final.batch_size} --grad-accum {final.grad_accum} "
            f"(effective batch {final.batch_size * final.grad_accum})"
        )
    if r.techniques[-1].name == "cpu-offload":
        flags.append("+ optimizer offloaded to the CPU (DeepSpeed ZeRO-Offload)")
    return " ".join(flags) or "fits as given"


def render_recommendation(r: Recommendation, *, top: int | None = None, show_out: int = 15) -> str:
    """The text of ``gpuplan recommend``: the ``top`` fastest fitting candidates (all: None)."""
    w = r.workload
    lines = [
        f"{r.model} — {w.mode}, batch {w.batch_size}"
        + (f", seq {w.seq_len}" if w.seq_len else "")
        + (", precision per GPU" if r.precision_per_gpu else f", {w.precision}")
        + f"; per GPU: {format_bytes(r.per_gpu_fixed_bytes)} model state + "
        f"{format_bytes(r.per_gpu_batch_bytes)} activations/cache (single GPU); "
        f"traced once in {r.trace_s:.1f} s",
        "",
    ]
    rows = []
    shown = r.candidates_in if top is None else r.candidates_in[:top]
    for i, c in enumerate(shown, 1):
        rows.append(
            [
                str(i),
                c.gpu.id,
                str(c.count),
                c.gpu.tier,
                c.layout,
                *([c.precision] if r.precision_per_gpu else []),
                _gib(c.per_gpu_bytes),
                _gib(c.gpu.usable_memory_bytes),
                _time(c.step_time_s),
                c.interval.span() if c.interval is not None else "-",
                _tp(c.throughput),
                f"{c.cost_per_hour_usd:,.2f}" if c.cost_per_hour_usd is not None else "-",
                f"{c.cost_per_million_usd:,.3f}" if c.cost_per_million_usd is not None else "-",
            ]
        )
    unit = r.candidates_in[0].throughput["unit"] if r.candidates_in and r.candidates_in[0].throughput else ""
    per = unit.split("/")[0] if unit else "units"
    lines.append(
        table(
            rows,
            [
                "#",
                "GPU",
                "n",
                "tier",
                "layout",
                *(["precision"] if r.precision_per_gpu else []),
                "GiB/GPU",
                "has GiB",
                "step",
                "80%",
                "throughput",
                "$/h",
                f"$/1M {per}",
            ],
        )
    )
    ties = [c for c in shown if c.within_uncertainty_of is not None]
    if ties:
        lines.append("within the model's uncertainty (80% intervals overlap; the order is not a ranking): "
                     + ", ".join(f"{c.gpu.id} vs {c.within_uncertainty_of}" for c in ties))
    basis = next((c.interval.basis for c in shown if c.interval is not None), None)
    if basis:
        lines.append(f"80%: prediction interval of the step time (e.g. {shown[0].gpu.id}: from {basis})"
                     if shown[0].interval is not None else f"80%: prediction interval of the step time ({basis})")
    if not r.candidates_in:
        lines.append("(nothing fits)" if not r.untimed else "(nothing that fits can be timed)")
    elif len(shown) < len(r.candidates_in):
        lines.append(f"({len(shown)} of {len(r.candidates_in)} that fit shown: --top {len(r.candidates_in)} shows all)")
    if r.untimed:
        n = len(r.untimed)
        lines += ["", f"fit but not ranked ({n} GPU{'' if n == 1 else 's'}: the catalog documents no rate to time "
                  f"{'it' if n == 1 else 'them'}):"]
        lines += [f"  {c.gpu.id}: {c.reason}" for c in r.untimed]
    if r.by_cost:
        lines += ["", f"cheapest per million {per} (your --prices):"]
        cost_rows = [
            [
                str(i),
                c.gpu.id,
                str(c.count),
                f"{c.cost_per_hour_usd or 0:,.2f}",
                f"{c.cost_per_million_usd or 0:,.3f}",
                _time(c.step_time_s),
            ]
            for i, c in enumerate(r.by_cost[: min(10, top or 10)], 1)
        ]
        lines.append(table(cost_rows, ["#", "GPU", "n", "$/h", f"$/1M {per}", "step"]))
    out = r.candidates_out[:show_out]
    if out:
        lines += ["", f"out ({len(r.candidates_out)} GPUs; {len(out)} shown):"]
        lines += [f"  {c.gpu.id}: {c.reason}" for c in out]
    if r.assumptions:
        lines += ["", "assumptions:"] + [f"  - {a}" for a in r.assumptions]
    return "\n".join(lines)
