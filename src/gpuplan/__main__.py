"""`python -m gpuplan ...` runs the command line, as the `gpuplan` script does (useful where the
venv's bin/ is not on PATH, e.g. `.venv/bin/python -m gpuplan estimate gpt2`)."""

from gpuplan.cli.main import main

if __name__ == "__main__":  # importing this module (e.g. an import sweep in the tests) runs nothing
    raise SystemExit(main())
