"""Example flows shipped with voxflow: :mod:`voxflow.examples.assistant` is the
assistant that ``voxflow demo``, ``chat``, ``chat --voice`` and ``serve`` run when no
FLOW is given."""
