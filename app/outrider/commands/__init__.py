"""Command families of the ``outrider`` CLI (see outrider.cli)."""
