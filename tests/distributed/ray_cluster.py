"""A real two-node Ray cluster on one machine, for tests: the head node in one network
namespace, a worker node in another, joined by a veth pair (10.213.0.1 <-> 10.213.0.2), as
two hosts that share nothing but the file system.

    with two_node_ray_cluster({"rollout": 2}) as cluster:
        cluster.run_in_head([sys.executable, "driver.py", cluster.address], check=True)

The cluster is reachable only from inside the head namespace, so a test's driver must run
there (``run_in_head``). Needs root and iproute2; without them the test is skipped.

Teardown kills the processes *inside the two namespaces* (``ip netns pids``) instead of
running ``ray stop --force``: ``ray stop`` is not namespace-aware, it kills every Ray
process on the machine by name, a concurrent local ``ray.init()`` included.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

HEAD_IP, WORKER_IP, PORT = "10.213.0.1", "10.213.0.2", 6379
_counter = itertools.count()

# Polls the GCS from inside the head namespace until `expected` nodes are alive.
_WAIT_FOR_NODES = """
import sys, time
from ray._raylet import GcsClient
address, expected, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
client, alive = GcsClient(address=address), -1
while time.monotonic() < deadline:
    try:
        alive = sum(info.state == 0 for info in client.get_all_node_info(timeout=5).values())  # 0: ALIVE
    except Exception as error:  # GCS not answering yet
        alive = f"error: {error}"
    if alive == expected:
        sys.exit(0)
    time.sleep(0.2)
sys.exit(f"{alive} alive nodes, expected {expected}")
"""


@dataclass
class RayCluster:
    address: str
    head_ns: str
    worker_ns: str
    head_ip: str
    worker_ip: str
    env: dict[str, str]
    temp_dir: Path

    def run_in_head(self, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        """``subprocess.run(argv, **kwargs)`` inside the head namespace, with the cluster's
        environment (``env=`` entries are added to it)."""
        kwargs["env"] = {**self.env, **(kwargs.get("env") or {})}
        return subprocess.run(["ip", "netns", "exec", self.head_ns, *map(str, argv)], **kwargs)  # noqa: PLW1510


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def _ray() -> list[str]:
    script = Path(sys.executable).with_name("ray")
    return [str(script)] if script.exists() else [sys.executable, "-m", "ray.scripts.scripts"]


def _kill_namespace_processes(ns: str, timeout: float = 15.0) -> None:
    """SIGKILL every process whose network namespace is `ns` (ours only: nothing else runs
    there), until none is left; then wait until they are dead (`ray start` daemonizes:
    they are init's children, not ours, and init reaps them)."""
    deadline, killed = time.monotonic() + timeout, set()
    while time.monotonic() < deadline:
        listed = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=30, check=False)
        pids = [int(pid) for pid in listed.stdout.split()] if listed.returncode == 0 else []
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    gone = time.monotonic() + 3  # dead = exited, or a zombie (holds nothing) that init reaps later
    while time.monotonic() < gone and any(_running(pid) for pid in killed):
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


@contextmanager
def two_node_ray_cluster(
    worker_resources: dict[str, float],
    worker_cpus: int = 1,
    head_cpus: int = 1,
    object_store_bytes: int = 100 * 1024 * 1024,
    timeout: float = 60.0,
) -> Iterator[RayCluster]:
    tag = f"{os.getpid() % 100000}{next(_counter)}"
    head_ns, worker_ns = f"rayh{tag}", f"rayw{tag}"
    devices = (f"rayvh{tag}", f"rayvw{tag}")  # <= 15 chars (IFNAMSIZ)
    # Short: Ray's AF_UNIX sockets live under it and their paths are limited to 107 chars.
    temp_dir = Path(tempfile.mkdtemp(prefix="rc", dir="/tmp" if os.path.isdir("/tmp") else None))
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_ADDRESS")}
    # RAY_AUTH_MODE explicit: left unset, a head node turns token auth on whenever ~/.ray/auth_token
    # exists (a local ray.init() writes one) while a joining worker does not, and is refused.
    env.update(RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", OMP_NUM_THREADS="1")

    with ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, temp_dir, ignore_errors=True)
        try:
            _ip("netns", "add", head_ns)
        except (OSError, subprocess.CalledProcessError) as error:
            detail = getattr(error, "stderr", "") or error
            pytest.skip(f"network namespaces unavailable ({detail}): needs root and iproute2")
        for ns in (head_ns, worker_ns):
            # LIFO: processes are killed before the namespaces are deleted (which removes the veth).
            cleanup.callback(subprocess.run, ["ip", "netns", "del", ns], capture_output=True, timeout=30)
            cleanup.callback(_kill_namespace_processes, ns)
        _ip("netns", "add", worker_ns)
        # Only left in the root namespace when a step below failed; deleting one end removes both.
        cleanup.callback(subprocess.run, ["ip", "link", "del", devices[0]], capture_output=True, timeout=30)
        _ip("link", "add", devices[0], "type", "veth", "peer", "name", devices[1])
        for ns, device, address in zip((head_ns, worker_ns), devices, (HEAD_IP, WORKER_IP)):
            _ip("link", "set", device, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", device)
            _ip("-n", ns, "link", "set", device, "up")
            _ip("-n", ns, "link", "set", "lo", "up")

        def start(ns: str, *args: str) -> None:
            command = [
                "ip",
                "netns",
                "exec",
                ns,
                *_ray(),
                "start",
                "--disable-usage-stats",
                "--object-store-memory",
                str(object_store_bytes),
                *args,
            ]
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)
            if done.returncode != 0:
                raise RuntimeError(
                    f"`ray start` failed in {ns} ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
                )

        address = f"{HEAD_IP}:{PORT}"
        # One after the other: started together (2 cores) they come up slower, the worker backing off.
        start(
            head_ns,
            "--head",
            "--node-ip-address",
            HEAD_IP,
            "--port",
            str(PORT),
            "--num-cpus",
            str(head_cpus),
            "--include-dashboard=false",
            "--temp-dir",
            str(temp_dir / "h"),
        )
        start(
            worker_ns,
            "--address",
            address,
            "--node-ip-address",
            WORKER_IP,
            "--num-cpus",
            str(worker_cpus),
            "--resources",
            json.dumps(worker_resources),
            "--temp-dir",
            str(temp_dir / "w"),
        )
        cluster = RayCluster(address, head_ns, worker_ns, HEAD_IP, WORKER_IP, env, temp_dir)
        waited = cluster.run_in_head(
            [sys.executable, "-c", _WAIT_FOR_NODES, address, "2", str(timeout)],
            capture_output=True,
            text=True,
            timeout=timeout + 30,
        )
        if waited.returncode != 0:
            raise RuntimeError(f"the cluster did not come up with 2 alive nodes: {waited.stderr[-3000:]}")
        yield cluster
