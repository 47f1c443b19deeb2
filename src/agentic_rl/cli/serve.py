"""``agentic-rl serve``: a model behind the OpenAI-compatible gateway."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path


def _serve(args: argparse.Namespace) -> int:
    from agentic_rl.cli.aliases import notice
    from agentic_rl.config import ConfigError
    from agentic_rl.gateway.server import TOKEN_VARIABLE, GatewayServer
    from agentic_rl.tracking.display import console

    if args.legacy_model is not None:
        if args.model is not None:
            raise ConfigError("--model: give the model once (the positional MODEL is the deprecated spelling)")
        notice("serve MODEL (positional)", f"serve --model {args.legacy_model}")
        args.model = args.legacy_model
    args.model = args.model or "smollm2-135m"
    name = args.model
    if (Path(name) / "final").is_dir():  # a run directory: its trained model
        name = str(Path(name) / "final")
    token = os.environ.get(TOKEN_VARIABLE) or None
    backend = _serving_backend(args, name)
    try:
        server = GatewayServer(
            backend,
            model_name=args.model_name or args.model,
            parser=args.parser,
            host=args.host,
            port=args.port,
            allow_remote=token is not None,
            token=token,
            max_context=args.max_context,
        )
    except (FileNotFoundError, ValueError, OSError) as exc:
        backend.close()
        raise ConfigError(str(exc)) from None
    engine = f"vLLM at {backend.base_url}" if args.engine == "vllm" else "the in-process engine"
    console.print(
        f"serving {name} with {engine} at {server.url}/v1 (OpenAI chat completions; an episode's calls under {server.url}/episodes/ID/v1); Ctrl-C stops"
    )
    if token is None:  # the random one this process made: rewards can be posted only with it
        console.print(f"reward writes (POST /episodes/ID/reward) need: Authorization: Bearer {server.write_token}")
    # uvicorn re-raises SIGTERM after its graceful shutdown: make it an exit that runs the
    # cleanup below, so a managed vLLM server is stopped with the gateway, not orphaned.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        server.service.close()
        server.server_close()
        backend.close()
    return 0


def _serving_backend(args: argparse.Namespace, name: str):
    """The token engine behind ``agentic-rl serve``: the in-process HF engine, or vLLM (a
    running server at backend.base_url, or one started from backend.python)."""
    from agentic_rl.config import BackendConfig, ConfigError, apply_assignments, build

    overrides = apply_assignments({}, args.set or [])
    other = sorted(set(overrides) - {"backend"})
    if other:
        raise ConfigError(
            f"--set: serve takes backend.* keys only (e.g. backend.base_url, backend.python), got {other[0]}"
        )
    if args.engine == "hf":
        if overrides:
            raise ConfigError(
                "--set backend.*: only with --engine vllm (the in-process engine takes --device and --batch-size)"
            )
        from agentic_rl.engines.hf import HFBackend
        from agentic_rl.models import load

        try:
            model, tokenizer = load(name, device=args.device)
        except (FileNotFoundError, ValueError, OSError) as exc:
            raise ConfigError(str(exc)) from None
        return HFBackend(model, tokenizer, batch_size=args.batch_size)
    from agentic_rl.engines.vllm import build_vllm_backend

    config = build(BackendConfig, {**overrides.get("backend", {}), "kind": "vllm"})
    try:
        return build_vllm_backend(
            config, name
        )  # with base_url only the tokenizer loads; else the model, once, to write the server's folder
    except (FileNotFoundError, OSError) as exc:
        raise ConfigError(str(exc)) from None


def register(commands) -> None:
    serve = commands.add_parser(
        "serve",
        help="serve a model (or a run's final model) as an OpenAI-compatible API that records the exact tokens per episode",
    )
    serve.add_argument(
        "--model",
        help="built-in name, local folder, hub id, or a run directory (its final/ model); default smollm2-135m",
    )
    serve.add_argument("legacy_model", nargs="?", help=argparse.SUPPRESS)  # the positional spelling, deprecated
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1); beyond loopback only with a bearer token in $AGENTIC_RL_GATEWAY_TOKEN",
    )
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--parser", default="hermes", help="the model's tool-call format (hermes, retool, search-r1)")
    serve.add_argument(
        "--model-name", help="the model id clients send and /v1/models lists (default: the model argument)"
    )
    serve.add_argument(
        "--engine",
        choices=("hf", "vllm"),
        default="hf",
        help="hf: the in-process engine; vllm: a vLLM server (backend.base_url, or one started from backend.python)",
    )
    serve.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="with --engine vllm: backend settings, e.g. backend.base_url=http://127.0.0.1:8001 or backend.python=.venv-vllm/bin/python",
    )
    serve.add_argument("--device", default="auto", help="cpu, cuda or auto")
    serve.add_argument("--batch-size", type=int, default=64, help="most sequences decoded at once")
    serve.add_argument("--max-context", type=int, default=8192, help="most prompt + completion tokens per call")
    serve.set_defaults(run=_serve)
