"""One vLLM server for every trainer rank (``backend.kind: vllm`` with ``--nproc N``).

Rank 0 owns the server (a managed one it starts, or the one at ``backend.base_url``) and
pushes the weights into it; every rank sends its own share of the requests to it. After an
optimizer step every rank calls ``sync_weights`` (a sharded trainer gathers the full
weights collectively): rank 0 pushes, the others only count the new version, and no rank
returns before the push is done, so no rank samples from the old weights. A push that
fails ends every rank with the same one line instead of leaving the others waiting.
"""

from __future__ import annotations

from typing import Any

from agentic_rl.config import BackendConfig, ConfigError, ModelConfig
from agentic_rl.distributed.context import DistContext
from agentic_rl.engines.factory import build_backend
from agentic_rl.engines.http import BackendError
from agentic_rl.engines.vllm import build_vllm_backend


class SharedServerBackend:
    """A rank's engine on the shared server: its own client (requests, sessions, versions)
    with ``sync_weights`` done by rank 0 for all. Everything else is the client's."""

    def __init__(self, client, dist: DistContext) -> None:
        self.client = client
        self.dist = dist

    def sync_weights(self, source: Any = None) -> int:
        error = None
        try:
            version = self.client.sync_weights(source if self.dist.is_main else None)
        except (BackendError, OSError, ValueError) as exc:
            error, version = f"{type(exc).__name__}: {exc}", None
        # One collective for all: every rank learns whether rank 0's push went through.
        errors = [e for e in self.dist.all_gather_objects(error) if e is not None]
        if errors:
            raise BackendError(f"weight sync into the vLLM server at {self.client.base_url} failed: {errors[0]}")
        return version

    def __getattr__(self, name: str) -> Any:
        return getattr(self.client, name)


def shared_server_backend(
    backend: BackendConfig, model: ModelConfig, *, loaded, precision: str, dist: DistContext
) -> SharedServerBackend:
    """Rank 0's backend as ``build_backend`` makes it (its server started on ``loaded``'s
    weights), and on every other rank a client of that server."""
    error, base_url, api_key, client = None, None, None, None
    if dist.is_main:
        try:
            client = build_backend(backend, model, loaded=loaded, precision=precision)
            base_url = client.base_url
            api_key = client.api_key
        except (BackendError, ConfigError, OSError, ValueError) as exc:
            error = exc
    # Every rank learns rank 0's server and its key (or its failure) before any rank goes on.
    failure = None if error is None else f"{type(error).__name__}: {error}"
    shared = dist.broadcast_object((base_url, api_key, failure))
    if error is not None:
        raise error
    base_url, api_key, failure = shared
    if failure is not None:
        raise BackendError(f"rank 0 could not start the vLLM server: {failure}")
    if client is None:
        try:
            client = build_vllm_backend(backend, model.name, loaded=loaded, follower_of=base_url, api_key=api_key)
        except BackendError as exc:
            raise BackendError(
                f"rank {dist.rank} cannot reach rank 0's vLLM server at {base_url} ({exc}); ranks on other hosts "
                "need a server they all reach: start one and set backend.base_url"
            ) from None
    return SharedServerBackend(client, dist)
