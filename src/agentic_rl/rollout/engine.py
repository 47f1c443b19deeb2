"""The multi-turn rollout engine.

All active trajectories generate their next turn in one batched backend call; the env
steps of a turn (and so their tool calls) run concurrently; finished trajectories drop
out. Token-in-token-out: sampled tokens keep their sampler logprobs and loss_mask 1,
observations are rendered once and get loss_mask 0.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from agentic_rl.envs.base import Env
from agentic_rl.rollout.backends.base import SamplingParams
from agentic_rl.rollout.chat import ChatRenderer
from agentic_rl.rollout.sampling import stream_seed
from agentic_rl.types import Trajectory, TrajectoryGroup, Turn


@dataclass
class RolloutLimits:
    """Sampling and the limits that cut an episode."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    """Most tokens the model may sample in one turn."""
    max_total_tokens: int = 4096
    """Most tokens in a whole trajectory (prompt + responses + observations); reaching it truncates (max_tokens)."""
    max_turns: int = 16
    """Engine-side cap on assistant turns, a backstop for envs without their own."""
    timeout_s: float = 1800.0
    """Wall-clock limit per trajectory, from its reset (checked between turns and while its
    env steps). In a batched engine this includes waiting for the batch; it is a backstop
    for hung episodes, not a speed limit."""
    seed: int | None = None
    continuous_batching: bool = True
    """With a backend that offers decode sessions (HF): each trajectory decodes on its own
    schedule (one waiting for a tool does not hold the others; freed slots take new work)
    and keeps its KV cache across turns. False: one batched ``generate`` per turn over
    all active trajectories (the reference path; same tokens for the same seed)."""
    return_entropy: bool = False
    """Keep each turn's per-token sampling entropies in ``trajectory.info["turn_entropies"]``
    (one list per turn, token backends only): ARPO branches on them."""


@dataclass
class _Active:
    trajectory: Trajectory
    env: Env
    started: float
    stopped_last_turn: bool = True
    steps: int = 0
    seed: int = 0
    """This trajectory's random stream (token draws depend on it and the position only)."""
    extras: dict = field(default_factory=dict)


def _finish(state: _Active, reason: str, on_finish) -> None:
    state.trajectory.termination_reason = reason
    state.trajectory.wall_time_s = time.monotonic() - state.started
    _record_episode_metrics(state)
    close = getattr(state.env, "close", None)
    if callable(close):  # release per-trajectory resources (sandbox sessions)
        try:
            close()
        except Exception as exc:
            state.trajectory.info["close_error"] = f"{type(exc).__name__}: {exc}"
    if on_finish:
        on_finish(state.trajectory)


def _keep_entropies(trajectory: Trajectory, completion) -> None:
    """One list per turn in ``info["turn_entropies"]``, when the backend returned them."""
    if completion.entropies is not None:
        trajectory.info.setdefault("turn_entropies", []).append(list(completion.entropies))


def _record_episode_metrics(state: _Active) -> None:
    """Envs may expose ``episode_metrics(trajectory) -> dict[str, float]``; the numbers go to
    ``trajectory.info["episode_metrics"]`` (``aggregate_metrics`` averages them by name)."""
    hook = getattr(state.env, "episode_metrics", None)
    if not callable(hook):
        return
    try:
        metrics = hook(state.trajectory)
        state.trajectory.info["episode_metrics"] = {str(key): float(value) for key, value in dict(metrics).items()}
    except Exception as exc:  # a metrics bug must not fail the episode
        state.trajectory.info["episode_metrics_error"] = f"{type(exc).__name__}: {exc}"


