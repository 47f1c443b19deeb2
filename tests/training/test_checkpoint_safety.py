"""Checkpoints that cannot run code, survive corruption and a full disk."""

from __future__ import annotations

import errno
import logging
import random

import numpy as np
import pytest
import torch

from agentic_rl.training import checkpoint as checkpoint_module
from agentic_rl.training.checkpoint import (
    CheckpointError,
    complete_checkpoints,
    load_checkpoint,
    save_checkpoint,
    usable_checkpoint,
)


def _trainer_state(model, step: int) -> dict:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    optimizer.step()
    optimizer.zero_grad()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    return {
        "step": step,
        "task_schedule": {"epoch": 0, "position": step},
        "response_length_history": [1.5, 2.0],
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }


def _write(root, model, steps=(1, 2)) -> None:
    for step in steps:
        save_checkpoint(
            root, step, model=model, trainer_state=_trainer_state(model, step), info={"tracking": {}}, keep=3
        )


def test_trainer_state_round_trips_through_weights_only_load(tmp_path, tiny) -> None:
    model, _ = tiny
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    _write(tmp_path, model, steps=(1,))
    expected = (random.random(), np.random.random(), torch.rand(1))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    # weights_only=True alone must accept the file: tensors and plain values only.
    raw = torch.load(tmp_path / "step-000001" / "trainer.pt", weights_only=True)
    assert isinstance(raw["rng"]["numpy"]["keys"], torch.Tensor)
    state, info = load_checkpoint(tmp_path / "step-000001", model=model)
    assert (random.random(), np.random.random()) == expected[:2] and torch.equal(torch.rand(1), expected[2])
    assert state["step"] == 1 and state["response_length_history"] == [1.5, 2.0] and info["step"] == 1
    torch.optim.AdamW(model.parameters(), lr=1e-3).load_state_dict(state["optimizer"])


def test_checkpoint_with_numpy_rng_state_from_before_still_loads(tmp_path, tiny) -> None:
    model, _ = tiny
    _write(tmp_path, model, steps=(1,))
    path = tmp_path / "step-000001" / "trainer.pt"
    state = torch.load(path, weights_only=True)
    np.random.seed(5)
    state["rng"]["numpy"] = np.random.get_state()  # the tuple (with an ndarray) older versions stored
    expected = np.random.random()
    torch.save(state, path)
    load_checkpoint(tmp_path / "step-000001", model=model)
    assert np.random.random() == expected


class _Payload:
    def __reduce__(self):
        return (print, ("this ran while loading a checkpoint",))


def test_trainer_state_with_a_pickled_object_is_refused(tmp_path, tiny, capsys) -> None:
    model, _ = tiny
    _write(tmp_path, model, steps=(1,))
    path = tmp_path / "step-000001" / "trainer.pt"
    state = torch.load(path, weights_only=True)
    torch.save({**state, "extra": _Payload()}, path)
    with pytest.raises(CheckpointError, match="refused.*could run code"):
        load_checkpoint(tmp_path / "step-000001", model=model)
    assert "this ran" not in capsys.readouterr().out


@pytest.mark.parametrize("name", ["model.safetensors", "trainer.pt"])
def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, tiny, caplog, name) -> None:
    model, _ = tiny
    _write(tmp_path, model)
    assert usable_checkpoint(tmp_path).name == "step-000002"
    path = tmp_path / "step-000002" / name
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # the write that never reached the disk
    with caplog.at_level(logging.WARNING):
        assert usable_checkpoint(tmp_path).name == "step-000001"
    assert "step-000002 is unusable" in caplog.text and "falling back" in caplog.text
    load_checkpoint(usable_checkpoint(tmp_path), model=model)


def test_resume_falls_back_past_a_corrupt_newest_checkpoint(tmp_path, tiny, caplog) -> None:
    from agentic_rl.distributed import DistContext
    from agentic_rl.training.pipeline import _open_run

    model, _ = tiny
    run = tmp_path / "run"
    (run).mkdir()
    (run / "config.yaml").write_text("recipe: custom\nrl: {steps: 3}\nmodel: {name: tiny-random, device: cpu}\n")
    _write(run / "checkpoints", model)
    (run / "checkpoints" / "step-000002" / "state.json").write_text("{trunc")
    with caplog.at_level(logging.WARNING):
        checkpoint = _open_run(None, "custom", run, None, DistContext())[3]
    assert checkpoint.name == "step-000001" and "step-000002 is unusable" in caplog.text


def _open_run_on(run, model, caplog):
    from agentic_rl.distributed import DistContext
    from agentic_rl.training.pipeline import _open_run

    with caplog.at_level(logging.WARNING):
        return _open_run(None, "custom", run, None, DistContext())[3]


def _run_with_checkpoints(tmp_path, model):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("recipe: custom\nrl: {steps: 3}\nmodel: {name: tiny-random, device: cpu}\n")
    _write(run / "checkpoints", model)
    return run


def test_every_file_has_a_checksum_written_before_the_completion_mark(tmp_path, tiny) -> None:
    import hashlib

    model, _ = tiny
    _write(tmp_path, model, steps=(1,))
    folder = tmp_path / "step-000001"
    lines = (folder / "SHA256SUMS").read_text().splitlines()
    # sha256sum's format: ``cd step-N && sha256sum -c SHA256SUMS`` checks a checkpoint by hand.
    assert lines == [
        f"{hashlib.sha256((folder / name).read_bytes()).hexdigest()}  {name}"
        for name in ("model.safetensors", "state.json", "trainer.pt")
    ]


