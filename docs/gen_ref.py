"""Reference pages generated from the code at build time (an mkdocs hook, see mkdocs.yml).

Each ``reference/*.md`` page is written from the objects that define it: the CLI from the
argparse parser ``agentic_rl.cli.build_parser``, the configuration from the pydantic
sections in ``agentic_rl.config`` (field, type and range, default, the field's docstring;
the ``{name, ...parameters}`` slots of ``algorithm`` from the registered functions'
signatures; the 0.1 keys from ``agentic_rl.config.MOVED``), the envs from
``agentic_rl.envs.registry``, the algorithms from their registries (each function's
docstring and parameters) and ``PRESETS`` (as the dotted keys each sets), the recipes from
``agentic_rl.recipes``. Nothing is checked in, so the pages
cannot drift from the code. ``python docs/gen_ref.py OUT_DIR`` writes them without mkdocs.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import typing
from pathlib import Path
from typing import Any

PAGES = ("cli", "config", "envs", "algorithms", "recipes")
"""The generated pages, as ``reference/<name>.md``."""


def _text(text: Any) -> str:
    """Docstring text as markdown: reST roles and double backticks become code spans, and
    angle brackets outside code spans are escaped (``<answer>`` is text, not an HTML tag)."""
    text = re.sub(r":(?:func|class|meth|data|mod|attr|obj):`~?([^`]+)`", r"`\1`", str(text)).replace("``", "`")
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else part.replace("<", "&lt;").replace(">", "&gt;") for part in parts)


def _cell(text: Any) -> str:
    """One markdown table cell: no newlines, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def _code(text: Any) -> str:
    text = str(text)
    return f"`` {text} ``" if "`" in text else f"`{text}`"


# --- CLI ---------------------------------------------------------------------------


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """Subcommand name -> (parser, help), in the order ``--help`` lists them."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            return {name: (sub, helps.get(name, "")) for name, sub in action.choices.items()}
    return {}


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            names = ", ".join(action.option_strings)
            if action.nargs != 0:
                names += f" {action.metavar or action.dest.upper()}"
        else:
            names = action.metavar or action.dest
        default = "" if action.default in (None, argparse.SUPPRESS, False) else _code(action.default)
        if action.choices and not isinstance(action, argparse._SubParsersAction):
            default = (default + " " if default else "") + "one of " + ", ".join(_code(c) for c in action.choices)
        help_text = (action.help or "").replace("%(default)s", str(action.default)).replace("%%", "%")
        rows.append(f"| {_cell(_code(names))} | {_cell(_text(help_text))} | {_cell(default)} |")
    return rows


def _command_section(name: str, parser: argparse.ArgumentParser, help_text: str, level: int) -> list[str]:
    lines = [f"{'#' * level} `{name}`", ""]
    description = parser.description or help_text
    if description:
        lines += [_text(description[0].upper() + description[1:]), ""]
    usage = " ".join(parser.format_usage().replace("usage: ", "").split())
    lines += ["```text", usage, "```", ""]
    rows = _argument_rows(parser)
    if rows:
        lines += ["| argument | meaning | default |", "|---|---|---|", *rows, ""]
    for sub_name, (sub, sub_help) in _subparsers(parser).items():
        lines += _command_section(f"{name} {sub_name}", sub, sub_help, min(level + 1, 4))
    return lines


def cli_page() -> str:
    from agentic_rl.cli import build_parser

    parser = build_parser()
    lines = [
        "# Command line",
        "",
        "Generated from the argparse parser (`agentic_rl.cli.build_parser`) when the docs are built.",
        "Every command also takes `--help`. Listings go to stdout, progress and errors to stderr; a",
        "mistake is one line on stderr and exit code 2.",
        "",
        "```text",
        " ".join(parser.format_usage().replace("usage: ", "").split()),
        "```",
        "",
    ]
    for name, (sub, help_text) in _subparsers(parser).items():
        lines += _command_section(f"agentic-rl {name}", sub, help_text, 2)
    return "\n".join(lines)


# --- configuration -------------------------------------------------------------------

SLOT_TITLES = {
    "advantage": ("Advantage estimators", "advantage estimator"),
    "policy_loss": ("Policy losses", "policy loss"),
    "group_filter": ("Group filters", "group filter"),
}
"""The ``{name, ...parameters}`` slots of ``algorithm``: their heading, and what one function is."""


def _type_name(annotation: Any) -> str:
    """A type as plain text (``_cell`` escapes the pipes of a union)."""
    if annotation is None or annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " | ".join(repr(arg) for arg in typing.get_args(annotation))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(arg) for arg in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _number(value: Any) -> str:
    return repr(int(value)) if isinstance(value, float) and value.is_integer() else repr(value)


def _bounds(metadata) -> dict[str, Any]:
    """``{"ge": 0.0, "lt": 1.0, ...}`` from annotated-types constraints (``Interval``,
    ``Ge``, ``Gt``, ...) and pydantic ``Field`` metadata, nested ones included."""
    found: dict[str, Any] = {}
    for item in metadata:
        for bound in ("gt", "ge", "lt", "le"):
            value = getattr(item, bound, None)
            if value is not None:
                found[bound] = value
        found.update(_bounds(getattr(item, "metadata", None) or []))
    return found


def _range_text(annotation: Any) -> str:
    """A parameter's type with the range its annotation carries: ``float in [0, 1)``,
    ``float >= 0``, ``float > 1 or None``."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " or ".join(_range_text(arg) for arg in typing.get_args(annotation))
    if origin is not typing.Annotated:
        return _type_name(annotation)
    base, *metadata = typing.get_args(annotation)
    return _with_bounds(_type_name(base), _bounds(metadata))


