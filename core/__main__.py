"""``python -m core``: the command line."""

from core.cli.commands import main

raise SystemExit(main())
