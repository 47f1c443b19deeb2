"""``agentic-rl data``: converting datasets into what the envs and SFT read."""

from __future__ import annotations

import argparse
from pathlib import Path

from agentic_rl.cli.aliases import output_flag


def _data_gsm8k_to_sft(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.envs.math_python import gsm8k_to_sft
    from agentic_rl.tracking.display import console

    if not Path(args.input).is_file():
        raise ConfigError(f"input {args.input!r} does not exist (GSM8K JSONL with question and answer per line)")
    try:
        stats = gsm8k_to_sft(
            args.input,
            args.output,
            tool=args.tool,
            parser=args.parser,
            keep_mismatches=args.keep_mismatches,
            limit=args.limit,
        )
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    flagged = f"{stats.flagged} flagged ({stats.mismatched_calls} calls failed or differ from the annotation; {'kept' if args.keep_mismatches else 'left out'})"
    console.print(
        f"{stats.rows} rows -> {stats.written} conversations with {stats.calls} {args.tool} calls; {flagged}; {len(stats.skipped)} skipped -> {args.output}"
    )
    for line in stats.skipped[:5]:
        console.print(f"  skipped {line}")
    return 0


def _data_search_r1_qa(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.data.search_r1 import convert_qa
    from agentic_rl.tracking.display import console

    try:
        written = convert_qa(args.sources, args.output, split=args.split, limit=args.limit)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    console.print(f"{written} questions from {len(args.sources)} source(s) -> {args.output} (env.qa_path)")
    return 0


def _data_wiki_corpus(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.data.search_r1 import convert_corpus
    from agentic_rl.tracking.display import console

    try:
        written = convert_corpus(args.input, args.output, limit=args.limit)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    console.print(
        f"{written} passages -> {args.output} (index it: agentic-rl index build {args.output} --output-dir DIR)"
    )
    return 0


def register(commands) -> None:
    data = commands.add_parser("data", help="dataset conversion").add_subparsers(dest="data_command", required=True)
    gsm8k = data.add_parser(
        "gsm8k-to-sft", help="turn GSM8K's <<expr=result>> annotations into tool-use SFT conversations"
    )
    gsm8k.add_argument("input", metavar="IN.jsonl", help="GSM8K JSONL (question, answer with #### N)")
    output_flag(gsm8k, "--output", "--out", "JSONL of OpenAI messages with tool calls, for `agentic-rl sft --data`")
    gsm8k.add_argument(
        "--tool",
        choices=("calculator", "python"),
        default="calculator",
        help="tool that runs each expression (default calculator)",
    )
    gsm8k.add_argument(
        "--parser",
        choices=("hermes", "retool"),
        default="hermes",
        help="the env format whose system prompt the conversations carry (default hermes)",
    )
    gsm8k.add_argument(
        "--keep-mismatches",
        action="store_true",
        help="keep conversations where a tool output differs from the annotation (flagged in metadata)",
    )
    gsm8k.add_argument("--limit", type=int, help="convert only the first N rows")
    gsm8k.set_defaults(run=_data_gsm8k_to_sft)

    qa = data.add_parser(
        "search-r1-qa", help="NQ / HotpotQA as FlashRAG or Search-R1 publish them -> QA JSONL for search-qa's qa_path"
    )
    qa.add_argument(
        "sources", nargs="+", metavar="SOURCE", help="data files or save_to_disk folders ({split} is filled in)"
    )
    qa.add_argument("--split", help="the split to read from a DatasetDict folder, and {split} in the paths")
    output_flag(qa, "--output", "--out", 'JSONL of {"id", "question", "answers"}')
    qa.add_argument("--limit", type=int, help="convert only the first N rows of each source")
    qa.set_defaults(run=_data_search_r1_qa)

    wiki = data.add_parser(
        "wiki-corpus", help="Search-R1's wiki-18 passages ({id, contents}) -> corpus JSONL for agentic-rl index build"
    )
    wiki.add_argument("input", metavar="IN.jsonl[.gz]", help="wiki-18.jsonl, plain or gzipped")
    output_flag(wiki, "--output", "--out", 'JSONL of {"id", "title", "text"}')
    wiki.add_argument("--limit", type=int, help="convert only the first N passages")
    wiki.set_defaults(run=_data_wiki_corpus)
