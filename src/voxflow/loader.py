"""Resolve a flow reference (``path.py:Class`` or ``module:Class``) to a Flow class."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from .errors import VoxflowError
from .flow import Flow
from .llm.client import LLM

__all__ = ["FlowReferenceError", "load_flow", "load_flow_class", "module_name_for"]


class FlowReferenceError(VoxflowError, ValueError):
    """A flow reference could not be resolved; the message says which part was wrong."""


def load_flow_class(ref: str, *, model: str | None = None) -> type[Any]:
    """Import the class named by ``ref``.

    Args:
        ref: ``path/to/file.py:ClassName`` or ``package.module:ClassName``.
        model: a litellm model id for a conversational flow that configures no LLM of
            its own: the class returned is a subclass whose router and ``converse`` use it.

    Raises:
        FlowReferenceError: the reference is malformed, the file or module does not
            exist, the name is missing, or it is not a Flow subclass; with ``model``, the
            flow is not conversational or already configures its own LLM.
    """
    cls = _load(ref)
    return cls if model is None else _with_model(cls, ref, model)


def load_flow(ref: str, *, model: str | None = None) -> Any:
    """An instance of :func:`load_flow_class`'s class, built with no arguments.

    Raises:
        FlowReferenceError: as :func:`load_flow_class`, or the class's constructor
            raised (named, with the fix), so a command line shows one line.
    """
    flow_cls = load_flow_class(ref, model=model)
    try:
        return flow_cls()
    except Exception as exc:  # the user's constructor: one line, as an import failure is
        raise FlowReferenceError(
            f"creating {ref} failed: {type(exc).__name__}: {exc} (the command line "
            "builds the flow with no arguments: give every __init__ parameter a default)"
        ) from None


def _with_model(cls: type[Any], ref: str, model: str) -> type[Any]:
    if not getattr(cls, "conversational", False):
        raise FlowReferenceError(f"{ref} is not a conversational flow: a model answers only "
                                 "conversational flows (set `conversational = True`)")
    config = cls._conversation_config()
    if config.llm is not None:
        raise FlowReferenceError(
            f"{ref} configures its own LLM (ConversationConfig(llm=...)): drop --model "
            "(or VOXFLOW_MODEL), or remove the flow's llm=")
    configured = type(cls.__name__, (cls,), {"__module__": cls.__module__,
                                             "__qualname__": cls.__qualname__})
    config.model_copy(update={"llm": LLM(model)})(configured)
    return configured


def _load(ref: str) -> type[Any]:
    if not isinstance(ref, str) or ref.count(":") != 1:
        raise FlowReferenceError(
            f"flow reference {ref!r} must look like 'path.py:Class' or 'module:Class'"
        )
    target, _, name = ref.partition(":")
    if not target or not name.isidentifier():
        raise FlowReferenceError(
            f"flow reference {ref!r} must look like 'path.py:Class' or 'module:Class'"
        )
    if target.endswith(".py") or "/" in target:
        path = Path(target).expanduser().resolve()
        if not path.is_file():
            raise FlowReferenceError(f"flow file not found: {target}")
        module_name = module_name_for(path)
        if module_name in sys.modules:
            module = sys.modules[module_name]
            return _flow_class(module, ref, target, name)
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            raise FlowReferenceError(f"cannot import {target}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        try:
            spec.loader.exec_module(module)
        except SyntaxError as exc:  # as compilers say it: file:line:col: message
            sys.modules.pop(module_name, None)
            raise FlowReferenceError(_syntax_error(exc, target, path)) from exc
        except Exception as exc:
            sys.modules.pop(module_name, None)
            raise FlowReferenceError(
                f"importing {target} failed: {type(exc).__name__}: {exc}") from exc
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise FlowReferenceError(f"module {target!r} cannot be imported: {exc}") from exc
    return _flow_class(module, ref, target, name)


def _syntax_error(exc: SyntaxError, target: str, path: Path) -> str:
    """``file:line:col: message`` (the flow file as the user named it; another file, one
    it imports, by its own name)."""
    where = exc.filename or target
    if exc.filename and Path(exc.filename).resolve() == path:
        where = target
    position = "".join(f":{n}" for n in (exc.lineno, exc.offset) if n is not None)
    return f"{where}{position}: {exc.msg}"


def module_name_for(path: Path) -> str:
    """The ``sys.modules`` name a flow file is imported under (stable per path)."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    return f"_voxflow_user_{path.stem}_{digest}"


def _flow_class(module: Any, ref: str, target: str, name: str) -> type[Any]:
    try:
        obj = getattr(module, name)
    except AttributeError:
        raise FlowReferenceError(f"{target} has no attribute {name!r}") from None
    if not (isinstance(obj, type) and issubclass(obj, Flow)):
        raise FlowReferenceError(f"{ref} is not a voxflow Flow subclass")
    return obj
