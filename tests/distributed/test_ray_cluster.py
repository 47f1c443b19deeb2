"""The two-node Ray cluster helper (ray_cluster.py): an actor that asks for the worker's
custom resource is placed on the worker node, a task without it runs on the head."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("ray")

# tests/distributed is on sys.path (no __init__.py): pytest's rootdir-relative import
from ray_cluster import two_node_ray_cluster

DRIVER = """
import sys
import ray

address, head_ip = sys.argv[1], sys.argv[2]
ray.init(address=address, logging_level="WARNING", log_to_driver=False)


@ray.remote(num_cpus=0.5, resources={"rollout": 1})
class Rollout:
    def node_ip(self) -> str:
        return ray.util.get_node_ip_address()


@ray.remote(num_cpus=0.5)
def node_ip() -> str:
    return ray.util.get_node_ip_address()


print("ACTOR", ray.get(Rollout.remote().node_ip.remote(), timeout=60))
# Plain task, no custom resource; pinned to the head through its built-in `node:<ip>` resource.
print("TASK", ray.get(node_ip.options(resources={f"node:{head_ip}": 0.001}).remote(), timeout=60))
print("NODES", sorted(n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]))
ray.shutdown()
"""


@pytest.mark.slow
def test_actor_with_worker_resource_runs_on_worker_node(tmp_path) -> None:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    with two_node_ray_cluster({"rollout": 2}) as cluster:
        done = cluster.run_in_head(
            [sys.executable, str(driver), cluster.address, cluster.head_ip], capture_output=True, text=True, timeout=120
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = dict(
        line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("ACTOR ", "TASK ", "NODES "))
    )
    assert lines["ACTOR"] == cluster.worker_ip
    assert lines["TASK"] == cluster.head_ip
    assert lines["NODES"] == str(sorted([cluster.head_ip, cluster.worker_ip]))


def _recipe(path, address: str) -> None:
    import yaml

    path.write_text(
        yaml.safe_dump(
            {
                "description": "two-node ray test",
                "model": {"name": "tiny-random", "device": "cpu"},
                "precision": "fp32",
                "env": {"name": "arithmetic", "max_turns": 2},
                "rollout": {"max_new_tokens": 8, "max_total_tokens": 512},
                "eval": {"num_tasks": 2},
                "optim": {"lr": 1e-3},
                "rl": {"steps": 2, "tasks_per_step": 2, "group_size": 2},
                "checkpoint_every": 0,
                "distributed": {
                    "engine": "ray",
                    "ray_address": address,
                    "rollout_workers": 2,
                    "worker_cpus": 0.5,
                    "worker_resources": {"rollout": 1},
                },
            }
        )
    )


@pytest.mark.slow
def test_training_run_places_rollout_workers_on_the_second_node(tmp_path) -> None:
    """`agentic-rl train` on the head node of a two-node cluster: its rollout workers (which
    ask for the worker node's `rollout` resource) run there, and the run completes."""
    import json

    recipe = tmp_path / "recipe.yaml"
    with two_node_ray_cluster({"rollout": 2}, worker_cpus=1, head_cpus=1) as cluster:
        _recipe(recipe, cluster.address)
        done = cluster.run_in_head(
            [sys.executable, "-m", "agentic_rl", "train", str(recipe), "--output-dir", str(tmp_path / "run")],
            capture_output=True,
            text=True,
            timeout=600,
            env={"OMP_NUM_THREADS": "1"},
        )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"rollout workers ready on {cluster.worker_ip}" in done.stdout + done.stderr
    steps = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and all(step["infra_errors"] == 0 for step in steps)
