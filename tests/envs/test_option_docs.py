"""Every built-in env option says what it does (envs/option_docs.py): its factory's
``Args:`` entry or the shared text of an option many envs take."""

import inspect

import pytest

from agentic_rl import envs
from agentic_rl.envs.option_docs import COMMON, parse_args_section
from agentic_rl.envs.registry import _factory, options


@pytest.mark.parametrize("name", [entry.name for entry in envs.registered()])
def test_every_option_is_documented(name):
    missing = [row[0] for row in options(name) if not row[3]]
    assert not missing, f"env {name!r}: options without a doc: {', '.join(missing)}"


@pytest.mark.parametrize("name", [entry.name for entry in envs.registered()])
def test_args_entries_name_real_options(name):
    """An entry for a name the factory does not take is a stale doc."""
    factory = _factory(name)
    _, entries = parse_args_section(inspect.getdoc(factory) or "")
    assert set(entries) <= set(inspect.signature(factory).parameters)


def test_common_texts_are_shared():
    """A shared text earns its place by being used by several envs."""
    users = {option: 0 for option in COMMON}
    for entry in envs.registered():
        for option in inspect.signature(_factory(entry.name)).parameters:
            if option in users:
                users[option] += 1
    assert all(count >= 2 for count in users.values()), users


def test_parse_args_section():
    doc = "Build it.\n\nArgs:\n    height: Rows,\n        walls included.\n    width (int): Columns.\n\nReturns:\n    The env."
    text, entries = parse_args_section(doc)
    assert entries == {"height": "Rows, walls included.", "width": "Columns."}
    assert text == "Build it.\n\nReturns:\n    The env."
    assert parse_args_section("No section.") == ("No section.", {})
