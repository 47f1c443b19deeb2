"""``agentic-rl index`` and ``agentic-rl retriever``: search indexes and their server."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from agentic_rl.cli.aliases import output_flag


def _index_build(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.retrieval import build_index
    from agentic_rl.tracking.display import console

    if args.corpus == "builtin":
        from agentic_rl.envs.search_data import demo_corpus

        documents = demo_corpus(args.seed)
    elif not Path(args.corpus).is_file():
        raise ConfigError(f"corpus {args.corpus!r} does not exist (JSONL with id, title, text per line, or 'builtin')")
    else:
        documents = args.corpus
    try:
        meta = build_index(documents, args.output_dir)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    console.print(f"indexed {meta['num_docs']} documents in {meta['build_time_s']:.1f} s -> {args.output_dir}")
    return 0


def _retriever_serve(args: argparse.Namespace) -> int:
    from agentic_rl.config import ConfigError
    from agentic_rl.retrieval import CachedRetriever, load_index
    from agentic_rl.retrieval.http import TOKEN_VARIABLE, RetrievalServer
    from agentic_rl.tracking.display import console

    token = os.environ.get(TOKEN_VARIABLE) or None
    try:
        retriever = CachedRetriever(load_index(args.index), max_size=args.cache_size)
        # Beyond loopback only with a token (clients send it from the same variable).
        server = RetrievalServer(retriever, args.host, args.port, allow_remote=token is not None, token=token)
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise ConfigError(str(exc)) from None
    console.print(f'serving {args.index} at {server.url}/retrieve (POST {{"queries": [...], "topk": 3}}); Ctrl-C stops')
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


def register(commands) -> None:
    index = commands.add_parser("index", help="retrieval indexes").add_subparsers(dest="index_command", required=True)
    index_build = index.add_parser("build", help="build a BM25 index from a JSONL corpus ({id, title, text} per line)")
    index_build.add_argument("corpus", help="corpus JSONL, or 'builtin' for the search-qa demo corpus")
    output_flag(index_build, "--output-dir", "--out", "index folder to write")
    index_build.add_argument("--seed", type=int, default=0, help="seed of the builtin corpus (default 0)")
    index_build.set_defaults(run=_index_build)

    retriever = commands.add_parser("retriever", help="retrieval server").add_subparsers(
        dest="retriever_command", required=True
    )
    retriever_serve = retriever.add_parser("serve", help="serve an index over HTTP on loopback (Search-R1 protocol)")
    retriever_serve.add_argument("index", help="index folder from `agentic-rl index build`")
    retriever_serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); beyond loopback only with a bearer token in $AGENTIC_RL_RETRIEVER_TOKEN",
    )
    retriever_serve.add_argument("--port", type=int, default=8000)
    retriever_serve.add_argument("--cache-size", type=int, default=10_000, help="cached (query, k) results")
    retriever_serve.set_defaults(run=_retriever_serve)
