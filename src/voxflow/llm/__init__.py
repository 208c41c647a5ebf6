"""LLM access: ``LLM`` over litellm, and the ``BaseLLM`` protocol the runtime calls.

:mod:`.client` is ``LLM`` and ``BaseLLM``; :mod:`.messages` what goes in and comes out of a
call, :mod:`.events` what a call reports while it runs, :mod:`.stream` a streamed call,
:mod:`.policy` the timeouts, retries and endpoints a call may use. litellm itself is
imported on the first call (:mod:`._litellm`), so ``import voxflow`` stays light.
"""

from .client import *  # noqa: F403  (its public names, listed once: in its __all__)
from .client import __all__ as __all__
