"""The errors of hosting calls, on voxflow's tree (:mod:`voxflow.errors`)::

    VoxflowError
    + CapacityExceededError      a process refused a call: no headroom left (also RuntimeError)
    + SignalingError             an offer was refused (bad SDP, no audio track) (ValueError)
"""

from __future__ import annotations

from voxflow.errors import VoxflowError

__all__ = ["CapacityExceededError", "SignalingError"]


class CapacityExceededError(VoxflowError, RuntimeError):
    """A process refused a call: it has no headroom left (the message says why).

    Attributes:
        active_calls: the calls it holds.
        max_calls: its limit.
    """

    def __init__(self, message: str, *, active_calls: int, max_calls: int) -> None:
        super().__init__(message)
        self.active_calls = active_calls
        self.max_calls = max_calls


class SignalingError(VoxflowError, ValueError):
    """A WebRTC offer was refused (not an SDP offer, no audio track, negotiation failed)."""
