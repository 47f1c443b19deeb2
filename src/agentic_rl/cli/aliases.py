"""Old flag spellings kept for one release: each still works and prints one line naming
the new one. The scheme they move to: ``--model`` names the model everywhere, ``--output``
a file a command writes, ``--output-dir`` a folder, and every config knob (``precision``
included) goes through ``--set KEY=VALUE``."""

from __future__ import annotations

import argparse
import sys


def notice(old: str, new: str) -> None:
    """The one-line deprecation notice, on stderr."""
    print(f"agentic-rl: {old} is deprecated and goes in the next release; use {new}", file=sys.stderr)


class DeprecatedAlias(argparse.Action):
    """Stores into the new flag's ``dest`` and prints :func:`notice`; hidden from ``--help``."""

    def __init__(self, option_strings, dest, *, use: str, **kwargs) -> None:
        self.use = use
        super().__init__(option_strings, dest, help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        notice(option_string or self.dest, self.use)
        setattr(namespace, self.dest, values)


def output_flag(parser: argparse.ArgumentParser, new: str, old: str, help: str) -> None:
    """A required ``new`` flag (``--output`` or ``--output-dir``) that also answers to ``old``."""
    dest = new.lstrip("-").replace("-", "_")
    either = parser.add_mutually_exclusive_group(required=True)
    either.add_argument(new, dest=dest, metavar=dest.upper(), help=help)
    either.add_argument(old, dest=dest, action=DeprecatedAlias, use=new)
