"""What every route of the gateway shares: the engine service, the model's chat template
and call format, the episode store and the limits, with the helpers that turn a request's
sampling fields into engine jobs and finished choices into a response."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field

from agentic_rl.chat import ChatRenderer
from agentic_rl.engines.base import Completion
from agentic_rl.gateway.chat import RequestError
from agentic_rl.gateway.fields import number
from agentic_rl.gateway.responses import Choice
from agentic_rl.gateway.service import CompletionService
from agentic_rl.gateway.traces import EpisodeStore
from agentic_rl.parsers.base import ToolCallParser
from agentic_rl.seeds import stream_seed


@dataclass
class GatewayState:
    service: CompletionService
    renderer: ChatRenderer
    parser: ToolCallParser
    model_name: str
    store: EpisodeStore
    max_context: int = 8192
    """Most prompt + completion tokens per call."""
    default_max_tokens: int = 512
    """A chat completion's limit when the request names none."""
    tools_in_template: bool = field(init=False)
    """The chat template describes the tools itself (else the system message does)."""
    output_in_template: bool = field(init=False)
    """The template frames tool results itself (Qwen's <tool_response>): they go in bare, as in ToolEnv."""

    def __post_init__(self) -> None:
        self.tools_in_template = self.renderer.render_tools(self.parser)
        self.output_in_template = self.tools_in_template and self.renderer.frames_tool_output(self.parser)

    @property
    def tokenizer(self):
        return self.renderer.tokenizer

    def sampling(
        self, body: dict, limit: int, room: int, seed: int | None, count: int, top_logprobs: int
    ) -> list[dict]:
        """``service.submit`` arguments for ``count`` choices: choice i draws from stream i of the seed."""
        temperature = number(body, "temperature", 1.0, 0.0, 2.0)
        top_p = number(body, "top_p", 1.0, 1e-6, 1.0)
        base = seed if seed is not None else random.getrandbits(62)
        return [
            {
                "max_tokens": min(limit, room),
                "seed": stream_seed(base, i),
                "temperature": temperature,
                "top_p": top_p,
                "top_logprobs": top_logprobs,
                "role": body["model"] if isinstance(body.get("model"), str) else None,  # picks the role's adapter
            }
            for i in range(count)
        ]

    def alternatives(self, k: int, param: str) -> int:
        """``k`` most likely alternatives per token, where the engine can give them."""
        if k and not self.service.supports_top_logprobs:
            raise RequestError(f"{param}: this engine returns only the sampled tokens' log-probs", param)
        return k

    async def gather(self, jobs: list[dict]) -> list[Completion]:
        futures = [self.service.submit(**job) for job in jobs]
        try:
            return await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        except asyncio.CancelledError:  # the client went away: its requests need no answer
            for future in futures:
                future.cancel()
            raise

    def envelope(self, id_prefix: str, kind: str, choices: list[Choice], prompt_tokens: int, completions: list) -> dict:
        """The non-streamed response around ``(choice, completion tokens)`` pairs, with usage."""
        used = sum(count for _, count in choices)
        return {
            "id": f"{id_prefix}-{uuid.uuid4().hex}",
            "object": kind,
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [choice for choice, _ in choices],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": used, "total_tokens": prompt_tokens + used},
            "system_fingerprint": f"weights-v{completions[0].weight_version}",
        }

    def request_seed(self, seed: int | None, episode_id: str | None) -> int | None:
        """The request's seed, or within an episode the episode's next one (reproducible calls)."""
        return self.store.request_seed(episode_id) if seed is None and episode_id else seed
