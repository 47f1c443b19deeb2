"""What each env option does, for ``agentic-rl envs NAME`` and the generated reference.

An env factory documents its options in a Google-style ``Args:`` section of its
docstring (``name: text``, continuation lines indented further). Options many envs share
with one meaning are documented once, in ``COMMON``; a factory's own entry wins (its
meaning or default differs there). A factory that hands its options to another names it
as ``factory.options_from`` and takes that one's entries."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

COMMON: dict[str, str] = {
    "split": "Which split's tasks to use: train or test, whose tasks never overlap (some generated envs also have "
    "demo, the pool of their few-shot demonstrations). Envs that read a data file may take other split names.",
    "num_tasks": "How many tasks the env holds (task indices 0 .. num_tasks - 1; from a data file, its first rows). "
    "None (where accepted): all of the file's, or the split's standard number for generated tasks.",
    "seed": "Seed of the generated tasks (and of a generated corpus): task i is the same on every machine for one "
    "seed, and another seed gives other tasks.",
    "system_prompt": "The system message's instructions, replacing the env's own (a tool env appends its tools' "
    "description to them). None (where accepted): the env's default, which may depend on other options.",
    "max_turns": "Most assistant turns in one episode; an episode still going after that many is truncated. "
    "None (where accepted): a number the env derives from the size of its tasks.",
    "memory": "Memory tools for notes (memory_write, memory_read, memory_search): none (or null, false) for none, "
    "episode (or true) for notes cleared at every reset, shared for one store across the process's episodes, or a "
    "mapping with mode and the store's caps (max_notes, max_chars, max_note_chars, max_key_chars, max_writes, "
    "eviction, store, tools). Formats that call one fixed tool (retool, search_r1) cannot call them.",
    "max_calls_per_turn": "Most tool calls run from one assistant turn; the calls past it are not run and the model "
    "is told so. None (where accepted): 1 for the one-tool tag formats (retool, search_r1), else 4.",
    "max_argument_chars": "Most characters in one tool call's text (its JSON arguments, code or query); a longer "
    "call is reported to the model as malformed and not run.",
    "attempts": "How many answers the model may give in one episode: after a wrong or missing answer it is told so "
    "(never the gold answer) and tries again while turns remain; 1: the first answer ends the episode.",
    "attempt_discount": "Reward factor per extra attempt, a number in (0, 1]: the episode's reward is the last "
    "attempt's times attempt_discount ** (attempts used - 1).",
    "self_critique": "With attempts > 1, the feedback after a wrong answer asks the model for a short critique of "
    "what went wrong before it tries again.",
    "parser": "The tool-call format: a registered parser's name (a key of agentic_rl.parsers.PARSERS, e.g. hermes, "
    "retool, search_r1), or auto for the one the model's chat template uses. An env may take only the formats its "
    "tools fit (retool runs python code, search_r1 searches).",
    "tools": "Names of the tools offered to the model, among those the env supports (calculator; python, a "
    "sandboxed stateful interpreter, where the env has it); an empty list offers none.",
    "few_shot": "Number of solved demonstrations shown before the question as earlier conversation turns; they come "
    "from the env's demonstration problems, never from its tasks.",
    "plan_first": "The system prompt asks for a plan first: a first turn holding only <plan>...</plan> is "
    "acknowledged and the episode goes on; adds the plan/made, plan/steps and plan/adherence metrics.",
    "timeout_s": "Wall-clock limit, in seconds, of each python tool call; a call past it is stopped and the "
    "session's variables are lost.",
    "memory_mb": "Memory limit, in MB, of each sandboxed Python process the env runs (the python tool's, and its "
    "test runs' where the env has tests).",
    "max_output_chars": "Most characters of one python call's output shown to the model; longer output keeps its "
    "head and tail around a marker saying how much was cut.",
    "success_reward": "Outcome reward of the move that solves the level; the episode ends there.",
    "top_k": "Number of documents each search returns.",
    "max_doc_chars": "Each returned document's text (not its title) is cut to this many characters, ending in "
    "'...'; None keeps it whole.",
}
"""Option name -> what it does, for the options several envs share with one meaning."""

_SECTION = re.compile(r"^(Args|Arguments|Parameters|Options):\s*$")
_ENTRY = re.compile(r"^(\w+)(?:\s*\([^)]*\))?:\s*(.*)$")


def parse_args_section(doc: str) -> tuple[str, dict[str, str]]:
    """(the docstring without its ``Args:`` section, option -> text from it)."""
    lines = doc.splitlines()
    start = next((i for i, line in enumerate(lines) if _SECTION.match(line)), None)
    if start is None:
        return doc, {}
    entries: dict[str, str] = {}
    end, current, indent = len(lines), None, None
    for i in range(start + 1, len(lines)):
        line = lines[i]
        if not line.strip():
            continue
        width = len(line) - len(line.lstrip())
        if indent is None:
            indent = width
        if width < indent or (width == 0 and indent == 0 and not _ENTRY.match(line.strip())):
            end = i
            break
        match = _ENTRY.match(line.strip()) if width == indent else None
        if match:
            current = match.group(1)
            entries[current] = match.group(2).strip()
        elif current is not None:
            entries[current] = f"{entries[current]} {line.strip()}".strip()
    rest = lines[:start] + lines[end:]
    return "\n".join(rest).strip(), entries


def option_docs(factory: Callable[..., Any]) -> dict[str, str]:
    """Option -> what it does, for every option of ``factory`` that has a doc (its own
    ``Args:`` entry, else ``COMMON``'s)."""
    _, own = parse_args_section(inspect.getdoc(factory) or "")
    source = getattr(factory, "options_from", None)  # a factory that passes its options on
    if source is not None:
        own = {**parse_args_section(inspect.getdoc(source) or "")[1], **own}
    names = [
        p.name
        for p in inspect.signature(factory).parameters.values()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return {name: own.get(name) or COMMON[name] for name in names if own.get(name) or name in COMMON}