def rollout(
    backend,
    make_env: Callable[[], Env],
    task_indices: Sequence[int],
    *,
    group_size: int = 1,
    limits: RolloutLimits | None = None,
    on_finish: Callable[[Trajectory], None] | None = None,
) -> list[TrajectoryGroup]:
    """Run ``group_size`` episodes for each task index and return one group per task.

    ``backend`` is a token backend (``kind == "tokens"``: HF, scripted) or a chat backend
    (``kind == "chat"``: OpenAI-compatible endpoints; no token-level data is recorded).
    ``make_env`` builds a fresh env per trajectory (envs hold episode state).
    """
    limits = limits or RolloutLimits()
    token_level = backend.kind == "tokens"
    renderer = ChatRenderer(backend.tokenizer) if token_level else None
    groups: list[TrajectoryGroup] = []
    states: list[_Active] = []
    for index in task_indices:
        group = TrajectoryGroup(task_id="", group_id=uuid.uuid4().hex[:12])
        for _ in range(group_size):
            started = time.monotonic()
            try:
                env = make_env()
                messages, info = env.reset(options={"task_index": index})
            except Exception as exc:  # a broken env must not take the other episodes down
                trajectory = Trajectory(task_id=str(index), group_id=group.group_id, infra_error=f"reset failed: {type(exc).__name__}: {exc}")
                group.trajectories.append(trajectory)
                _finish(_Active(trajectory, None, started), "error", on_finish)
                continue
            group.task_id = str(info.get("task_id", index))
            trajectory = Trajectory(task_id=group.task_id, group_id=group.group_id, messages=list(messages), info=dict(info))
            if renderer:
                trajectory.append(renderer.prompt_ids(messages), 0)
                trajectory.prompt_length = len(trajectory.token_ids)
            group.trajectories.append(trajectory)
            states.append(_Active(trajectory, env, started))
        groups.append(group)

    active = []
    for state in states:
        if renderer and len(state.trajectory.token_ids) >= limits.max_total_tokens:
            _finish(state, "max_tokens", on_finish)  # the prompt alone fills the budget: nothing to sample
        else:
            active.append(state)
    _run_to_end(active, backend, renderer, limits, on_finish)
    return groups


def continue_rollouts(
    backend,
    starts: Sequence[tuple[Trajectory, Env]],
    *,
    limits: RolloutLimits | None = None,
    on_finish: Callable[[Trajectory], None] | None = None,
) -> None:
    """Run partial trajectories to the end, in place (ARPO's branches).

    Each start is a token-level trajectory that ends right after an observation (the next
    thing to sample is an assistant turn) and an env already in the state that follows it.
    """
    limits = limits or RolloutLimits()
    started = time.monotonic()
    states = [_Active(trajectory, env, started) for trajectory, env in starts]
    _run_to_end(states, backend, ChatRenderer(backend.tokenizer), limits, on_finish)


def _run_to_end(active: list[_Active], backend, renderer: ChatRenderer | None, limits: RolloutLimits, on_finish) -> None:
    base_seed = limits.seed if limits.seed is not None else random.getrandbits(62)
    for ordinal, state in enumerate(active):
        state.seed = stream_seed(base_seed, ordinal)
    pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="env-step")
    try:
        if renderer and limits.continuous_batching and callable(getattr(backend, "session", None)):
            from agentic_rl.rollout.continuous import run_continuous

            run_continuous(active, backend, renderer, limits, pool, on_finish)
            return
        turn_index = 0
        while active:
            active = _one_turn(active, backend, renderer, limits, pool, on_finish, turn_index)
            turn_index += 1
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


