"""``python -m voxflow.cli``: the ``voxflow`` command."""

from .app import main

raise SystemExit(main())
