"""A full disk on one rank while the shards are written: every rank stops with the same
one-line CheckpointError (none waits for the others until the collective timeout), the
temporary folder is gone and the previous checkpoint is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

WORKER = textwrap.dedent("""
    import errno, json, sys
    from pathlib import Path

    import torch
    import torch.distributed.checkpoint.filesystem as dcp_filesystem

    from agentic_rl.distributed import init_distributed, shutdown
    from agentic_rl.training.checkpoint import CheckpointError
    from agentic_rl.training.sharded_checkpoint import save_sharded_checkpoint

    root, out = Path(sys.argv[1]), Path(sys.argv[2])
    dist = init_distributed(60.0)
    torch.manual_seed(0)
    # Several tensors (weights and AdamW moments), so each rank has shard items to write.
    model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(4)))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(2, 16)).sum().backward()
    optimizer.step()
    save = lambda step: save_sharded_checkpoint(root, step, model=model, optimizer=optimizer, trainer_state={"step": step}, info={}, keep=3, dist=dist)
    save(1)
    writes = []
    real = dcp_filesystem._write_item

    def write_item(*args, **kwargs):
        writes.append(1)
        if dist.rank == 1:  # only this rank's disk is full
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    dcp_filesystem._write_item = write_item
    try:
        save(2)
        outcome = "written"
    except CheckpointError as error:
        outcome = str(error)
    out.with_suffix(f".{dist.rank}.json").write_text(json.dumps({"outcome": outcome, "writes": len(writes)}))
    shutdown()
""")


def test_a_full_disk_on_one_rank_stops_every_rank_with_one_line(tmp_path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    root, out = tmp_path / "checkpoints", tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(script),
        str(root),
        str(out),
    ]
    start = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert time.monotonic() - start < 55  # nobody waited out the 60 s collective timeout
    results = [json.loads(out.with_suffix(f".{rank}.json").read_text()) for rank in (0, 1)]
    assert results[1]["writes"] >= 1  # rank 1 did try to write its shards
    outcomes = {result["outcome"] for result in results}
    assert len(outcomes) == 1, outcomes
    message = outcomes.pop()
    assert (
        "\n" not in message
        and message.startswith("checkpoint step 2 not written: the disk is full")
        and "step-000001 is kept" in message
    )
    assert sorted(p.name for p in root.iterdir()) == ["step-000001"]
