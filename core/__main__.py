"""``python -m core``: the command line."""

from core.cli import main

raise SystemExit(main())
