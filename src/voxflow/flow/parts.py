"""Parts: what a layer built on the Flow core adds to a Flow, as objects the Flow holds.

A Flow class names its part types in ``_part_types`` (:class:`voxflow.Flow` names
:class:`voxflow.conversation.part.Conversation`; the core names none). Every instance of
the class holds one instance of each, under the part's :attr:`FlowPart.attribute`
(``flow.conversation``), built with the :class:`~voxflow.flow.host.FlowHost` of that
Flow: the only way a part reaches the Flow's run (its state, kickoff, saves, events).
The runtime calls the parts at fixed points; every hook has a default that does nothing,
so a part overrides only what it needs:

Class hooks (classmethods given the Flow class, when it is created and again when it is
reconfigured, e.g. by ``@ConversationConfig``):

* :meth:`~FlowPart.prepare_class`: reset per-class caches.
* :meth:`~FlowPart.extra_methods`: decorated functions registered as if declared on the
  class (the built-in conversation graph). They supply the wiring (decorator marks);
  what runs is ``getattr(flow, name)``, so an undecorated method of that name on the
  class is called, and the function itself is installed only when the class has none.
* :meth:`~FlowPart.default_state`: the state model of a class that names none.
* :meth:`~FlowPart.check_class`: once the class's definition is compiled, refuse what
  the part can see is wired wrongly (``FlowDefinitionError``).

Instance hooks, in the order a kickoff meets them:

* :meth:`~FlowPart.skips_restore`: ``inputs["id"]`` restores that id's saved state
  unless a part holds it live (a tracked conversation).
* :meth:`~FlowPart.emits_flow_started` / ``emits_flow_failed`` / ``emits_flow_finished``:
  False skips (defers) that flow event, e.g. one ``flow_finished`` per session.
* :meth:`~FlowPart.order_starts`: run the starts one at a time, in the returned order.
* :meth:`~FlowPart.revision_read` and :meth:`~FlowPart.prepare_state_save`: every load
  tells the parts the revision it read; a save asks them for the write (the first part
  that returns one wins; else the core writes a full snapshot).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from voxflow.errors import FlowDefinitionError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from voxflow.flow.host import FlowHost

__all__ = ["FlowPart", "check_part_names", "checked_part_types"]


class FlowPart:
    """One part of a Flow (see the module docs); subclasses override the hooks they need.

    Args:
        host: the Flow holding this part, as parts see it.
    """

    attribute: ClassVar[str] = ""
    """The name the Flow holds this part under (``flow.<attribute>``)."""

    __slots__ = ()

    def __init__(self, host: FlowHost) -> None:
        del host  # a part that needs its host keeps it

    # ------------------------------------------------------------------ the class

    @classmethod
    def prepare_class(cls, flow_cls: type[Any]) -> None:
        """``flow_cls`` was created or reconfigured: reset what was cached for it."""

    @classmethod
    def extra_methods(cls, flow_cls: type[Any]) -> Mapping[str, Callable[..., Any]]:
        """Decorated functions to register on ``flow_cls`` besides its own methods."""
        return {}

    @classmethod
    def default_state(cls, flow_cls: type[Any]) -> type[BaseModel] | None:
        """The state model of ``flow_cls`` when it names none (None: a dict state)."""
        return None

    @classmethod
    def check_class(cls, flow_cls: type[Any]) -> None:
        """``flow_cls``'s definition is compiled: raise ``FlowDefinitionError`` for what
        the part can see is wired wrongly."""

    # ------------------------------------------------------------------ a kickoff

    def skips_restore(self, flow_id: str) -> bool:
        """True: this part holds ``flow_id``'s state live; ``inputs["id"]`` must not
        replace it with the stored snapshot."""
        return False

    def emits_flow_started(self) -> bool:
        """False skips this run's ``FlowStarted``."""
        return True

    def emits_flow_failed(self) -> bool:
        """False skips this run's ``FlowFailed`` (the exception still propagates)."""
        return True

    def emits_flow_finished(self) -> bool:
        """False skips (defers) this run's ``FlowFinished``."""
        return True

    def order_starts(self, names: list[str]) -> list[str] | None:
        """The order the starts ``names`` run in, one at a time (None: no order, they
        run concurrently)."""
        return None

    # ------------------------------------------------------------------ saves

    def revision_read(self, backend: Any, flow_id: str, revision: int) -> None:
        """``backend`` was just read at ``revision`` for ``flow_id``."""

    def prepare_state_save(self, backend: Any, method_name: str) -> Callable[[], None] | None:
        """Snapshot the state now (on the loop) and return the blocking write to
        ``backend``; None leaves the save to the next part, then to the core."""
        return None


def checked_part_types(
    cls: type, inherited: tuple[type[FlowPart], ...], parts: Any
) -> tuple[type[FlowPart], ...]:
    """The part types of Flow class ``cls``: its base's (``inherited``), then ``parts``
    (its ``parts=``), checked: FlowPart subclasses, each under an attribute name of its
    own that the class does not already use.

    Raises:
        FlowDefinitionError: a part that is not a FlowPart type, two under one name, or
            one whose name is an attribute of the class.
    """
    flow = cls.__name__
    kinds = tuple(parts) if isinstance(parts, tuple | list) else (parts,)
    for kind in kinds:
        if not (isinstance(kind, type) and issubclass(kind, FlowPart)) or not kind.attribute:
            raise FlowDefinitionError(
                f"{flow}: parts= takes FlowPart subclasses with an attribute name, "
                f"not {kind!r}",
                flow=flow,
            )
        if getattr(cls, kind.attribute, None) is not None:
            raise FlowDefinitionError(
                f"{flow}: part {kind.__name__} would hide {flow}.{kind.attribute}; "
                "give the part another attribute name",
                flow=flow,
            )
    every = (*inherited, *kinds)
    names = [kind.attribute for kind in every]
    if len(set(names)) != len(names):
        raise FlowDefinitionError(
            f"{flow}: two parts under one attribute name ({names})", flow=flow
        )
    return every


def check_part_names(cls: type, kinds: tuple[type[FlowPart], ...]) -> None:
    """Refuse a class body that names an attribute its parts are held under.

    The instance holds each part under its :attr:`FlowPart.attribute`, so a method or
    value of that name in a subclass or a mixin it inherits (``def conversation(self)``
    under :class:`voxflow.Flow`) would be hidden by the part on every instance, silently.

    Raises:
        FlowDefinitionError: the class or one of its bases defines the attribute name of
            one of its parts.
    """
    flow = cls.__name__
    for kind in kinds:
        for klass in cls.__mro__:  # its own body, or a mixin's: either is hidden
            if kind.attribute in vars(klass):
                where = flow if klass is cls else f"{klass.__name__} (a base of {flow})"
                raise FlowDefinitionError(
                    f"{where}.{kind.attribute}: {flow} holds its {kind.__name__} part "
                    f"there (an instance's {kind.attribute} is the part, not this); "
                    "rename it",
                    flow=flow,
                )
