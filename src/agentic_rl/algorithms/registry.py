"""Named-function registries of the RL objective (advantages, policy losses, group filters).

A registry maps a name to ``fn(*inputs, **params)``: a fixed number of positional inputs
(tensors) followed by keyword parameters. An unknown name fails with one line suggesting
the closest one; a parameter the function does not take is an error (never dropped), so a
typo in a parameter cannot pass unnoticed.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from agentic_rl.errors import unknown_name


class Registry(dict):
    """Name -> function of one signature. A plain dict underneath (``name in registry``,
    iteration, ``pop``), with registration, lookup and strict parameter checks on top."""

    def __init__(self, kind: str, *, inputs: int) -> None:
        super().__init__()
        self.kind = kind
        """What a function is, for messages ("advantage estimator")."""
        self.inputs = inputs
        """Positional inputs every function takes before its keyword parameters."""

    def register(self, name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator adding ``fn`` under ``name``; a name can be registered once."""

        def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self[name] = fn
            return fn

        return decorator

    def lookup(self, name: str) -> Callable[..., Any]:
        """The function registered as ``name``; KeyError with a close-match hint otherwise."""
        if name not in self:
            raise KeyError(unknown_name(self.kind, name, sorted(self)))
        return self[name]

    def params(self, name: str) -> tuple[str, ...] | None:
        """Keyword parameters of ``name`` after its inputs; None when it takes ``**kwargs``."""
        parameters = list(inspect.signature(self.lookup(name)).parameters.values())
        if any(p.kind is p.VAR_KEYWORD for p in parameters):
            return None
        inputs = [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][: self.inputs]
        return tuple(
            p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in inputs
        )

    def call(self, name: str, *inputs: Any, **params: Any) -> Any:
        """``fn(*inputs, **params)`` for the function ``name``.

        Raises:
            KeyError: ``name`` is not registered.
            TypeError: one line naming a parameter ``name`` does not take, and those it does.
        """
        accepted = self.params(name)
        if accepted is not None:
            for key in params:
                if key not in accepted:
                    raise TypeError(
                        f"{self.kind} {name!r} takes no parameter {key!r}; its parameters: {', '.join(accepted) or 'none'}"
                    )
        return self.lookup(name)(*inputs, **params)

    def params_for(self, name: str, values: Mapping[str, Any]) -> dict[str, Any]:
        """The entries of ``values`` that ``name`` takes as parameters (all of them when it
        takes ``**kwargs``): one flat set of knobs drives every function of the registry."""
        accepted = self.params(name)
        return {key: value for key, value in values.items() if accepted is None or key in accepted}
