"""The ``voxflow`` command line: :func:`main` (:mod:`.app`), the text chat (:mod:`.repl`),
``voxflow bench`` (:mod:`.bench`) and ``voxflow doctor`` (:mod:`.doctor`)."""

from .app import main

__all__ = ["main"]
