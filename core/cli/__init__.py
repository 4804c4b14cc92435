"""``python -m core``: the headless command line."""
