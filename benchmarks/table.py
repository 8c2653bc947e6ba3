"""The plain-text table the benchmark scripts print, and the machine-load line under it."""

from __future__ import annotations

import os
from collections.abc import Sequence


def print_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, tuple("-" * w for w in widths), *rows]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    print(f"\nload average: {os.getloadavg()[0]:.1f} (other work on the machine slows these figures)")