def _with_bounds(name: str, bounds: dict[str, Any]) -> str:
    """``name`` with the range ``bounds`` (``_bounds``) set: ``float in [0, 1)``, ``int >= 1``."""
    low = ("[", bounds["ge"]) if "ge" in bounds else ("(", bounds["gt"]) if "gt" in bounds else None
    high = ("]", bounds["le"]) if "le" in bounds else (")", bounds["lt"]) if "lt" in bounds else None
    if low and high:
        return f"{name} in {low[0]}{_number(low[1])}, {_number(high[1])}{high[0]}"
    if low:
        return f"{name} {'>=' if low[0] == '[' else '>'} {_number(low[1])}"
    if high:
        return f"{name} {'<=' if high[0] == ']' else '<'} {_number(high[1])}"
    return name


def _field_type(field) -> str:
    """A config field's type with the range its ``Field(ge=..., ...)`` constraints set."""
    shown, bounds = _type_name(field.annotation), _bounds(field.metadata)
    return f"{shown} ({_with_bounds('', bounds).strip()})" if bounds else shown


def _section_model(annotation: Any):
    from pydantic import BaseModel

    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _is_spec(model) -> bool:
    from agentic_rl.config.algorithm import FunctionSpec

    return isinstance(model, type) and issubclass(model, FunctionSpec)


def _default(field) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
        return "" if _section_model(type(value)) else _code(repr(value))
    if field.default is PydanticUndefined:
        return "(required)" if field.is_required() else ""
    return _code(repr(field.default))


