"""Ray rollout workers (distributed.engine: ray) on a one-machine Ray cluster: sync mode
equals the single-process trainer, async mode keeps staleness within max_staleness while a
slow group is overtaken, and a SIGKILLed worker costs only its own trajectories."""

from __future__ import annotations

import copy
import os
import signal
import threading
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from agentic_rl.config import TrainConfig  # noqa: E402
from agentic_rl.distributed.ray_rollouts import RayRollouts  # noqa: E402
from agentic_rl.engines.hf import HFBackend  # noqa: E402
from agentic_rl.envs.registry import env_factory  # noqa: E402
from agentic_rl.training.rl import RLTrainer  # noqa: E402

HERE = Path(__file__).parent
ENV = "ray_envs:ParityEnv"  # importable by the workers: this folder is on their PYTHONPATH


@pytest.fixture(scope="module", autouse=True)
def ray_cluster():
    """One local Ray for the module (2 CPUs, as the machine has), torch on one thread."""
    os.environ["RAY_AUTH_MODE"] = "disabled"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        logging_level="WARNING",
        runtime_env={"env_vars": {"PYTHONPATH": str(HERE), "OMP_NUM_THREADS": "1"}},
    )
    yield
    ray.shutdown()
    torch.set_num_threads(threads)


def _config(env_options=None, rl=None, **overrides) -> TrainConfig:
    data = {
        "model": {"name": "tiny-random", "device": "cpu"},
        "env": {"name": ENV, **(env_options or {})},
        "precision": "fp32",
        "rollout": {"max_new_tokens": 12, "max_total_tokens": 256},
        "rl": {"steps": 3, "tasks_per_step": 4, "group_size": 4, **(rl or {})},
        "optim": {"lr": 1e-3},
    }
    data.update(overrides)
    return TrainConfig.model_validate(data)


def _trainer(tiny, config: TrainConfig, rollouts=None) -> RLTrainer:
    model, tokenizer = tiny
    model = copy.deepcopy(model)
    make_env = env_factory(config.env.name, config.env.options, split="train")
    backend = rollouts(model) if rollouts is not None else HFBackend(model, tokenizer)
    return RLTrainer(config, model, tokenizer, backend, make_env, list(range(64)))


def test_sync_mode_equals_the_single_process_trainer(tiny) -> None:
    """Two workers, the same seed: the same tokens, rewards and update as one process."""
    local = _trainer(tiny, _config())
    config = _config(distributed={"engine": "ray", "rollout_workers": 2})
    remote = _trainer(tiny, config, lambda model: RayRollouts(config, model))
    try:
        for step in range(2):
            (expected, expected_groups), (got, got_groups) = local.step(), remote.step()
            assert [t.token_ids for g in got_groups for t in g.trajectories] == [
                t.token_ids for g in expected_groups for t in g.trajectories
            ]
            # The workers' envs get the training step at reset, as the trainer's own do (ZeroSearch's schedule reads it).
            assert {t.info["training_step"] for g in got_groups + expected_groups for t in g.trajectories} == {step}
            assert got["reward_mean"] == expected["reward_mean"]
            assert expected["grad_norm"] > 0
            for key in ("loss", "grad_norm", "entropy", "kl_mean"):
                if key in expected:
                    assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
            assert got["rollout_logprob_diff_max"] < 1e-4  # the workers' copies equal the trainer's weights
        # AdamW divides each gradient by its own running scale: an element whose gradient is
        # near zero moves by a visible fraction of lr on float32 rounding (bound: 5% of lr,
        # as in test_parity.py).
        for name, parameter in local.model.named_parameters():
            torch.testing.assert_close(remote.model.state_dict()[name], parameter, rtol=0, atol=5e-5)
        assert sorted(w["weight_version"] for w in remote.backend.info()) in ([1, 1], [2, 2])  # staged at the next step
    finally:
        remote.backend.close()


def test_async_mode_bounds_staleness_and_overtakes_a_slow_group(tiny) -> None:
    """max_staleness 1, task 0's group 15x slower than the others: three steps complete,
    no group handed over is staler than 1, and the slow group does not hold the first step."""
    config = _config(
        {"slow_tasks_every": 64, "slow_s": 3.0, "step_s": 0.2},
        distributed={"engine": "ray", "rollout_workers": 2, "max_staleness": 1},
    )
    trainer = _trainer(tiny, config, lambda model: RayRollouts(config, model))
    try:
        seen = []
        for _ in range(3):
            metrics, groups = trainer.step()
            seen.append([g.task_id for g in groups])
            assert metrics["staleness_max"] <= 1
            assert metrics["staleness_0"] + metrics["staleness_1"] == pytest.approx(1.0)
            # A group sampled ahead carries the step of the weights it was requested under:
            # never later than this step, nor than the weights that sampled it.
            for trajectory in (t for g in groups for t in g.trajectories):
                assert isinstance(trajectory.info["training_step"], int)
                assert trajectory.info["training_step"] <= min(metrics["step"], *trajectory.weight_versions)
        assert "parity-0" not in seen[0]  # overtaken: the step took groups that finished first
        assert any(m > 0 for m in [metrics["groups_in_flight"]])
        assert trainer.rollout_correction == "tis"
    finally:
        trainer.close()
        trainer.backend.close()


