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
        done = cluster.run_in_head([sys.executable, str(driver), cluster.address, cluster.head_ip],
                                   capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("ACTOR ", "TASK ", "NODES ")))
    assert lines["ACTOR"] == cluster.worker_ip
    assert lines["TASK"] == cluster.head_ip
    assert lines["NODES"] == str(sorted([cluster.head_ip, cluster.worker_ip]))
