"""``python -m core``: the command line."""

from core.cli.main import main

raise SystemExit(main())