def test_killed_worker_costs_only_its_trajectories(tiny) -> None:
    """A worker SIGKILLed mid-step: its groups come back as infrastructure errors (out of the
    loss, counted), the step updates on the rest, Ray restarts the worker, and the next step
    has no errors (the new worker caught up with the weights)."""
    config = _config(
        {"step_s": 2.0}, distributed={"engine": "ray", "rollout_workers": 2}, rl={"max_failed_fraction": 0.5}
    )
    trainer = _trainer(tiny, config, lambda model: RayRollouts(config, model))
    try:
        before = trainer.backend.info()
        victim = before[0]["pid"]
        threading.Timer(1.0, os.kill, (victim, signal.SIGKILL)).start()
        metrics, groups = trainer.step()
        failed = [g for g in groups if all(t.infra_error for t in g.trajectories)]
        assert len(failed) == 2  # positions 0 and 2 ran on worker 0
        assert all("rollout worker failed" in t.infra_error for g in failed for t in g.trajectories)
        assert metrics["infra_errors"] == 8 and metrics["skipped_infra"] == 0
        assert metrics["grad_norm"] > 0  # the update ran on the other worker's groups
        metrics, groups = trainer.step()
        assert metrics["infra_errors"] == 0, {t.infra_error for g in groups for t in g.trajectories}
        assert {v for g in groups for t in g.trajectories for v in t.weight_versions} == {
            1
        }  # the restarted worker sampled with step 1's weights
        assert trainer.backend.info()[0]["pid"] != victim
    finally:
        trainer.backend.close()


def test_memory_stores_live_in_the_workers_and_come_back_per_worker(tiny) -> None:
    """env.memory: shared under Ray: each worker keeps the notes of the episodes it ran; a
    checkpoint's per-worker states go back to the same workers, and a different worker
    count is refused with the count to resume with (no notes silently dropped or merged)."""
    from agentic_rl.training.run_checkpoints import restore_memory

    config = _config(distributed={"engine": "ray", "rollout_workers": 2}, env={"name": "ray_envs:NoteTakingEnv"})
    rollouts = RayRollouts(config, copy.deepcopy(tiny[0]))
    try:
        rollouts.rollout([0, 1, 2, 3], group_size=1, seed=0)  # task position p runs on worker p mod 2
        saved = rollouts.memory_state()
        keys = [
            sorted(key for store in worker if store["name"] == "ray-notes" for key, _ in store["notes"])
            for worker in saved
        ]
        assert keys == [["task-0", "task-2"], ["task-1", "task-3"]]
        restore_memory(
            rollouts, {"worker_memory": saved[::-1]}, ray_workers=True
        )  # swapped: worker 0 gets worker 1's notes
        keys = [
            sorted(key for store in worker if store["name"] == "ray-notes" for key, _ in store["notes"])
            for worker in rollouts.memory_state()
        ]
        assert keys == [["task-1", "task-3"], ["task-0", "task-2"]]
        with pytest.raises(
            ValueError,
            match=r"memory stores of 1 rollout worker\(s\) and this run has 2; resume with distributed.rollout_workers: 1",
        ):
            rollouts.load_memory(saved[:1])
        # A checkpoint of an in-process run: every worker starts from its notes.
        single = [
            {
                "name": "ray-notes",
                "caps": {"max_notes": 16},
                "notes": [["hint", "h"]],
                "next_auto_key": 0,
                "evictions": 0,
            }
        ]
        restore_memory(rollouts, {"memory": single}, ray_workers=True)
        assert [
            [key for store in worker if store["name"] == "ray-notes" for key, _ in store["notes"]]
            for worker in rollouts.memory_state()
        ] == [["hint"], ["hint"]]
    finally:
        rollouts.close()


def test_worker_memory_resumed_without_ray_needs_one_worker() -> None:
    """A Ray run's worker memory resumed in one process: one worker's notes load into the
    process, several workers' notes are refused (no faithful merge)."""
    from agentic_rl.tools.memory_store import shared_store
    from agentic_rl.training.run_checkpoints import restore_memory

    state = {
        "name": "ray-notes-local",
        "caps": {"max_notes": 4},
        "notes": [["k", "v"]],
        "next_auto_key": 0,
        "evictions": 0,
    }
    restore_memory(object(), {"worker_memory": [[state]]}, ray_workers=False)
    assert shared_store("ray-notes-local", max_notes=4).read("k") == "v"
    with pytest.raises(
        ValueError,
        match="memory stores of 2 Ray rollout workers; resume with distributed.engine: ray and rollout_workers: 2",
    ):
        restore_memory(object(), {"worker_memory": [[state], [state]]}, ray_workers=False)
