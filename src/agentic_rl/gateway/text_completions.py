"""``POST /v1/completions`` (legacy text completions): a prompt string or token ids, or a
list of them, continued without a chat template; ``n`` choices per prompt."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fastapi.responses import StreamingResponse

from agentic_rl.engines.base import Completion
from agentic_rl.gateway.chat import RequestError
from agentic_rl.gateway.fields import (
    MAX_CHOICES,
    MAX_PROMPTS,
    MAX_TOP_LOGPROBS,
    TEXT_DEFAULT_MAX_TOKENS,
    error_response,
    flag,
    include_usage,
    integer,
    role_field,
    seed_field,
    stop_strings,
)
from agentic_rl.gateway.responses import Choice, cut_at_stop, finish_reason, text_logprobs
from agentic_rl.gateway.sse import text_stream
from agentic_rl.gateway.state import GatewayState
from agentic_rl.gateway.streaming import LiveText
from agentic_rl.gateway.traces import Call


def prompts_of(state: GatewayState, body: dict) -> list[tuple[list[int], str]]:
    """(token ids, text) of each prompt: a string, token ids, or a list of either."""
    prompt = body.get("prompt")
    tokenizer, vocabulary = state.tokenizer, len(state.tokenizer)

    def one(item: Any) -> tuple[list[int], str]:
        if isinstance(item, str) and item:
            ids = tokenizer(item)["input_ids"]
            if not ids:
                raise RequestError(
                    "prompt: the text tokenizes to no tokens (control characters the tokenizer drops)", "prompt"
                )
            return ids, item
        if isinstance(item, list) and item and all(isinstance(t, int) and not isinstance(t, bool) for t in item):
            if not all(0 <= t < vocabulary for t in item):
                raise RequestError(f"prompt: token ids must be in [0, {vocabulary})", "prompt")
            return list(item), tokenizer.decode(item)
        raise RequestError(
            "prompt: expected a non-empty string, a non-empty list of token ids, or a list of those", "prompt"
        )

    if isinstance(prompt, list) and prompt and all(isinstance(item, (str, list)) for item in prompt):
        if len(prompt) > MAX_PROMPTS:
            raise RequestError(f"prompt: at most {MAX_PROMPTS} prompts per request", "prompt")
        return [one(item) for item in prompt]
    return [one(prompt)]


@dataclass
class TextRequest:
    """A validated text completion request: its prompts and one engine job per choice."""

    prompts: list[tuple[list[int], str]]
    n: int
    jobs: list[dict]
    stops: list[str]
    top_k: int | None
    echo: bool
    stream: bool
    include_usage: bool
    role: str = ""
    """The request's ``model``: the role its recorded calls belong to."""


def parse_text(state: GatewayState, body: dict, episode_id: str | None) -> TextRequest:
    prompts = prompts_of(state, body)
    n = integer(body, "n", 1, 1, MAX_CHOICES)
    if body.get("best_of") is not None and body.get("best_of") != n:
        raise RequestError("best_of: only best_of = n is served (every sampled choice is returned)", "best_of")
    if body.get("suffix") is not None:
        raise RequestError("suffix: insertion (text after the completion) is not supported", "suffix")
    limit = integer(body, "max_tokens", TEXT_DEFAULT_MAX_TOKENS, 1, state.max_context)
    seed = seed_field(body)
    stops = stop_strings(body)
    top_k = integer(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
    echo = flag(body, "echo")
    if echo and top_k is not None:
        raise RequestError(
            "echo: not with logprobs (the prompt's log-probs are not computed); ask for one or the other", "echo"
        )
    top_k_engine = state.alternatives(top_k or 0, "logprobs")
    stream = flag(body, "stream")
    longest = max(len(ids) for ids, _ in prompts)
    room = state.max_context - longest
    if room < 1:
        raise RequestError(
            f"prompt: the prompt is {longest} tokens; this server allows {state.max_context} in all", "prompt"
        )
    if episode_id:
        size = sum(8 * (len(ids) + 2 * min(limit, state.max_context - len(ids))) for ids, _ in prompts)
        state.store.admit(episode_id, len(prompts) * n, n * size)
    options = state.sampling(body, limit, room, state.request_seed(seed, episode_id), len(prompts) * n, top_k_engine)
    jobs = [
        {
            "prompt": prompts[index // n][0],
            **options[index],
            "max_tokens": min(limit, state.max_context - len(prompts[index // n][0])),
        }
        for index in range(len(options))
    ]
    return TextRequest(prompts, n, jobs, stops, top_k, echo, stream, include_usage(body), role_field(body))


def text_finisher(
    state: GatewayState, request: TextRequest, episode_id: str | None
) -> Callable[[int, Completion], Choice]:
    def finish(index: int, completion: Completion) -> Choice:
        prompt_ids, prompt_text = request.prompts[index // request.n]
        ids, completion_text, stopped_by_string = cut_at_stop(state.renderer, completion.token_ids, request.stops)
        logprobs = completion.logprobs[: len(ids)]
        reason = finish_reason(completion, stopped_by_string)
        if episode_id:
            reply = {"role": "assistant", "content": completion_text}
            call = Call(
                prompt_ids,
                ids,
                logprobs,
                completion.weight_version,
                reason,
                reply=reply,
                kind="completion",
                role=request.role,
            )
            state.store.record(episode_id, call)
        choice = {
            "index": index,
            "text": prompt_text + completion_text if request.echo else completion_text,
            "logprobs": None,
            "finish_reason": reason,
        }
        if request.top_k is not None:
            choice["logprobs"] = text_logprobs(state.tokenizer, ids, logprobs, completion.top_logprobs)
        return choice, len(ids)

    return finish


async def text_completion(state: GatewayState, body: dict, episode_id: str | None):
    request = parse_text(state, body, episode_id)
    finish = text_finisher(state, request, episode_id)
    prompt_tokens = sum(len(ids) for ids, _ in request.prompts)
    if request.stream:
        live = [LiveText(state.renderer, request.stops) for _ in request.jobs]
        echoes = [request.prompts[index // request.n][1] if request.echo else "" for index in range(len(request.jobs))]
        events = text_stream(
            state.service, request.jobs, live, finish, state.model_name, prompt_tokens, request.include_usage, echoes
        )
        return StreamingResponse(events, media_type="text/event-stream")
    completions = await state.gather(request.jobs)
    failed = next((c.error for c in completions if c.error is not None), None)
    if failed is not None:
        return error_response(500, f"the engine failed: {failed}")
    choices = [finish(index, completion) for index, completion in enumerate(completions)]
    return state.envelope("cmpl", "text_completion", choices, prompt_tokens, completions)