def _one_turn(active: list[_Active], backend, renderer: ChatRenderer | None, limits: RolloutLimits, pool, on_finish, turn_index: int) -> list[_Active]:
    seed = None if limits.seed is None else limits.seed + turn_index
    sampling = SamplingParams(temperature=limits.temperature, top_p=limits.top_p, max_new_tokens=limits.max_new_tokens, seed=seed, return_entropy=limits.return_entropy, row_seeds=[s.seed for s in active])
    starts = [len(s.trajectory.token_ids) for s in active]  # where each turn's response begins
    if renderer:
        budgets = [min(limits.max_new_tokens, limits.max_total_tokens - len(s.trajectory.token_ids)) for s in active]
        completions = backend.generate([s.trajectory.token_ids for s in active], sampling, stop_token_ids=renderer.stop_token_ids, max_new_tokens=budgets)
        texts = [_take_completion(state, completion, renderer) for state, completion in zip(active, completions)]
        finish_reasons = [c.finish_reason for c in completions]
        hit_total = [len(s.trajectory.token_ids) >= limits.max_total_tokens for s in active]
    else:
        replies = backend.chat([s.trajectory.messages for s in active], temperature=limits.temperature, top_p=limits.top_p, max_tokens=limits.max_new_tokens, seed=seed)
        texts = [r.text for r in replies]
        finish_reasons = [r.finish_reason for r in replies]
        hit_total = [False] * len(active)

    futures = []
    for state, text in zip(active, texts):
        message = {"role": "assistant", "content": text}
        state.trajectory.messages.append(message)
        futures.append(pool.submit(state.env.step, message))

    still_active = []
    for state, start, text, finish, full, future in zip(active, starts, texts, finish_reasons, hit_total, futures):
        turn = Turn(assistant_text=text, response_start=start, response_end=len(state.trajectory.token_ids), finish_reason=finish)
        remaining = limits.timeout_s - (time.monotonic() - state.started)
        if _after_step(state, turn, full, lambda: future.result(timeout=max(remaining, 0.0)), renderer, limits, on_finish):
            still_active.append(state)
    return still_active


def _take_completion(state: _Active, completion, renderer: ChatRenderer) -> str:
    """Append a sampled turn to the trajectory; return its assistant text."""
    state.trajectory.append(completion.token_ids, 1, completion.logprobs)
    _keep_entropies(state.trajectory, completion)
    state.stopped_last_turn = completion.finish_reason == "stop"
    return renderer.response_text(completion.token_ids)


def _after_step(state: _Active, turn: Turn, full: bool, result: Callable[[], tuple], renderer: ChatRenderer | None, limits: RolloutLimits, on_finish) -> bool:
    """Apply one env step's outcome (``result()`` returns it or raises); finish the episode
    or append the observation. Returns whether the trajectory goes on."""
    trajectory, finish = state.trajectory, turn.finish_reason
    try:
        observations, reward, terminated, truncated, info = result()
    except FutureTimeout:
        # The env (or a tool inside it) hung: infrastructure, not the policy's doing.
        trajectory.turns.append(turn)
        trajectory.infra_error = f"env step did not return within the {limits.timeout_s:g} s trajectory timeout"
        _finish(state, "timeout", on_finish)
        return False
    except Exception as exc:  # an env or tool crash is infrastructure, not the policy's doing
        trajectory.turns.append(turn)
        trajectory.infra_error = f"{type(exc).__name__}: {exc}"
        _finish(state, "error", on_finish)
        return False
    turn.tool_results = list(info.get("tool_results", []))
    turn.reward = float(reward)
    turn.turn_reward = float(info.get("turn_reward", 0.0))
    trajectory.turns.append(turn)
    trajectory.reward += float(reward)
    if "answer" in info:
        trajectory.answer = info["answer"]
    trajectory.correct = bool(info.get("correct", trajectory.correct))
    if terminated:
        _finish(state, "max_tokens" if finish == "length" else "answered", on_finish)
    elif truncated or len(trajectory.turns) >= limits.max_turns:
        _finish(state, "max_turns", on_finish)
    elif full:
        _finish(state, "max_tokens", on_finish)
    elif time.monotonic() - state.started >= limits.timeout_s:
        _finish(state, "timeout", on_finish)
    else:
        if renderer:
            obs_ids = renderer.observation_ids(observations, stopped=state.stopped_last_turn)
            if len(trajectory.token_ids) + len(obs_ids) >= limits.max_total_tokens:
                _finish(state, "max_tokens", on_finish)
                return False
            trajectory.append(obs_ids, 0)
            turn.observation_end = len(trajectory.token_ids)
        trajectory.messages.extend(observations)
        return True
    return False
