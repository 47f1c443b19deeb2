"""Sharded checkpoints (torch.distributed.checkpoint) for trainers whose weights and
optimizer state are sharded over ranks (FSDP2).

Every rank writes its own shards of the weights and the AdamW state into ``sharded/`` of
the checkpoint folder; rank 0 adds ``trainer.pt`` (the trainer's other state and the RNG
states), ``state.json`` and the completion mark, and renames the folder into place: the
same folder layout and atomicity as the one-process checkpoints (training/checkpoint.py).
torch.distributed.checkpoint reshards on load, so such a checkpoint resumes on any number
of ranks, and in one process. A write that fails on any rank (a full disk) stops every
rank with the same one-line CheckpointError, removes the temporary folder and keeps the
previous checkpoints, as in one process.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentic_rl.distributed import DistContext
from agentic_rl.training.checkpoint import CheckpointError, publish_checkpoint, writing_checkpoint

SHARDED = "sharded"


def is_sharded(folder: Path) -> bool:
    """Whether the checkpoint ``folder`` holds sharded weights and optimizer state."""
    return (folder / SHARDED).is_dir()


def _states(model, optimizer, critic=None) -> dict[str, Any]:
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optimizer_state = get_state_dict(model, optimizer)
    states = {"model": model_state, "optimizer": optimizer_state}
    if critic is not None:
        states["critic"], states["critic_optimizer"] = get_state_dict(critic.module, critic.optimizer)
    return states


def save_sharded_checkpoint(
    root: Path,
    step: int,
    *,
    model,
    optimizer,
    trainer_state: dict[str, Any],
    info: dict[str, Any],
    keep: int,
    dist: DistContext,
    critic=None,
) -> Path:
    """Every rank: write ``root/step-<step>`` (see the module docstring) and prune to the
    newest ``keep`` complete checkpoints. ``trainer_state`` must not hold the optimizers.
    ``critic``: the trainer's Critic (its weights and optimizer are sharded in too)."""
    import torch.distributed.checkpoint as dcp

    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}-sharded"

    def prepare() -> None:
        with writing_checkpoint(tmp, step):
            root.mkdir(parents=True, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()

    _on_main(dist, prepare)  # the other ranks write into tmp only once it exists
    with writing_checkpoint(tmp, step):
        try:
            dcp.save(_states(model, optimizer, critic), checkpoint_id=str(tmp / SHARDED))
        except dcp.CheckpointException as failed:
            # DCP gathers each rank's write error into this exception, raised on every rank
            # (a BaseException, with a multi-line traceback as its text): any rank's OSError
            # becomes the same one-line CheckpointError everywhere.
            os_errors = [error for error, _ in failed.failures.values() if isinstance(error, OSError)]
            if not os_errors:
                raise
            raise os_errors[0] from None
    _on_main(dist, lambda: publish_checkpoint(tmp, final, step=step, trainer_state=trainer_state, info=info, keep=keep))
    return final


def _on_main(dist: DistContext, action: Callable[[], Any]) -> None:
    """Run ``action`` on rank 0; its CheckpointError stops every rank with the same line
    (the others would otherwise wait for rank 0 at the next collective until the timeout)."""
    error = None
    if dist.is_main:
        try:
            action()
        except CheckpointError as failed:
            error = str(failed)
    error = dist.broadcast_object(error)  # also the barrier the next step needs
    if error is not None:
        raise CheckpointError(error)


def load_sharded_weights(folder: Path, *, model, optimizer, critic=None) -> None:
    """Load a sharded checkpoint's weights and optimizer state into ``model`` and
    ``optimizer`` (and ``critic``'s), however they are sharded now (several ranks, or one process)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    states = _states(model, optimizer, critic)
    dcp.load(states, checkpoint_id=str(folder / SHARDED))
    set_state_dict(model, optimizer, model_state_dict=states["model"], optim_state_dict=states["optimizer"])
    if critic is not None:
        set_state_dict(
            critic.module,
            critic.optimizer,
            model_state_dict=states["critic"],
            optim_state_dict=states["critic_optimizer"],
        )
