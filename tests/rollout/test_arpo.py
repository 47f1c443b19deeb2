"""ARPO's adaptive rollout with a scripted backend that reports chosen entropies: forced
high-entropy points branch, the budget holds, shared prefixes are bit-identical, env
replay rebuilds the state (and skips branches whose replay differs)."""

from __future__ import annotations

import json
import math

import pytest

from agentic_rl.config import ARPOConfig
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs import make
from agentic_rl.rollout.arpo import arpo_rollout, branch_common_prefix, own_tool_calls

TOOL_RESPONSE = "<tool_response>\n"  # the system prompt mentions "<tool_response></tool_response>"


def call(expression: str) -> str:
    return (
        "<tool_call>\n" + json.dumps({"name": "calculator", "arguments": {"expression": expression}}) + "\n</tool_call>"
    )


class EntropyScripted(ScriptedBackend):
    """Scripted replies; entropy log(V) (normalized 1) on turns that follow a tool
    response, 0 on the first turn; log-probs differ per generate call."""

    def __init__(self, tokenizer, script, *, high_after_tool: bool = True) -> None:
        super().__init__(tokenizer, script)
        self.high_after_tool = high_after_tool
        self.sampled_entropy_flags: list[bool] = []

    def generate(self, prompts, sampling, *, stop_token_ids, max_new_tokens=None):
        call_index = self.calls
        completions = super().generate(prompts, sampling, stop_token_ids=stop_token_ids, max_new_tokens=max_new_tokens)
        self.sampled_entropy_flags.append(sampling.return_entropy)
        high = math.log(len(self.tokenizer))
        for prompt, completion in zip(prompts, completions):
            after_tool = TOOL_RESPONSE in self.tokenizer.decode(prompt)
            value = high if (after_tool and self.high_after_tool) else 0.0
            completion.entropies = [value] * len(completion.token_ids) if sampling.return_entropy else None
            completion.logprobs = [-0.1 * (call_index + 1)] * len(completion.token_ids)
        return completions


def task(index: int):
    return make("arithmetic").tasks[index]


def two_turn_script(tokenizer, correct=lambda call_index: call_index <= 1):
    """Turn 1 calls the calculator on the task's expression; after the tool response the
    reply is right when ``correct(generate call index)`` (default: the global samples'
    second turn, call 1) and wrong otherwise (the branches)."""

    def reply(prompt, call_index):
        text = tokenizer.decode(prompt)
        expression = next(task(i).metadata["expression"] for i in range(4) if task(i).metadata["expression"] in text)
        if TOOL_RESPONSE not in text:
            return f"Let me compute.\n{call(expression)}"
        answer = next(task(i).answer for i in range(4) if task(i).metadata["expression"] in text)
        return f"<answer>{answer if correct(call_index) else 'wrong'}</answer>"

    return reply


ALWAYS = dict(base_probability=0.0, entropy_weight=1.0)  # P = dH: 1 at the forced points, 0 elsewhere


def run(tokenizer, *, budget, initial, tasks=(0,), backend=None, make_env=None, **params):
    backend = backend or EntropyScripted(tokenizer, two_turn_script(tokenizer))
    groups, stats = arpo_rollout(
        backend,
        make_env or (lambda: make("arithmetic")),
        list(tasks),
        budget=budget,
        params=ARPOConfig(initial_samples=initial, branches=2, **{**ALWAYS, **params}),
        seed=0,
    )
    return backend, groups, stats


def test_forced_points_branch_and_fill_the_budget_exactly(tokenizer) -> None:
    backend, [group], stats = run(tokenizer, budget=6, initial=2)
    assert all(backend.sampled_entropy_flags)
    metas = [t.info["arpo"] for t in group.trajectories]
    assert len(group.trajectories) == 6
    assert [m["round"] for m in metas] == [0, 0, 1, 1, 1, 1]
    assert [m["branch_turn"] for m in metas] == [None, None, 0, 0, 0, 0]
    assert stats.branches == 4 and stats.branch_points == 2 and stats.filled == 0 and stats.replay_mismatches == 0
    parents = [m["lineage"][0][0] for m in metas[2:]]
    assert parents == [metas[0]["id"]] * 2 + [metas[1]["id"]] * 2
    # globals answered right in sampling call 1, branches wrong in call 2
    assert [t.reward for t in group.trajectories] == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert all(t.group_id == group.group_id for t in group.trajectories)
    metrics = stats.metrics()
    assert metrics["arpo/branches_per_task"] == 4 and metrics["arpo/rounds"] == 2
    # each global made 1 call; a branch's shared call is not counted again, its new turn made none
    assert [own_tool_calls(t) for t in group.trajectories] == [1, 1, 0, 0, 0, 0]
    assert metrics["arpo/tool_calls_per_task"] == 2


