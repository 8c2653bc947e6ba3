"""--plot pictures: every figure rendered to PNG and SVG for tiny models, its structure checked
(axes, series, labels), and the numbers written in the picture equal to the JSON's.

The SVG is written with text kept as text (svg.fonttype none), so the peak and the totals are read
back from the file itself. The estimate timeline is the traced run's live tensor bytes by category
after every op (trace.scaling.category_vectors): for a model traced whole its maximum is the
exact-accounting peak, ``tensor_peak_bytes``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from gpuplan.cli.main import main
from gpuplan.errors import ConfigError
from gpuplan.estimate import estimate
from gpuplan.report import plot
from gpuplan.report.labels import label
from gpuplan.report.plot import estimate_timeline
from tests.fixtures.tiny_models import TINY_GPT2

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _svg_texts(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return [re.sub(r"\s+", " ", t).strip() for t in re.findall(r"<text[^>]*>(.*?)</text>", text, flags=re.S)]


def _bytes_in(texts: list[str], label: str) -> int:
    """The exact byte count the picture writes after ``label`` ('peak 3.63 MiB (3,810,600 bytes)')."""
    joined = " ".join(texts)  # a two-line label is two <text> elements
    m = re.search(rf"(?:^| ){re.escape(label)} [\d.]+ [KMG]?i?B \(([\d,]+) bytes\)", joined)
    if m:
        return int(m.group(1).replace(",", ""))
    raise AssertionError(f"no {label!r} with a byte count among the picture's texts: {texts}")


def _render_both(fig: Figure, tmp_path: Path, name: str) -> tuple[Path, Path]:
    png, svg = plot.save_figure(fig, tmp_path / f"{name}.png"), plot.save_figure(fig, tmp_path / f"{name}.svg")
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 10_000
    assert svg.read_text(encoding="utf-8").lstrip().startswith("<?xml")
    return png, svg


def _cli_picture(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, drawer: str, argv: list[str]
                 ) -> tuple[dict[str, Any], Figure, Path]:
    """Run ``gpuplan ARGV --plot F.svg --html F.html --json`` in-process, keeping the figure the CLI drew
    (to render it to PNG as well and read its artists). Returns (stdout JSON, figure, SVG path)."""
    drawn: list[Figure] = []
    original = getattr(plot, drawer)

    def spy(*args: Any, **kwargs: Any) -> Figure:
        drawn.append(original(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(plot, drawer, spy)
    svg, page = tmp_path / f"{argv[0]}.svg", tmp_path / f"{argv[0]}.html"
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--plot", str(svg), "--html", str(page), "--json"])
    assert code == 0, err.getvalue()
    data = json.loads(out.getvalue())  # stdout: the one JSON object
    assert len(drawn) == 1 and page.read_text(encoding="utf-8").count("<svg") == 1
    png = plot.save_figure(drawn[0], tmp_path / f"{argv[0]}.png")
    assert png.read_bytes()[:8] == PNG_MAGIC
    return data, drawn[0], svg


@pytest.fixture(scope="module")
def train_est(tiny_gpt2: str) -> Any:
    return estimate(tiny_gpt2, mode="train", batch_size=2, seq_len=32, gpu="RTX-4090")


def test_estimate_picture_peak_equals_json_peak(train_est: Any, tmp_path: Path) -> None:
    data = json.loads(json.dumps(train_est.to_dict()))
    timeline = estimate_timeline(train_est)
    assert timeline is not None and not timeline.traced_blocks  # 2 blocks: traced whole
    # exact accounting: the timeline's maximum is the traced peak, to the byte
    assert max(timeline.totals()) == data["tensor_peak_bytes"]
    fig = plot.estimate_figure(data, timeline)
    _, svg = _render_both(fig, tmp_path, "estimate")
    area, bar = fig.axes
    assert "live tensor memory" in area.get_ylabel() and area.get_xlabel() == "op of the traced step"
    words = {label(k): k for k in plot.COLORS}  # legends say words, the JSON keys stay keys (issue 18 item 8)
    stacks = [c for c in area.collections if isinstance(c, PolyCollection) and c.get_label() in words]
    drawn = [words[c.get_label()] for c in stacks]
    assert drawn == [c for c in plot.TRACE_CATEGORIES if any(timeline.live_bytes[c])]
    assert {"parameters", "gradients", "optimizer_state", "activations"} <= set(drawn)
    phases = {t.get_text() for t in area.texts}
    assert {"forward", "backward", "optimizer"} <= phases
    texts = _svg_texts(svg)
    assert _bytes_in(texts, "peak") == data["tensor_peak_bytes"]
    # the peak marker sits at the peak, in the axis unit
    div, unit = plot._scale(data["tensor_peak_bytes"])
    marker = next(line for line in area.lines if line.get_marker() == "v")
    assert marker.get_ydata()[0] * div == pytest.approx(data["tensor_peak_bytes"], rel=1e-12)
    assert unit in area.get_ylabel()
    # the component bar sums to the JSON components; the GPU's usable memory is named
    assert _bytes_in(texts, "total") == sum(data["components"].values())
    assert [c.get_label() for c in bar.containers] == [label(k) for k, v in data["components"].items() if v]
    bar_div, _ = plot._scale(sum(data["components"].values()))
    assert sum(p.get_height() for p in bar.patches) * bar_div == pytest.approx(sum(data["components"].values()))
    assert any(f"{data['gpu']} usable" in t for t in texts)


def test_estimate_picture_of_a_scaled_generate_step(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny-gpt2-5.json"
    cfg.write_text(json.dumps(TINY_GPT2))  # 5 blocks: traced at 3 and 2, scaled to 5
    est = estimate(str(cfg), mode="generate", batch_size=2, seq_len=16, new_tokens=8)
    data = json.loads(json.dumps(est.to_dict()))
    timeline = estimate_timeline(est)
    assert timeline is not None and timeline.traced_blocks
    fig = plot.estimate_figure(data, timeline)
    _, svg = _render_both(fig, tmp_path, "generate")
    area = fig.axes[0]
    assert "KV cache" in [c.get_label() for c in area.collections]
    assert {"prefill", "decode"} <= {t.get_text() for t in area.texts}
    texts = _svg_texts(svg)
    # the full model's peak is a line with the JSON figure; the area is the traced run's shape
    assert _bytes_in(texts, "full-model peak") == data["tensor_peak_bytes"]
    assert any("timeline of the traced run" in t for t in texts)
    assert not any("usable" in t for t in texts)  # no --gpu: no GPU line


def test_weights_only_estimate_draws_the_bar_alone(tmp_path: Path) -> None:
    data = {"model": "w", "workload": {"mode": "infer", "batch_size": 1}, "tensor_peak_bytes": 1000,
            "components": {"parameters": 1000, "cuda_context": 500}}
    fig = plot.estimate_figure(data, None)
    _, svg = _render_both(fig, tmp_path, "weights")
    assert _bytes_in(_svg_texts(svg), "total") == 1500


@pytest.mark.slow
def test_fit_picture(monkeypatch: pytest.MonkeyPatch, tiny_gpt2: str, tmp_path: Path) -> None:
    data, fig, svg = _cli_picture(monkeypatch, tmp_path, "fit_figure",
                                  ["fit", tiny_gpt2, "--gpu", "RTX-3070", "--target-batch-size", "8"])
    probes = [p for p in (data["max_batch"], data["max_batch_plus_one"]) if p]
    mem, tim, ladder = fig.axes
    assert mem.get_xlabel() == "batch size" and "memory needed" in mem.get_ylabel()
    assert tim.get_ylabel() == "step time (ms)"
    # the frontier: a vertical line at the JSON's largest batch; the traced points fit on its left
    frontier = [line for line in mem.lines if list(line.get_xdata()) == [data["max_batch_size"]] * 2]
    assert frontier, "no frontier line at max_batch_size"
    fits, misses = mem.collections[0].get_offsets(), mem.collections[1].get_offsets()
    assert max(x for x, _ in fits) == data["max_batch_size"]
    assert min(x for x, _ in misses) == data["max_batch_size"] + 1
    assert len(fits) + len(misses) >= 3  # batch 1, 2 and the confirming traces at least
    div, _ = plot._scale(max(data["gpu_usable_memory_bytes"], *(p["min_required_bytes"] for p in probes)))
    top_fit = max(fits, key=lambda xy: xy[0])
    assert top_fit[1] * div == pytest.approx(data["max_batch"]["min_required_bytes"], rel=1e-12)
    assert [t.get_text() for t in ladder.get_yticklabels()] == [t["technique"] for t in data["techniques"]]
    assert any(f"largest batch that fits: {data['max_batch_size']}" in t for t in _svg_texts(svg))


@pytest.mark.slow
def test_plan_picture(monkeypatch: pytest.MonkeyPatch, tiny_gpt2: str, tmp_path: Path) -> None:
    data, fig, svg = _cli_picture(monkeypatch, tmp_path, "plan_figure",
                                  ["plan", tiny_gpt2, "--gpus", "2", "--gpu", "A100-80GB", "--global-batch-size", "4",
                                   "--micro-batch-size", "2"])
    mem, tim = fig.axes
    rows = len(data["ranks"]) + len(data["alternatives"])
    assert len(mem.get_yticklabels()) == rows and len(tim.get_yticklabels()) == 1 + len(data["alternatives"])
    assert _bytes_in(_svg_texts(svg), "per-GPU peak") == data["per_gpu_peak_bytes"]
    # each rank bar ends at the rank's JSON total (the parts are stacked to it)
    div, _ = plot._scale(max([data["usable_bytes_per_gpu"], *(r["total_bytes"] for r in data["ranks"])]))
    ends = {}
    for patch in mem.patches:
        y = round(patch.get_y() + patch.get_height() / 2)
        ends[y] = max(ends.get(y, 0.0), patch.get_x() + patch.get_width())
    assert ends[rows - 1] * div == pytest.approx(data["ranks"][0]["total_bytes"], rel=1e-9)
    # the legends sit below the figure (fig.legends: memory parts left, time parts right)
    legend = [t.get_text() for t in fig.legends[-1].get_texts()]
    assert "compute" in legend
    step_ms = sum(patch.get_width() for patch in tim.patches if round(patch.get_y() + 0.3) == len(data["alternatives"]))
    assert step_ms == pytest.approx(sum(data["time_parts_s"].values()) * 1e3, rel=1e-9)


@pytest.mark.slow
def test_recommend_picture_marks_the_pareto_front(monkeypatch: pytest.MonkeyPatch, tiny_gpt2: str,
                                                  tmp_path: Path) -> None:
    prices = tmp_path / "prices.csv"
    prices.write_text("RTX-4090,0.4\nA100-80GB,1.6\nH100-SXM,2.5\nL4,0.5\n")
    data, fig, svg = _cli_picture(monkeypatch, tmp_path, "recommend_figure",
                                  ["recommend", tiny_gpt2, "--max-gpus", "1", "--prices", str(prices)])
    times, costs = fig.axes
    fitting = [c for c in data["recommendations"] if c["step_time_s"]]
    assert [t.get_text() for t in times.get_yticklabels()] == [f"{c['count']}× {c['gpu']}" for c in fitting][:25]
    assert costs.get_ylabel() == "$ per million"
    pts = [(c["step_time_s"] * 1e3, c["cost_per_million_usd"]) for c in fitting if c["cost_per_million_usd"]]
    assert len(pts) >= 2
    front_line = next(line for line in costs.lines if line.get_label().startswith("Pareto front"))
    assert list(zip(front_line.get_xdata(), front_line.get_ydata(), strict=True)) == \
        [pts[i] for i in plot.pareto_front(pts)]
    assert any(t.startswith("Pareto front") for t in _svg_texts(svg))


@given(st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e6)), max_size=30))
def test_pareto_front_is_the_set_nothing_beats(points: list[tuple[float, float]]) -> None:
    front = plot.pareto_front(points)
    for i in front:  # nothing is at least as good on both and better on one
        assert not any(q[0] <= points[i][0] and q[1] <= points[i][1] and q != points[i] for q in points)
    for j in set(range(len(points))) - set(front):  # everything else is matched or beaten by the front
        assert any(points[i][0] <= points[j][0] and points[i][1] <= points[j][1] for i in front)


def test_bad_plot_paths_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"must end in \.png or \.svg"):
        plot.check_plot_path(tmp_path / "memory.pdf")
    with pytest.raises(ConfigError, match="does not exist"):
        plot.check_plot_path(tmp_path / "missing" / "memory.png")
    with pytest.raises(ConfigError, match="NUL character"):
        plot.check_plot_path("memory\x00.png")


def test_missing_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # import fails as if not installed
    with pytest.raises(ConfigError, match=re.escape("pip install 'gpuplan[plot]'")):
        plot.estimate_figure({"model": "m", "workload": {"mode": "infer", "batch_size": 1},
                              "tensor_peak_bytes": 1, "components": {"parameters": 1}})


def test_user_text_is_drawn_as_itself(tmp_path: Path) -> None:
    """A model named with $...$ (matplotlib's math mode) and <markup> is drawn literally and escaped in SVG."""
    data = {"model": "a$x^2$<b>&", "workload": {"mode": "infer", "batch_size": 1}, "tensor_peak_bytes": 1,
            "components": {"parameters": 1}}
    svg = plot.save_figure(plot.estimate_figure(data, None), tmp_path / "m.svg").read_text(encoding="utf-8")
    assert "a$x^2$&lt;b&gt;&amp;" in svg and "<b>" not in svg


@pytest.mark.slow
def test_serve_picture(monkeypatch: pytest.MonkeyPatch, tiny_gpt2: str, tmp_path: Path) -> None:
    data, fig, svg = _cli_picture(monkeypatch, tmp_path, "serve_figure", ["serve", tiny_gpt2, "--gpu", "RTX-4090"])
    mem, tim = fig.axes
    texts = _svg_texts(svg)
    assert _bytes_in(texts, "KV cache") == data["kv_cache_bytes"]
    assert _bytes_in(texts, "GPU") == data["total_memory_bytes"]
    assert _bytes_in(texts, "engine budget") == data["requested_memory_bytes"]
    div, _ = plot._scale(data["total_memory_bytes"])
    stacked = sum(data[p] or 0 for p in plot.SERVE_PARTS)
    assert sum(p.get_height() for p in mem.patches) * div == pytest.approx(stacked, rel=1e-12)
    assert [t.get_text().split(" (")[0] for t in tim.get_yticklabels()] == ["prefill", "decode"]


def test_recommend_serve_mode_refuses_a_picture_in_one_line(tmp_path: Path) -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["recommend", "gpt2", "--mode", "serve", "--plot", str(tmp_path / "r.png")])
    assert code == 2 and "--plot is not drawn for recommend --mode serve" in err.getvalue()
    assert not (tmp_path / "r.png").exists()
