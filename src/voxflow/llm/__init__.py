"""LLM access: ``LLM`` over litellm, and the ``BaseLLM`` protocol the runtime calls.

:mod:`.client` is ``LLM`` and ``BaseLLM``; :mod:`.messages` what goes in and comes out of a
call, :mod:`.events` what a call reports while it runs, :mod:`.stream` a streamed call,
:mod:`.policy` the timeouts, retries and endpoints a call may use. litellm itself is
imported off the event loop when an entry point starts or on the first call
(:func:`preload`, :mod:`._litellm`), so ``import voxflow`` stays light.
"""

from ._litellm import preload as preload
from .client import *  # noqa: F403  (its public names, listed once: in its __all__)
from .client import __all__ as _client_all

__all__ = [*_client_all, "preload"]
