"""Reference pages generated from the code at build time (an mkdocs hook, see mkdocs.yml).

Each ``reference/*.md`` page is written from the objects that define it: the CLI from the
argparse parser ``agentic_rl.cli.build_parser``, the configuration from the pydantic
sections in ``agentic_rl.config`` (field, type, default, the field's docstring), the envs
from ``agentic_rl.envs.registry``, the algorithms from their registries and
``PRESETS``, the recipes from ``agentic_rl.recipes``. Nothing is checked in, so the pages
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


def _type_name(annotation: Any) -> str:
    if annotation is None or annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _type_name(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        return " \\| ".join(repr(arg) for arg in typing.get_args(annotation))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(arg) for arg in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation).replace("typing.", ""))


def _section_model(annotation: Any):
    from pydantic import BaseModel

    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _default(field) -> str:
    from pydantic_core import PydanticUndefined

    if field.default_factory is not None:
        try:
            value = field.default_factory()
        except TypeError:
            return "(computed)"
        return "" if _section_model(type(value)) else _code(repr(value))
    if field.default is PydanticUndefined:
        return "(from the preset)" if field.is_required() else ""
    return _code(repr(field.default))


def _config_sections(model, prefix: str, lines: list[str], seen: set[str]) -> None:
    """A table of ``model``'s own fields under the heading ``prefix``, then each sub-section."""
    leaves, sections = [], []
    for name, field in model.model_fields.items():
        sub = _section_model(field.annotation)
        if sub is not None:
            sections.append((name, sub, field))
        else:
            leaves.append((name, field))
    title = prefix or "top level"
    if prefix in seen:
        return
    seen.add(prefix)
    lines += [f"### `{title}`" if prefix else "### Top-level keys", ""]
    doc = inspect.getdoc(model)
    if doc and model.__name__ not in ("Section",):
        lines += [_text(" ".join(doc.split())), ""]
    if sections:
        lines += [
            "Sections: "
            + ", ".join(f"[`{prefix + '.' if prefix else ''}{n}`](#{_anchor(prefix, n)})" for n, _, _ in sections)
            + ".",
            "",
        ]
    if leaves:
        lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
        for name, field in leaves:
            key = f"{prefix}.{name}" if prefix else name
            lines.append(
                f"| `{key}` | {_cell(_type_name(field.annotation))} | {_cell(_default(field))} | {_cell(_text(field.description or ''))} |"
            )
        lines.append("")
    if getattr(model, "model_config", {}).get("extra") == "allow":
        lines += ["Any other key is passed to the env's factory as an option: see [Environments](envs.md).", ""]
    for name, sub, _field in sections:
        _config_sections(sub, f"{prefix}.{name}" if prefix else name, lines, seen)


def _anchor(prefix: str, name: str) -> str:
    key = f"{prefix}.{name}" if prefix else name
    return key.replace(".", "").replace("_", "_").lower()


def config_page() -> str:
    from agentic_rl.config import EvalConfig, TrainConfig

    lines = [
        "# Configuration",
        "",
        "Generated from the pydantic sections in `agentic_rl.config` when the docs are built: every",
        "key with its type, default and the field's docstring. A recipe (YAML) or `--set KEY=VALUE`",
        "sets any of them; unknown keys, wrong types and unknown registry names fail before",
        "anything runs. `agentic-rl config RECIPE` prints a resolved config.",
        "",
        "The `algorithm` fields marked *(from the preset)* are filled by `algorithm.preset` unless",
        "set; see [Algorithms](algorithms.md) for each preset's values.",
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
        lines += ["| option | type | default |", "|---|---|---|"]
        lines += [
            f"| `{name}` | {_cell(_code(kind)) if kind else ''} | {_cell(_code(default))} |"
            for name, kind, default in options(entry.name)
        ]
        lines.append("")
    return "\n".join(lines)


# --- algorithms ----------------------------------------------------------------------


def _summary(fn) -> str:
    doc = inspect.getdoc(fn) or ""
    return _text(" ".join(doc.split("\n\n")[0].split()))


def _registry_table(registry) -> list[str]:
    lines = ["| name | parameters | summary |", "|---|---|---|"]
    for name in sorted(registry):
        fn = registry[name]
        params = registry.params(name)
        shown = "any" if params is None else ", ".join(f"`{p}`" for p in params) or "none"
        where = f"`{fn.__module__}.{fn.__qualname__}`"
        lines.append(f"| `{name}` | {shown} | {_cell(_summary(fn))} ({where}) |")
    return lines + [""]


def algorithms_page() -> str:
    from agentic_rl import algorithms
    from agentic_rl.algorithms.advantages import ADVANTAGES
    from agentic_rl.algorithms.group_filters import GROUP_FILTERS
    from agentic_rl.algorithms.losses import POLICY_LOSSES
    from agentic_rl.algorithms.presets import PRESET_DESCRIPTIONS, PRESETS

    lines = [
        "# Algorithms",
        "",
        "Generated from the registries in `agentic_rl.algorithms` and `PRESETS` when the docs are",
        "built. A config names a function (`algorithm.advantage`, `algorithm.policy_loss`,",
        "`algorithm.group_filter`) and the fields of `algorithm` with the function's parameter",
        "names are passed to it; `register_advantage`, `register_policy_loss` and",
        "`register_group_filter` add your own. What each one does and when to use it:",
        "[Algorithms](../concepts/algorithms.md).",
        "",
        "## Advantage estimators",
        "",
        "`compute_advantages(name, AdvantageInputs(...), **params)`.",
        "",
        *_registry_table(ADVANTAGES),
        "## Policy losses",
        "",
        "`compute_policy_loss(name, logprobs, old_logprobs, advantages, mask, **params)`.",
        "",
        *_registry_table(POLICY_LOSSES),
        "## Group filters",
        "",
        "`filter_groups(name, rewards, group_index, **params)` returns a keep mask.",
        "",
        *_registry_table(GROUP_FILTERS),
        "## Aggregations, KL estimators, rollout corrections",
        "",
        f"- `algorithm.aggregation`: {', '.join(f'`{a}`' for a in algorithms.AGGREGATIONS)}",
        f"- `algorithm.kl_estimator`: {', '.join(f'`{k}`' for k in algorithms.KL_ESTIMATORS)}",
        f"- `algorithm.rollout_correction`: `auto`, {', '.join(f'`{c}`' for c in algorithms.correction.ROLLOUT_CORRECTIONS)}",
        "",
        "## Presets",
        "",
        "`algorithm.preset` fills every `algorithm` field left unset; explicit fields win.",
        "",
        "| preset | description |",
        "|---|---|",
        *[f"| `{name}` | {_cell(_text(PRESET_DESCRIPTIONS.get(name, '')))} |" for name in PRESETS],
        "",
        "Every preset's values (a blank cell: the field is not set by that preset):",
        "",
    ]
    names = list(PRESETS)
    fields = sorted({key for preset in PRESETS.values() for key in preset})
    lines += ["| field | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    for key in fields:
        cells = [_cell(repr(PRESETS[n][key])) if key in PRESETS[n] else "" for n in names]
        lines.append(f"| `{key}` | " + " | ".join(cells) + " |")
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
