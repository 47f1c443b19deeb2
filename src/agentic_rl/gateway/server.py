"""The gateway served with uvicorn (http_server.ASGIServer: loopback by default, a bearer
token beyond it), over any token engine."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING

from agentic_rl.chat import ChatRenderer
from agentic_rl.gateway.service import KEEP_IDLE_S, CompletionService
from agentic_rl.gateway.traces import MAX_EPISODE_BYTES, MAX_EPISODE_CALLS, EpisodeStore
from agentic_rl.http_server import ASGIServer
from agentic_rl.parsers.base import get_parser

if TYPE_CHECKING:
    from agentic_rl.http_connections import ConnectionLimits

TOKEN_VARIABLE = "AGENTIC_RL_GATEWAY_TOKEN"
"""The environment variable ``agentic-rl serve`` reads the bearer token from."""


class GatewayServer(ASGIServer):
    """OpenAI-compatible chat completions from ``backend`` (gateway/app.py). ``parser``: the
    model's tool-call format; ``model_name``: the id clients name; ``port=0`` picks a free
    port (``.url``; clients use ``.url + "/v1"`` or an episode's ``episode_url``);
    ``keep_idle_s``: see ``CompletionService`` (0 when a trainer shares the weights);
    ``max_concurrency``: requests served at once (more get 503); ``max_episode_calls``,
    ``max_episode_bytes``: what one episode may keep (gateway/traces.py); ``limits``: the
    connections' deadlines and cap (``http_connections.ConnectionLimits``); ``adapter_for``:
    a call's role (its ``model``) -> the LoRA adapter that samples it (``lora.roles``).

    ``write_token``: what ``POST /episodes/{id}/reward`` needs as its bearer token: ``token``
    when one is set, else a random secret made here, known only to this process (an agent
    program it runs gets it as its OpenAI client's ``api_key``); other local processes
    cannot set rewards."""

    def __init__(
        self,
        backend,
        *,
        model_name: str,
        parser: str = "hermes",
        host: str = "127.0.0.1",
        port: int = 8000,
        allow_remote: bool = False,
        token: str | None = None,
        max_context: int = 8192,
        default_max_tokens: int = 512,
        max_concurrency: int = 256,
        verbose: bool = False,
        keep_idle_s: float = KEEP_IDLE_S,
        max_episode_calls: int = MAX_EPISODE_CALLS,
        max_episode_bytes: int = MAX_EPISODE_BYTES,
        limits: ConnectionLimits | None = None,
        adapter_for: Callable[[str | None], str] | None = None,
    ) -> None:
        from agentic_rl.gateway.app import create_app

        renderer = ChatRenderer(backend.tokenizer)
        self.service = CompletionService(
            backend, stop_token_ids=renderer.stop_token_ids, keep_idle_s=keep_idle_s, adapter_for=adapter_for
        )
        self.store = EpisodeStore(max_episode_calls=max_episode_calls, max_episode_bytes=max_episode_bytes)
        self.write_token = token or secrets.token_urlsafe(32)
        tool_parser = get_parser(parser)
        try:
            super().__init__(
                lambda allowed: create_app(
                    self.service,
                    renderer,
                    tool_parser,
                    model_name=model_name,
                    store=self.store,
                    max_context=max_context,
                    default_max_tokens=default_max_tokens,
                    token=token,
                    write_token=self.write_token,
                    allowed_hosts=allowed,
                    max_concurrency=max_concurrency,
                ),
                host,
                port,
                allow_remote=allow_remote,
                token=token,
                verbose=verbose,
                limits=limits,
                what="the policy",
                name="gateway",
            )
        except BaseException:
            self.service.close()
            raise

    def episode_url(self, episode_id: str) -> str:
        """The ``base_url`` that puts an OpenAI client's calls into episode ``episode_id``."""
        return f"{self.url}/episodes/{episode_id}/v1"

    def shutdown(self) -> None:
        super().shutdown()
        self.service.close()
