"""``make(name, **kwargs)``: environments by name, so worker processes can rebuild them;
``env_factory``: a validated zero-argument builder for the stages that make many.

A name is a registered env, or an import path ``package.module:factory`` (a class or
function returning an Env): the form to use for your own envs on rollout workers in other
processes (Ray), which import it instead of relying on a ``register`` call made in yours."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentic_rl.config.renamed import ENV_OPTIONS_MOVED
from agentic_rl.envs.base import Env
from agentic_rl.envs.option_docs import option_docs, parse_args_section
from agentic_rl.envs.options import check_option_types
from agentic_rl.envs.terms import declared_terms
from agentic_rl.errors import ConfigError, closest
from agentic_rl.imports import ImportPathError, import_object


@dataclass(frozen=True)
class EnvEntry:
    name: str
    factory: Callable[..., Env]
    description: str


_REGISTRY: dict[str, EnvEntry] = {}


class UnknownEnvError(KeyError):
    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


def register(name: str, factory: Callable[..., Env], description: str = "") -> None:
    """Register an env factory under ``name`` (its docstring summary is the default description)."""
    if name in _REGISTRY:
        raise ValueError(f"env {name!r} is already registered")
    summary = description or (inspect.getdoc(factory) or "").split("\n\n")[0].replace("\n", " ")
    _REGISTRY[name] = EnvEntry(name, factory, summary)


def registered() -> list[EnvEntry]:
    return sorted(_REGISTRY.values(), key=lambda entry: entry.name)


def name_for(factory: Callable[..., Env]) -> str:
    """An ``env.name`` for an env factory given as an object (``train(config, env=MyEnv)``):
    its registered name, else its import path when importing it gives the same object (so
    rollout workers in other processes can rebuild it), else a registration in this process
    (enough for local rollouts; a factory defined in ``__main__`` or a closure cannot reach
    other processes)."""
    if not callable(factory):
        raise TypeError(f"env: expected a registered name, an import path or an env factory, got {factory!r}")
    for entry in _REGISTRY.values():
        if entry.factory is factory:
            return entry.name
    module, qualname = getattr(factory, "__module__", None), getattr(factory, "__qualname__", "")
    if module and module != "__main__" and "<" not in qualname:
        path = f"{module}:{qualname}"
        try:
            if import_object(path, "env") is factory:
                return path
        except ImportPathError:
            pass
    name = getattr(factory, "__name__", "env")
    if name in _REGISTRY:
        name = f"{name}-{id(factory):x}"
    register(name, factory)
    return name


def _factory(name: str) -> Callable[..., Env]:
    """The factory a registered name or an import path ``module:attribute`` names."""
    if name in _REGISTRY:
        return _REGISTRY[name].factory
    if ":" in name:
        try:
            return import_object(name, "env")
        except ImportPathError as exc:
            raise UnknownEnvError(exc.reason) from None
    raise UnknownEnvError(
        f"unknown env {name!r}{closest(name, _REGISTRY)}; registered envs: {', '.join(sorted(_REGISTRY))} (or an import path package.module:Factory)"
    )


def options(name: str) -> list[tuple[str, str, str, str]]:
    """Env ``name``'s options as (option, type, default, what it does), from its factory's
    signature and docstring (envs/option_docs.py; "" where undocumented)."""
    factory = _factory(name)
    docs = option_docs(factory)
    rows = []
    for parameter in inspect.signature(factory).parameters.values():
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        annotation = parameter.annotation
        kind = "" if annotation is inspect.Parameter.empty else getattr(annotation, "__name__", str(annotation))
        default = "(required)" if parameter.default is inspect.Parameter.empty else repr(parameter.default)
        rows.append((parameter.name, str(kind).replace("typing.", ""), default, docs.get(parameter.name, "")))
    return rows


def describe(name: str) -> str:
    """What env ``name`` is: its registered description and its factory's docstring (the
    options' own entries left to ``options``)."""
    factory = _factory(name)
    entry = _REGISTRY.get(name)
    text, _ = parse_args_section(inspect.getdoc(factory) or "")
    return "\n\n".join(part for part in (entry.description if entry else "", text) if part)


def reward_terms(name: str) -> list[tuple[str, str, str]]:
    """Env ``name``'s reward terms as (term, per, what one unit measures), from an env built
    with its default options (some terms come with an option, e.g. ``plan`` with plan_first)."""
    env = make(name)
    try:
        return [(term, spec.per, spec.doc) for term, spec in sorted(declared_terms(env).items())]
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def accepts_option(name: str, option: str) -> bool:
    """Whether env ``name``'s factory takes ``option`` (e.g. "split")."""
    parameters = inspect.signature(_factory(name)).parameters
    return option in parameters or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())


def make(name: str, **kwargs: Any) -> Env:
    """Build a registered env (or one named by import path); unknown names and unknown
    keyword arguments fail clearly."""
    factory = _factory(name)
    parameters = inspect.signature(factory).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        unknown = sorted(set(kwargs) - set(parameters))
        moved = [option for option in unknown if option in ENV_OPTIONS_MOVED]
        if moved:
            raise TypeError(f"env {name!r} option {moved[0]}: moved to {ENV_OPTIONS_MOVED[moved[0]]}")
        if unknown:
            hint = closest(unknown[0], parameters)
            raise TypeError(f"env {name!r} has no option {unknown[0]!r}{hint}; options: {', '.join(parameters)}")
    check_option_types(name, factory, kwargs)
    return factory(**kwargs)


def _accepts_split(name: str) -> bool:
    try:
        return accepts_option(name, "split")
    except UnknownEnvError:
        return False  # make() below reports it


def env_factory(name: str, options: dict[str, Any], *, split: str | None = None) -> Callable[[], Env]:
    """A zero-argument env builder, validated once up front so bad options fail (as a
    ``ConfigError``) before any sampling. ``split`` is passed to envs that take one, unless
    ``options`` already sets it."""
    if split is not None and "split" not in options and (name in _REGISTRY or ":" in name) and _accepts_split(name):
        options = {**options, "split": split}
    try:
        make(name, **options)
    except (UnknownEnvError, TypeError, ValueError) as exc:
        raise ConfigError(f"env: {exc}") from None
    except KeyError as exc:  # a registry lookup inside the env (an unknown parser, tool, dataset): its message
        raise ConfigError(f"env: {exc.args[0] if exc.args else exc}") from None
    return lambda: make(name, **options)
