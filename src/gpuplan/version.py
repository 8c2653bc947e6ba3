"""gpuplan's version: one copy, read by the package, the CLI (``--version``) and the build (pyproject)."""

VERSION = "0.1.0"
