"""Command-line front end: one module per verb, each with ``add_parser`` and ``run``."""
