"""``--plot FILE.png|FILE.svg`` and ``--html FILE`` for estimate, fit, plan and recommend: the flags,
the early checks (before any tracing) and the writing. The pictures and the page are drawn by
report/plot.py and report/html.py from the result's JSON dict; stdout is never touched, so
``--json`` stays one object."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpuplan.cli._workload import add_options
from gpuplan.errors import ConfigError
from gpuplan.report.options import PICTURE_OPTIONS


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    add_options(parser, PICTURE_OPTIONS)  # described once (report/options.py)


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse a bad --plot/--html path, or missing matplotlib, before the (slow) work starts."""
    from gpuplan.report.plot import check_plot_path

    if args.plot is not None:
        check_plot_path(args.plot)
    if args.html is not None:
        parent = Path(args.html).parent
        if args.html.strip() == "-":  # not a file named '-': stdout already holds the answer (or the JSON)
            raise ConfigError("--html - would mix the page into stdout, which holds the answer; give a file name "
                              "(--html report.html)")
        if "\x00" in args.html:
            raise ConfigError(f"--html {args.html!r}: a path cannot hold a NUL character; pick another path")
        if not parent.is_dir():
            raise ConfigError(f"--html {args.html!r}: folder {str(parent)!r} does not exist; create it or pick "
                              "another path")
    if args.plot is not None or args.html is not None:
        from gpuplan.extras import PLOT, require

        require(PLOT)


def write_outputs(args: argparse.Namespace, *, title: str, result: Any, data: dict[str, Any] | None = None,
                  text: str | None = None) -> None:
    """Draw once, then write the picture and/or the page that the flags ask for: the picture and the tables
    are the result type's (report/verbs.py, the web page's too); ``data`` / ``text`` default to its JSON and
    text."""
    if args.plot is None and args.html is None:
        return
    from gpuplan.report.plot import figure_svg, save_figure
    from gpuplan.report.verbs import view_of

    view = view_of(result)
    if view.figure is None:  # a bug: a verb offers --plot / --html only for a result with a picture
        raise LookupError(f"no picture registered for {type(result).__name__} (report/verbs.py)")
    data = result.to_dict() if data is None else data
    fig = view.figure(data, result, vars(args))
    if args.plot is not None:
        save_figure(fig, args.plot)
    if args.html is not None:
        from gpuplan.report.html import render_html

        sections = view.sections(data, result) if view.sections is not None else []
        page = render_html(title, data, text=str(result) if text is None else text, svgs=[figure_svg(fig)],
                           sections=sections)
        try:
            Path(args.html).write_text(page, encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--html {args.html!r}: cannot write it ({exc.strerror}); pick a writable path") from None