def _dotted(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and value:
            flat.update(_dotted(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def preset_values(name: str) -> dict[str, Any]:
    """What preset ``name`` sets, as dotted keys of the training config (shorthands such as
    ``critic: shared`` spelled out: ``algorithm.critic.kind``)."""
    from agentic_rl.algorithms.presets import PRESETS
    from agentic_rl.config.algorithm import merge_preset

    preset = PRESETS[name]
    values: dict[str, Any] = {}
    for section in ("algorithm", "reward", "rl"):
        part = preset.get(section) or {}
        if section == "algorithm":
            part = merge_preset(part, {})  # spells out the shorthands
        values.update(_dotted(part, f"{section}."))
    for section in preset:
        if section not in ("algorithm", "reward", "rl"):
            values.update(_dotted({section: preset[section]}))
    return values


def _preset_note(key: str, default_cell: str) -> str:
    """The default cell of ``key``, with the default preset's value where it sets another one."""
    from agentic_rl.config.algorithm import DEFAULT_PRESET

    values = preset_values(DEFAULT_PRESET)
    if key not in values or _code(repr(values[key])) == default_cell:
        return default_cell
    return f"{default_cell} (preset `{DEFAULT_PRESET}`: {_code(repr(values[key]))})".strip()


def _function_anchor(kind: str, name: str) -> str:
    """The heading id of a registered function's section on the algorithms page."""
    return f"{kind.replace('_', '-')}-{name.replace('+', 'p')}"


def function_parameters(kind: str, name: str, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(parameter, type and range, default)`` for each parameter of the registered
    function ``name`` of ``kind`` (advantage, policy_loss, group_filter): what
    ``algorithm.<kind>`` may set beside the name, read from the function's signature
    (``agentic_rl.config.algorithm.function_params``) and the ranges its annotations carry
    (``agentic_rl.algorithms.params``). With ``prefix`` (``algorithm.policy_loss``) the
    default preset's value is noted where that preset names this function and sets another."""
    from agentic_rl.config.algorithm import DEFAULT_PRESET, function_params, function_registry

    hints = typing.get_type_hints(function_registry(kind).lookup(name), include_extras=True)
    named_by_preset = bool(prefix) and preset_values(DEFAULT_PRESET).get(f"{prefix}.name") == name
    rows = []
    for key, parameter in function_params(kind, name).items():
        default = "" if parameter.default is inspect.Parameter.empty else _code(repr(parameter.default))
        if named_by_preset:
            default = _preset_note(f"{prefix}.{key}", default)
        rows.append((key, _range_text(hints.get(key, parameter.annotation)), default))
    return rows


def _spec_section(model, prefix: str, field, lines: list[str]) -> None:
    """``algorithm.advantage`` and its kin: the name, then every registered function's
    parameters (the keys beside the name)."""
    from agentic_rl.config.algorithm import function_registry

    kind = model.kind
    title, what = SLOT_TITLES[kind]
    registry = function_registry(kind)
    default_name = model.model_fields["name"].default
    lines += [f"### `{prefix}`", ""]
    if field is not None and field.description:
        lines += [_text(field.description), ""]
    lines += [
        f"`{{name, ...parameters}}`: the {what} `name` (one registered in",
        f"[{title.lower()}](algorithms.md#{_anchor('', title)})) and any of its own parameters beside it;",
        f"a plain string is the name alone (`{prefix.split('.')[-1]}: {default_name}`).",
        "Each parameter is checked against the function's signature when the config loads (a",
        "parameter it does not take, a wrong type or a value out of range is one line naming the",
        "key); those not given take the function's defaults, and a saved config lists them all.",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
        f"| `{prefix}.name` | str | {_cell(_preset_note(prefix + '.name', _code(repr(default_name))))} |"
        f" one of {', '.join(f'[`{n}`](algorithms.md#{_function_anchor(kind, n)})' for n in sorted(registry))} |",
        "",
        f"The parameters of each {what}, set as `{prefix}.<parameter>` (type, default; the",
        f"[{title.lower()}](algorithms.md#{_anchor('', title)}) say what each does):",
        "",
        f"| {what} | parameters |",
        "|---|---|",
    ]
    for name in sorted(registry):
        cells = [
            f"`{key}` ({kind_text}, {default or 'no default'})"
            for key, kind_text, default in function_parameters(kind, name, prefix)
        ]
        lines.append(
            f"| [`{name}`](algorithms.md#{_function_anchor(kind, name)}) | {_cell('<br>'.join(cells)) or 'none'} |"
        )
    lines.append("")


def _config_sections(model, prefix: str, lines: list[str], seen: set[str], field=None) -> None:
    """A table of ``model``'s own fields under the heading ``prefix``, then each sub-section."""
    if prefix in seen:
        return
    seen.add(prefix)
    if _is_spec(model):
        _spec_section(model, prefix, field, lines)
        return
    leaves, sections = [], []
    for name, sub_field in model.model_fields.items():
        sub = _section_model(sub_field.annotation)
        if sub is not None:
            sections.append((name, sub, sub_field))
        else:
            leaves.append((name, sub_field))
    lines += [f"### `{prefix}`" if prefix else "### Top-level keys", ""]
    doc = " ".join((model.__doc__ and inspect.cleandoc(model.__doc__) or "").split())
    described = " ".join((field.description or "").split()) if field is not None else ""
    if described and not doc.startswith(described.split(". ")[0].rstrip(".")):
        # What the section is for (its shorthand, say), where its class's docstring says other things.
        lines += [_text(described), ""]
    if doc:
        lines += [_text(doc), ""]
    if sections:
        lines += [
            "Sections: "
            + ", ".join(f"[`{prefix + '.' if prefix else ''}{n}`](#{_anchor(prefix, n)})" for n, _, _ in sections)
            + ".",
            "",
        ]
    if leaves:
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for name, leaf in leaves:
            key = f"{prefix}.{name}" if prefix else name
            default = _preset_note(key, _default(leaf))
            lines.append(
                f"| `{key}` | {_cell(_field_type(leaf))} | {_cell(default)} | {_cell(_text(leaf.description or ''))} |"
            )
        lines.append("")
    if getattr(model, "model_config", {}).get("extra") == "allow":
        lines += ["Any other key is passed to the env's factory as an option: see [Environments](envs.md).", ""]
    for name, sub, sub_field in sections:
        _config_sections(sub, f"{prefix}.{name}" if prefix else name, lines, seen, sub_field)


def _anchor(prefix: str, name: str) -> str:
    """The id mkdocs gives a heading of ``prefix.name`` (dots and spaces as its slugify does)."""
    key = f"{prefix}.{name}" if prefix else name
    return re.sub(r"[^\w\- ]", "", key).strip().lower().replace(" ", "-")


def moved_rows() -> list[str]:
    """``| old key | new home |`` for every key of the 0.1 layout (``agentic_rl.config.MOVED``)."""
    from agentic_rl.config import MOVED

    rows = []
    for old, new in MOVED.items():
        key, _, needs = new.partition(" (")
        if needs:  # "with policy_loss.name gspo": the function the parameter belongs to
            needs = needs.rstrip(")")
            slot, _, name = needs.removeprefix("with ").rpartition(" ")
            needs = f"with `algorithm.{slot}: {name}`" if slot and name else _text(needs)
        suffix = ".*" if old == "arpo" else ""  # a whole section
        rows.append(f"| `{old}{suffix}` | `{key}{suffix}`{f' ({_cell(needs)})' if needs else ''} |")
    return rows


def upgrading_section() -> list[str]:
    return [
        "## Upgrading from 0.1",
        "",
        "agentic-rl 0.2 nests the training config so that every knob has one home:",
        "",
        "- the RL stage's batch and update moved from the top level into the `rl:` section",
        "  (`rl.steps`, `rl.tasks_per_step`, `rl.group_size`, `rl.epochs` (was `ppo_epochs`),",
        "  `rl.mini_batches`, ...), with `rl.sampling` (was `algorithm.rollout`), `rl.arpo` and",
        "  `rl.max_generation_rounds`;",
        "- `algorithm.advantage`, `algorithm.policy_loss` and `algorithm.group_filter` are",
        "  `{name, ...parameters}`: the function's own parameters sit beside its name",
        "  (`policy_loss: {name: ppo-clip, clip_high: 0.28}`, `--set algorithm.policy_loss.clip_high=0.28`;",
        "  `gspo_clip_low` and kin lost their prefix). A plain string is still the name alone",
        "  (`advantage: rloo`);",
        "- the KL term, the critic and the rollout correction are sections of their own:",
        "  `algorithm.kl` (`coef`, `estimator`, `in_reward`, `reference`, was `kl_reference`),",
        "  `algorithm.critic` (`kind`, `lr`, `value_loss_coef`, `value_clip`; `critic: shared`",
        "  still works) and `algorithm.correction` (`kind`, `cap`, `low`, `high`; `correction: tis`",
        "  still works);",
        "- the reward terms `overlong_buffer` and `tool_turn_reward` moved to the `reward` section;",
        "- a preset now sets values in `algorithm`, `reward` and `rl`",
        "  ([each preset's values](algorithms.md#presets)).",
        "",
        "An old key is an error, never silently accepted: one line naming its new home, e.g.",
        "`agentic-rl: error: group_size: moved to rl.group_size (the config is nested since agentic-rl 0.2)`.",
        "A run written with 0.1 cannot be resumed: `--resume` stops with one line naming its first",
        "old key; start a new run (or finish it with 0.1). Every moved key:",
        "",
        "| 0.1 key | 0.2 key |",
        "|---|---|",
        *moved_rows(),
        "",
    ]


def config_page() -> str:
    from agentic_rl.config import EvalConfig, TrainConfig
    from agentic_rl.config.algorithm import DEFAULT_PRESET

    lines = [
        "# Configuration",
        "",
        "Generated from the pydantic sections in `agentic_rl.config` when the docs are built: every",
        "key with its type, default and the field's docstring. A recipe (YAML) or `--set KEY=VALUE`",
        "sets any of them; unknown keys, wrong types, out-of-range values and unknown registry",
        "names fail before anything runs. `agentic-rl config RECIPE` prints a resolved config.",
        "",
        f"Defaults are the fields' own; `algorithm.preset` (default `{DEFAULT_PRESET}`) sets some keys of",
        "`algorithm`, `reward` and `rl` that a config leaves unset (noted in the default column for",
        f"`{DEFAULT_PRESET}`; every preset's values: [Algorithms](algorithms.md#presets)). Coming from",
        "0.1's flat config: [Upgrading from 0.1](#upgrading-from-01) maps every old key to its new one.",
        "",
        "## Training (`agentic-rl train`, `TrainConfig`)",
        "",
    ]
    _config_sections(TrainConfig, "", lines, set())
    lines += ["## Evaluation (`agentic-rl eval`, `EvalConfig`)", ""]
    eval_lines: list[str] = []
    _config_sections(EvalConfig, "", eval_lines, set())
    # The eval config shares its sections with training: keep only its own top-level table.
    top = eval_lines[
        : next((i for i, line in enumerate(eval_lines[1:], 1) if line.startswith("### ")), len(eval_lines))
    ]
    lines += [line.replace("### Top-level keys", "### Evaluation keys") for line in top]
    lines += ["Its `model`, `env`, `backend`, `rollout` and `sandbox` sections are the training ones above.", ""]
    lines += upgrading_section()
    return "\n".join(lines)


# --- envs ----------------------------------------------------------------------------


def envs_page() -> str:
    from agentic_rl import envs
    from agentic_rl.envs.registry import describe, options

    lines = [
        "# Environments",
        "",
        "Generated from the env registry (`agentic_rl.envs.registered()`, `registry.options(name)`,",
        "`registry.describe(name)`) when the docs are built; `agentic-rl envs NAME` prints the same.",
        "Options are the keyword arguments of each env's factory, set with `env.<option>` in a",
        "config or `--set env.<option>=VALUE`. What the envs are for and what they measured:",
        "[Built-in environments](../concepts/environments.md).",
        "",
        "| env | description |",
        "|---|---|",
    ]
    entries = envs.registered()
    lines += [f"| [`{e.name}`](#{e.name}) | {_cell(_text(e.description))} |" for e in entries]
    lines.append("")
    for entry in entries:
        lines += [f"## {entry.name}", ""]
        text = describe(entry.name)
        # The registered description is the table's; the page shows the factory's docstring.
        body = text[len(entry.description) :].strip() if text.startswith(entry.description) else text
        if body:
            lines += [_text(body), ""]
        lines += ["| option | type | default | what it does |", "|---|---|---|---|"]
        lines += [
            f"| `{name}` | {_cell(_code(kind)) if kind else ''} | {_cell(_code(default))} | {_cell(_text(doc))} |"
            for name, kind, default, doc in options(entry.name)
        ]
        lines.append("")
    return "\n".join(lines)


# --- algorithms ----------------------------------------------------------------------


def _summary(fn) -> str:
    doc = inspect.getdoc(fn) or ""
    return _text(" ".join(doc.split("\n\n")[0].split()))


def _registry_section(kind: str, call: str) -> list[str]:
    """One registry: an overview table, then each function with its docstring and a table
    of its parameters (the keys set beside its name in ``algorithm.<kind>``)."""
    from agentic_rl.config.algorithm import function_registry

    title, what = SLOT_TITLES[kind]
    registry = function_registry(kind)
    key = f"algorithm.{kind}"
    lines = [
        f"## {title}",
        "",
        f"`{call}`; in a config `{key}: {{name, ...parameters}}`",
        f"([configuration](config.md#{_anchor('', key)})).",
        "",
        "| name | parameters | summary |",
        "|---|---|---|",
    ]
    for name in sorted(registry):
        params = ", ".join(f"`{p}`" for p, _, _ in function_parameters(kind, name)) or "none"
        lines.append(f"| [`{name}`](#{_function_anchor(kind, name)}) | {params} | {_cell(_summary(registry[name]))} |")
    lines.append("")
    for name in sorted(registry):
        fn = registry[name]
        lines += [f"### `{name}` {{ #{_function_anchor(kind, name)} }}", ""]
        doc = inspect.getdoc(fn)
        if doc:
            lines += [_text(doc), ""]
        lines += [f"`{fn.__module__}.{fn.__qualname__}`", ""]
        rows = function_parameters(kind, name)
        if rows:
            lines += [
                f"| parameter (`{key}.…`) | type and range | default |",
                "|---|---|---|",
                *[f"| `{p}` | {_cell(kind_text)} | {_cell(default)} |" for p, kind_text, default in rows],
                "",
            ]
        else:
            lines += [f"No parameters: `{key}: {name}`.", ""]
    return lines


def _value(value: Any) -> str:
    """A config value as a YAML file or ``--set`` writes it (``true``, ``0.28``, ``ppo-clip``)."""
    if isinstance(value, bool) or value is None:
        return _code({True: "true", False: "false", None: "null"}[value])
    return _code(value if isinstance(value, str) else repr(value))


def algorithms_page() -> str:
    from agentic_rl import algorithms
    from agentic_rl.algorithms.presets import PRESET_DESCRIPTIONS, PRESETS
    from agentic_rl.config.algorithm import DEFAULT_PRESET

    lines = [
        "# Algorithms",
        "",
        "Generated from the registries in `agentic_rl.algorithms` and `PRESETS` when the docs are",
        "built. A config names a function and sets its parameters beside the name:",
        "`algorithm.advantage`, `algorithm.policy_loss` and `algorithm.group_filter` are each",
        "`{name, ...parameters}` (`policy_loss: {name: ppo-clip, clip_high: 0.28}`; a plain string",
        "is the name at its defaults). The parameters, their defaults and ranges are the",
        "function's signature, checked when the config loads. `register_advantage`,",
        "`register_policy_loss` and `register_group_filter` add your own. What each one does and",
        "when to use it: [Algorithms](../concepts/algorithms.md).",
        "",
        *_registry_section("advantage", "compute_advantages(name, AdvantageInputs(...), **params)"),
        *_registry_section(
            "policy_loss",
            "compute_policy_loss(name, logprobs, old_logprobs, advantages, mask, **params)",
        ),
        *_registry_section("group_filter", "filter_groups(name, rewards, group_index, **params) returns a keep mask"),
        "## Aggregations, KL estimators, rollout corrections",
        "",
        f"- `algorithm.aggregation`: {', '.join(f'`{a}`' for a in algorithms.AGGREGATIONS)}",
        f"- `algorithm.kl.estimator`: {', '.join(f'`{k}`' for k in algorithms.KL_ESTIMATORS)}",
        f"- `algorithm.correction.kind`: `auto`, {', '.join(f'`{c}`' for c in algorithms.correction.ROLLOUT_CORRECTIONS)}",
        "",
        "Their other keys (`algorithm.kl.*`, `algorithm.critic.*`, `algorithm.correction.*`):",
        "[configuration](config.md#algorithm).",
        "",
        "## Presets",
        "",
        f"`algorithm.preset` (default `{DEFAULT_PRESET}`) sets the values that make an algorithm",
        "what it is, in the sections they live in (`algorithm`, `reward`, `rl`), under what a",
        "config sets: explicit values win. A preset names only values that differ from the",
        "defaults (the functions' signatures and the [configuration](config.md) fields hold",
        "those). Naming another function for a slot than the preset does (preset `grpo-tcr` with",
        "`policy_loss: gspo`) drops the preset's parameters for that slot: the function runs at its",
        "own defaults.",
        "",
        "| preset | description |",
        "|---|---|",
        *[f"| `{name}` | {_cell(_text(PRESET_DESCRIPTIONS.get(name, '')))} |" for name in PRESETS],
        "",
        "The values each preset sets:",
        "",
        "| preset | sets |",
        "|---|---|",
    ]
    for name in PRESETS:
        values = preset_values(name)
        shown = "<br>".join(f"`{key}`: {_value(value)}" for key, value in values.items())
        lines.append(f"| `{name}` | {_cell(shown) or 'nothing (the defaults)'} |")
    lines.append("")
    return "\n".join(lines)


# --- recipes -------------------------------------------------------------------------


def recipes_page() -> str:
    from importlib import resources

    from agentic_rl.recipes import describe, recipe_names

    lines = [
        "# Recipes",
        "",
        "Generated from the built-in recipes (`agentic_rl.recipes`) when the docs are built;",
        "`agentic-rl recipes` lists them, `agentic-rl train NAME` runs one, and `base:` builds one",
        "recipe on another (its keys merged over the base's). Each file is shown as it ships. What they",
        "reached: [Results](../results/index.md).",
        "",
        "| recipe | description |",
        "|---|---|",
        *[f"| [`{n}`](#{n.replace('+', '')}) | {_cell(_text(describe(n)))} |" for n in recipe_names()],
        "",
    ]
    folder = resources.files("agentic_rl.recipes")
    for name in recipe_names():
        text = (folder / f"{name}.yaml").read_text().rstrip()
        lines += [f"## {name}", "", f'```yaml title="{name}.yaml"', text, "```", ""]
    return "\n".join(lines)


GENERATORS = {
    "cli": cli_page,
    "config": config_page,
    "envs": envs_page,
    "algorithms": algorithms_page,
    "recipes": recipes_page,
}


def generate() -> dict[str, str]:
    """``reference/<page>.md`` -> markdown, for every generated page."""
    return {f"reference/{name}.md": GENERATORS[name]() + "\n" for name in PAGES}


# --- the mkdocs hook -----------------------------------------------------------------


def on_files(files, config):
    """Add the generated pages to the build (mkdocs >= 1.6: ``File.generated``)."""
    from mkdocs.structure.files import File

    for path, text in generate().items():
        files.append(File.generated(config, path, content=text))
    return files


if __name__ == "__main__":
    out = Path(sys.argv[1] if len(sys.argv) > 1 else "site-ref")
    for path, text in generate().items():
        (out / path).parent.mkdir(parents=True, exist_ok=True)
        (out / path).write_text(text)
        print(out / path)
