"""The trainer group on Ray: ``agentic-rl train --nproc N`` with ``distributed.engine: ray``
runs the N trainer ranks as Ray actors instead of torchrun processes.

The ranks are placed as one placement group (``distributed.trainer_cpus`` /
``trainer_gpus`` per rank, packed onto as few nodes as fit), rank 0's actor picks the
rendezvous address, and every actor runs the same ``agentic-rl train`` command with the
variables torchrun would set (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``) in a child process: from there it is the torch.distributed trainer (DDP or FSDP2), and rank
0 also holds the rollout workers. A rank that fails ends the others.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from typing import Any

from agentic_rl.config import ConfigError
from agentic_rl.distributed.ray_rollouts import connect, import_ray

PLACEMENT_TIMEOUT_S = 300.0
"""How long the trainer group may wait for its resources before the run fails."""


class TrainerRank:
    """One trainer rank: a Ray actor holding the rank's resources that runs the train
    command as its child process (killed with the actor: PR_SET_PDEATHSIG)."""

    def node(self) -> str:
        import ray

        return ray.util.get_node_ip_address()

    def free_port(self) -> int:
        with socket.socket() as probe:
            probe.bind(("", 0))
            return probe.getsockname()[1]

    def run(self, argv: list[str], environment: dict[str, str]) -> int:
        return subprocess.run(
            [sys.executable, "-m", "agentic_rl", *argv], env={**os.environ, **environment}, preexec_fn=_die_with_parent
        ).returncode


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the actor process dies (Linux), so a killed
    trainer group leaves no rank behind."""
    import ctypes
    import signal

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1


def rank_environments(nodes: list[str], port: int, *, gpus: bool) -> list[dict[str, str]]:
    """torchrun's variables for ranks on ``nodes`` (one entry per rank, rank 0 first); with
    GPUs Ray shows each actor only its own GPU, so every rank's local device is 0."""
    seen: dict[str, int] = {}
    environments = []
    for rank, node in enumerate(nodes):
        local = seen.get(node, 0)
        seen[node] = local + 1
        environments.append(
            {
                "RANK": str(rank),
                "WORLD_SIZE": str(len(nodes)),
                "LOCAL_RANK": "0" if gpus else str(local),
                "MASTER_ADDR": nodes[0],
                "MASTER_PORT": str(port),
            }
        )
    for environment, node in zip(environments, nodes):
        environment["LOCAL_WORLD_SIZE"] = "1" if gpus else str(seen[node])
    return environments


def launch_trainers(argv: list[str], nproc: int, settings: Any) -> int:
    """Run ``agentic-rl`` + ``argv`` (without --nproc) as ``nproc`` trainer ranks on Ray;
    returns the exit code (the first failing rank's, else 0)."""
    ray = import_ray()
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    owns = connect(settings.ray_address, log_to_driver=True)
    bundle = {"CPU": settings.trainer_cpus, **({"GPU": settings.trainer_gpus} if settings.trainer_gpus else {})}
    group = placement_group([bundle] * nproc, strategy="PACK")
    actors = []
    try:
        ready, _ = ray.wait([group.ready()], timeout=PLACEMENT_TIMEOUT_S)
        if not ready:
            raise ConfigError(
                f"--nproc {nproc}: the Ray cluster did not offer {nproc} x {bundle} for the trainer ranks within {PLACEMENT_TIMEOUT_S:g} s (distributed.trainer_cpus / trainer_gpus)"
            )
        remote = ray.remote(TrainerRank)
        actors = [
            remote.options(
                num_cpus=settings.trainer_cpus,
                num_gpus=settings.trainer_gpus or None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank),
            ).remote()
            for rank in range(nproc)
        ]
        nodes = ray.get([actor.node.remote() for actor in actors])
        port = ray.get(actors[0].free_port.remote())
        runs = {
            actor.run.remote(argv, environment): rank
            for rank, (actor, environment) in enumerate(
                zip(actors, rank_environments(nodes, port, gpus=bool(settings.trainer_gpus)))
            )
        }
        code = 0
        pending = list(runs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            try:
                result = ray.get(done[0])
            except ray.exceptions.RayError as error:
                lines = str(error).strip().splitlines()
                print(
                    f"trainer rank {runs[done[0]]} failed: {lines[-1] if lines else type(error).__name__}", flush=True
                )
                result = 1
            if result and not code:
                code = int(result)
                for actor in actors:  # a rank that failed leaves the others waiting in a collective
                    ray.kill(actor, no_restart=True)
        return code
    finally:
        for actor in actors:
            ray.kill(actor, no_restart=True)
        remove_placement_group(group)
        if owns:
            ray.shutdown()