def test_shared_prefix_is_bit_identical_and_replay_is_correct(tokenizer) -> None:
    _, [group], _ = run(tokenizer, budget=3, initial=1)
    parent, *branches = group.trajectories
    cut = parent.turns[0].observation_end
    for branch in branches:
        assert branch.info["arpo"]["lineage"] == [[parent.info["arpo"]["id"], cut]]
        assert branch.token_ids[:cut] == parent.token_ids[:cut]
        assert branch.loss_mask[:cut] == parent.loss_mask[:cut]
        assert branch.sampler_logprobs[:cut] == parent.sampler_logprobs[:cut]
        assert branch.token_ids[cut:] != parent.token_ids[cut:]  # the continuation was resampled
        assert branch.sampler_logprobs[cut] == pytest.approx(-0.3)  # from generate call 2 (the branch round)
        assert branch.turns[0] == parent.turns[0] and branch.turns[1].response_start == cut
        # messages: the prefix (with the replayed tool observation) then the branch's own turn
        assert branch.messages[:4] == parent.messages[:4]
        assert branch.messages[4] == {"role": "assistant", "content": "<answer>wrong</answer>"}
        assert branch.termination_reason == "answered" and branch.answer == "wrong" and not branch.correct
        assert (
            len(branch.info["turn_entropies"]) == 2
            and branch.info["turn_entropies"][0] == parent.info["turn_entropies"][0]
        )
    shared = branch_common_prefix(group.trajectories)
    assert shared[0, 1] == cut and shared[1, 2] == cut and shared[0, 0] == len(parent.token_ids)


def test_budget_cuts_branching_mid_group(tokenizer) -> None:
    _, [group], stats = run(tokenizer, budget=5, initial=2)
    assert len(group.trajectories) == 5
    assert stats.branches == 3  # 2 from the first global, 1 from the second
    assert [len(t.info["arpo"]["lineage"]) for t in group.trajectories] == [0, 0, 1, 1, 1]


def test_low_entropy_means_no_branches_and_global_fill(tokenizer) -> None:
    backend = EntropyScripted(tokenizer, two_turn_script(tokenizer), high_after_tool=False)
    _, groups, stats = run(tokenizer, budget=4, initial=2, tasks=(0, 1), backend=backend)
    assert [len(g.trajectories) for g in groups] == [4, 4]
    assert stats.branches == 0 and stats.filled == 4 and stats.branch_points == 4
    for group in groups:
        assert all(not t.info["arpo"]["lineage"] for t in group.trajectories)
        assert len({t.task_id for t in group.trajectories}) == 1
    assert branch_common_prefix([t for g in groups for t in g.trajectories]) is None


def test_branches_of_branches_in_later_rounds(tokenizer) -> None:
    """Two tool calls per episode: branches made after the first call have their own
    second-call point, examined in round 2."""

    def reply(prompt, call_index):
        text = tokenizer.decode(prompt)
        calls = text.count(TOOL_RESPONSE)
        if calls < 2:
            return call(task(0).metadata["expression"])
        return f"<answer>{task(0).answer}</answer>"

    backend = EntropyScripted(tokenizer, reply)
    _, [group], stats = run(tokenizer, budget=9, initial=1, backend=backend)
    rounds = [t.info["arpo"]["round"] for t in group.trajectories]
    assert len(group.trajectories) == 9 and stats.filled == 0
    # round 1: the global branches at its 2 points (2 + 2); round 2: the 2 branches made
    # after the first call branch at their second-call point until the budget (4 left) is spent
    assert rounds == [0, 1, 1, 1, 1, 2, 2, 2, 2]
    depth_two = [t for t in group.trajectories if len(t.info["arpo"]["lineage"]) == 2]
    assert len(depth_two) == 4
    for t in depth_two:
        (parent_id, shared_parent), (root_id, shared_root) = t.info["arpo"]["lineage"]
        parent = next(p for p in group.trajectories if p.info["arpo"]["id"] == parent_id)
        assert t.token_ids[:shared_parent] == parent.token_ids[:shared_parent]
        assert shared_root < shared_parent and root_id == group.trajectories[0].info["arpo"]["id"]