def test_a_flipped_bit_in_the_newest_weights_falls_back_to_the_previous_checkpoint(tmp_path, tiny, caplog) -> None:
    model, _ = tiny
    run = _run_with_checkpoints(tmp_path, model)
    path = run / "checkpoints" / "step-000002" / "model.safetensors"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit of a weight, mid-file: the size and the header stay valid
    path.write_bytes(bytes(data))
    assert checkpoint_module._check_safetensors(path) is None  # the truncation check cannot see it
    assert _open_run_on(run, model, caplog).name == "step-000001"
    assert (
        "checkpoint step-000002 is unusable (model.safetensors does not match its checksum" in caplog.text
        and "falling back" in caplog.text
    )
    load_checkpoint(run / "checkpoints" / "step-000001", model=model)


def test_a_checkpoint_from_before_checksums_loads_unverified(tmp_path, tiny, caplog) -> None:
    model, _ = tiny
    run = _run_with_checkpoints(tmp_path, model)
    for folder in complete_checkpoints(run / "checkpoints"):
        (folder / "SHA256SUMS").unlink()
    assert _open_run_on(run, model, caplog).name == "step-000002" and "unusable" not in caplog.text


def test_disk_full_keeps_the_previous_checkpoint_and_removes_the_temp_folder(tmp_path, tiny, monkeypatch) -> None:
    model, _ = tiny
    _write(tmp_path, model, steps=(1,))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", full)
    with pytest.raises(CheckpointError) as raised:
        _write(tmp_path, model, steps=(2,))
    message = str(raised.value)
    assert "\n" not in message and "disk is full" in message and "step-000001 is kept" in message
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]  # no temporary folder left
    assert [p.name for p in complete_checkpoints(tmp_path)] == ["step-000001"]


def test_disk_full_while_writing_the_weights_too(tmp_path, tiny, monkeypatch) -> None:
    model, _ = tiny

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint_module, "save_file", full)
    with pytest.raises(CheckpointError, match="disk is full.*there is no earlier checkpoint"):
        _write(tmp_path, model, steps=(1,))
    assert list(tmp_path.iterdir()) == []


def test_every_file_and_folder_is_fsynced(tmp_path, tiny, monkeypatch) -> None:
    model, _ = tiny
    synced = []
    real = checkpoint_module._fsync
    monkeypatch.setattr(checkpoint_module, "_fsync", lambda path: (synced.append(path.name), real(path)))
    _write(tmp_path, model, steps=(1,))
    assert {"model.safetensors", "trainer.pt", "state.json", "SHA256SUMS", "COMPLETE"} <= set(synced)
    assert synced[-2:] == [
        ".tmp-step-000001-" + synced[-2].rsplit("-", 1)[-1],
        tmp_path.name,
    ]  # the folder, then the rename


def test_disk_full_mid_run_stops_the_run_with_one_line(tmp_path, tiny, monkeypatch) -> None:
    from types import SimpleNamespace

    from agentic_rl.training.run_checkpoints import TrainingStopped, checkpoint_run
    from agentic_rl.training.run_dir import RunDirectory
    from agentic_rl.training.stages import RunState

    model, _ = tiny
    trainer = SimpleNamespace(
        model=model,
        backend=None,
        critic=None,
        steps_done=3,
        strategy=SimpleNamespace(sharded=False),
        state_dict=lambda: _trainer_state(model, 3),
    )
    config = SimpleNamespace(keep_checkpoints=2)
    state = RunState(config, RunDirectory(tmp_path), None, model, None, None, None, [], trainer=trainer)
    monkeypatch.setattr(
        checkpoint_module,
        "save_file",
        lambda *a, **k: (_ for _ in ()).throw(OSError(errno.ENOSPC, "No space left on device")),
    )
    with pytest.raises(TrainingStopped, match="checkpoint step 3 not written: the disk is full"):
        checkpoint_run(state)
    assert list((tmp_path / "checkpoints").iterdir()) == []


def _write_sharded(root, model, step: int, dist=None):
    from agentic_rl.distributed import DistContext
    from agentic_rl.training.sharded_checkpoint import save_sharded_checkpoint

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return save_sharded_checkpoint(
        root,
        step,
        model=model,
        optimizer=optimizer,
        trainer_state={"step": step},
        info={"tracking": {}},
        keep=3,
        dist=dist or DistContext(),
    )


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("where", ["shards", "trainer.pt"])
def test_disk_full_while_writing_a_sharded_checkpoint(tmp_path, tiny, monkeypatch, where) -> None:
    # One process (world size 1) runs the same DCP save as each rank of an FSDP2 run.
    import torch.distributed.checkpoint.filesystem as dcp_filesystem

    from agentic_rl.training.sharded_checkpoint import is_sharded

    model, _ = tiny
    first = _write_sharded(tmp_path, model, 1)
    assert is_sharded(first)
    # The manifest covers the shards too (each rank's, and DCP's metadata).
    named = {line.split("  ", 1)[1] for line in (first / "SHA256SUMS").read_text().splitlines()}
    assert {"sharded/.metadata", "trainer.pt", "state.json"} <= named and any(
        name.endswith(".distcp") for name in named
    )
    if where == "shards":
        monkeypatch.setattr(dcp_filesystem, "_write_item", _enospc)  # every tensor's write into a shard file
    else:
        monkeypatch.setattr(checkpoint_module.torch, "save", _enospc)
    with pytest.raises(CheckpointError) as raised:
        _write_sharded(tmp_path, model, 2)
    message = str(raised.value)
    assert (
        "\n" not in message
        and message.startswith("checkpoint step 2 not written: the disk is full")
        and "step-000001 is kept" in message
    )
    assert [p.name for p in tmp_path.iterdir()] == ["step-000001"]  # no temporary folder left
    assert usable_checkpoint(tmp_path).name == "step-000001"
