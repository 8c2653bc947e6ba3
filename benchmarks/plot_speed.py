"""Cost of the pictures: building estimate's timeline, drawing it, writing PNG / SVG / the HTML page.

The step is traced once per model (not timed here); each row times only what --plot / --html add
on top of the answer, and the size of what they write. Target: under 2 s and under 1 MB per picture
for a catalog LLM (a few thousand traced ops).

    python benchmarks/plot_speed.py [MODEL ...]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path


def main(models: list[str]) -> int:
    from gpuplan.estimate import estimate
    from gpuplan.report.html import render_html
    from gpuplan.report.plot import estimate_figure, estimate_timeline, figure_svg, save_figure
    from gpuplan.report.verbs import estimate_sections

    print(f"{'model':<16} {'ops':>6} {'timeline s':>10} {'draw s':>7} {'png s':>6} {'png KB':>7} "
          f"{'svg s':>6} {'svg KB':>7} {'html s':>7} {'html KB':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for model in models:
            est = estimate(model, batch_size=4, seq_len=1024 if "resnet" not in model else None,
                           precision="amp-bf16", gpu="H100-SXM")
            data = est.to_dict()
            t0 = time.perf_counter()
            timeline = estimate_timeline(est)
            t1 = time.perf_counter()
            fig = estimate_figure(data, timeline)
            t2 = time.perf_counter()
            png = save_figure(fig, Path(tmp) / "m.png")
            t3 = time.perf_counter()
            svg = save_figure(fig, Path(tmp) / "m.svg")
            t4 = time.perf_counter()
            page = render_html(model, data, text=str(est), svgs=[figure_svg(fig)], sections=estimate_sections(data))
            t5 = time.perf_counter()
            ops = len(timeline.phases) if timeline else 0
            print(f"{model:<16} {ops:>6} {t1 - t0:>10.2f} {t2 - t1:>7.2f} {t3 - t2:>6.2f} "
                  f"{png.stat().st_size / 1e3:>7.0f} {t4 - t3:>6.2f} {svg.stat().st_size / 1e3:>7.0f} "
                  f"{t5 - t4:>7.2f} {len(page.encode()) / 1e3:>8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["gpt2", "llama-3.1-8b", "resnet50"]))