class FlakyToolEnv:
    """Arithmetic whose tool observation changes on every env instance: replay never matches."""

    instances = 0

    def __new__(cls):
        env = make("arithmetic")
        FlakyToolEnv.instances += 1
        stamp = FlakyToolEnv.instances
        step = env.step

        def flaky_step(message):
            observations, *rest = step(message)
            return [dict(m, content=m["content"] + f" #{stamp}") for m in observations], *rest

        env.step = flaky_step
        return env


def test_replay_mismatch_skips_the_branch_and_fills(tokenizer) -> None:
    _, [group], stats = run(tokenizer, budget=4, initial=2, make_env=FlakyToolEnv)
    assert stats.replay_mismatches == 2 + 2 and stats.branches == 0  # Z=2 tries at each of 2 points
    assert stats.filled == 2 and len(group.trajectories) == 4


def test_initial_samples_beyond_budget_is_an_error(tokenizer) -> None:
    with pytest.raises(ValueError, match="initial_samples"):
        run(tokenizer, budget=2, initial=3)


# ----------------------------------------------------------------- in the trainer


def _tiny_arpo_config(arpo=None, **overrides):
    from agentic_rl.config import TrainConfig
    from agentic_rl.recipes import load_recipe

    _, data = load_recipe("arpo")
    data.update(
        model={"name": "tiny-random", "device": "cpu"},
        rollout={"max_new_tokens": 12, "max_total_tokens": 512},
        sft={"enabled": False},
        eval={"num_tasks": 2},
        optim={"lr": 1e-3},
        tracking={"sinks": [], "report": False},
    )
    data["rl"] = {
        **data["rl"],
        "steps": 2,
        "tasks_per_step": 2,
        "group_size": 4,
        "task_offset": 0,
        "arpo": arpo if arpo is not None else {**data["rl"]["arpo"], "initial_samples": 2},
    }
    data.update(overrides)
    return TrainConfig.model_validate(data)


def test_arpo_recipe_runs_two_steps_on_the_tiny_model(tmp_path) -> None:
    import torch

    from agentic_rl.training.pipeline import train

    torch.set_num_threads(1)
    result = train(_tiny_arpo_config(output_dir=str(tmp_path / "run")), name="arpo")
    assert len(result.steps) == 2
    for metrics in result.steps:
        # the random model rarely calls a tool well: whatever branching left is filled
        assert metrics["arpo/branches_per_task"] + metrics["arpo/fill_per_task"] == 2
        assert metrics["arpo/rounds"] >= 2 and "arpo/tool_calls_per_task" in metrics


def test_trainer_with_forced_branches_and_hard_attribution(tiny, tokenizer) -> None:
    """The trainer's step samples with ARPO (scripted entropies force branching) and hard
    attribution gives every token of a shared prefix one advantage."""
    import copy

    import torch

    from agentic_rl.training.rl import RLTrainer
    from agentic_rl.training.scoring import score

    torch.set_num_threads(1)
    config = _tiny_arpo_config(
        arpo={"initial_samples": 2, "base_probability": 0.0, "entropy_weight": 1.0, "attribution": "hard"}
    )
    model = copy.deepcopy(tiny[0])
    # each step makes 3 generate calls: first turns, globals' answers (right), branches' answers (wrong)
    backend = EntropyScripted(tokenizer, two_turn_script(tokenizer, correct=lambda call_index: call_index % 3 == 1))
    trainer = RLTrainer(config, model, tokenizer, backend, lambda: make("arithmetic"), [0, 1, 2, 3])
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    for _ in range(2):
        metrics, groups = trainer.step()
        assert metrics["arpo/branches_per_task"] == 2 and [len(g.trajectories) for g in groups] == [4, 4]
        assert metrics["reward_std"] > 0
    assert any(not torch.equal(p, before[name]) for name, p in model.named_parameters())
    scored = score(
        groups,
        config.algorithm,
        max_total_tokens=config.rollout.max_total_tokens,
        attribution=config.rl.arpo.attribution,
        reward=config.reward,
    )
    for group in groups:
        rows = [scored.trajectories.index(t) for t in group.trajectories]
        shared = branch_common_prefix(group.trajectories)
        for i, a in enumerate(rows):
            for j, b in enumerate(rows):
                cut = int(shared[i, j])
                assert scored.advantages[a][:cut] == scored.advantages[b][:cut]
        # a branch's own continuation keeps its own advantage, which differs from its parent's
        parent, branch = group.trajectories[0], group.trajectories[2]
        cut = int(shared[0, 2])
        assert scored.advantages[rows[0]][cut] != scored.advantages[rows[2]][cut] or parent.reward == branch.reward
