"""Device-correct training state: checkpoints load onto the model's device whichever device
wrote them, RNG states (CUDA's included) round-trip, optimizer state lands by its parameters."""

from __future__ import annotations

import copy
import logging
import random

import numpy as np
import pytest
import torch

from agentic_rl.training import checkpoint as checkpoint_module
from agentic_rl.training.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from agentic_rl.training.optim import make_optimizer

pytestmark = pytest.mark.usefixtures("one_thread")

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _draws() -> tuple:
    return random.random(), float(np.random.rand()), torch.rand(3).tolist()


def _train_step(model, optimizer) -> None:
    """One optimizer step on a fixed loss (the same inputs on any device)."""
    ids = torch.arange(1, 9, device=next(model.parameters()).device)[None]
    optimizer.zero_grad()
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()


def _checkpoint_after_one_step(tiny, root, device: str = "cpu", *, foreach: bool = False):
    """(model, optimizer, checkpoint folder) of a model trained one step on ``device``."""
    model = copy.deepcopy(tiny[0]).to(device).train()
    optimizer = (
        torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        if foreach
        else make_optimizer(model.parameters(), lr=1e-3)
    )
    _train_step(model, optimizer)
    folder = save_checkpoint(root, 1, model=model, trainer_state={"optimizer": optimizer.state_dict()}, info={}, keep=1)
    return model, optimizer, folder


def _resume(tiny, folder, device: str = "cpu", *, foreach: bool = False):
    """A fresh model and optimizer on ``device`` restored from ``folder``."""
    model = copy.deepcopy(tiny[0]).to(device).train()
    optimizer = (
        torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        if foreach
        else make_optimizer(model.parameters(), lr=1e-3)
    )
    state, _ = load_checkpoint(folder, model=model)
    optimizer.load_state_dict(state["optimizer"])
    return model, optimizer


def _assert_continues_identically(original, resumed) -> None:
    (model, optimizer), (model2, optimizer2) = original, resumed
    _train_step(model, optimizer)
    _train_step(model2, optimizer2)
    for (name, p), p2 in zip(model.named_parameters(), model2.parameters()):
        torch.testing.assert_close(p2.cpu(), p.cpu(), rtol=1e-5, atol=1e-6, msg=name)


def test_trainer_state_written_on_cuda_loads_onto_a_cpu_model(tiny, tmp_path, monkeypatch) -> None:
    """trainer.pt records each tensor's device; one written by a CUDA run (tagged cuda:0
    here) needs map_location to load on a machine without CUDA."""
    model, optimizer, _ = _checkpoint_after_one_step(tiny, tmp_path / "cpu")
    monkeypatch.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
    folder = save_checkpoint(
        tmp_path / "cuda", 1, model=model, trainer_state={"optimizer": optimizer.state_dict()}, info={}, keep=1
    )
    monkeypatch.undo()
    if not torch.cuda.is_available():  # what a load without map_location does on a CPU-only machine
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(folder / "trainer.pt", weights_only=False)
    resumed = _resume(tiny, folder)
    for index, values in resumed[1].state_dict()["state"].items():
        assert values["exp_avg"].device.type == "cpu" and values["step"].device.type == "cpu", index
    _assert_continues_identically((model, optimizer), resumed)


def test_resumed_optimizer_state_sits_where_a_fresh_one_does(tiny, tmp_path) -> None:
    for foreach in (False, True):  # fused steps live with the parameters, foreach steps on the CPU
        original = _checkpoint_after_one_step(tiny, tmp_path / f"run-{foreach}", foreach=foreach)
        resumed = _resume(tiny, original[2], foreach=foreach)
        fresh, saved = original[1].state_dict()["state"], resumed[1].state_dict()["state"]
        assert fresh.keys() == saved.keys()
        for index in fresh:
            for key, value in fresh[index].items():
                assert (saved[index][key].device, saved[index][key].dtype) == (value.device, value.dtype), (index, key)
                assert torch.equal(saved[index][key], value), (index, key)
        _assert_continues_identically(original[:2], resumed)


@cuda
@pytest.mark.parametrize(("writer", "reader"), [("cuda", "cpu"), ("cpu", "cuda")])
def test_checkpoint_moves_between_cpu_and_cuda(tiny, tmp_path, writer, reader) -> None:
    for foreach in (False, True):
        model, optimizer, folder = _checkpoint_after_one_step(
            tiny, tmp_path / f"run-{foreach}", writer, foreach=foreach
        )
        model2, optimizer2 = _resume(tiny, folder, reader, foreach=foreach)
        for p, p2 in zip(model.parameters(), model2.parameters()):
            assert p2.device.type == reader and torch.equal(p2.cpu(), p.detach().cpu())
            state, state2 = optimizer.state[p], optimizer2.state[p2]
            assert state2["exp_avg"].device == p2.device and torch.equal(
                state2["exp_avg"].cpu(), state["exp_avg"].cpu()
            )
            # Where torch puts a fresh step: with the parameter when fused, else on the CPU.
            assert state2["step"].device == (p2.device if not foreach else torch.device("cpu"))
            assert float(state2["step"]) == float(state["step"]) == 1.0
        _train_step(model2, optimizer2)  # and the restored state steps on the reader's device


def test_rng_states_round_trip_and_old_checkpoints_without_cuda_states_load() -> None:
    state = rng_state()
    first = _draws()
    set_rng_state(state)
    assert _draws() == first
    if "cuda" not in state:  # a checkpoint from before CUDA states were saved looks like this
        set_rng_state({k: v for k, v in state.items() if k != "cuda"})
        assert _draws() == first


def test_cuda_rng_states_are_saved_and_restored_as_cpu_byte_tensors(monkeypatch) -> None:
    saved_states = [torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([4, 5, 6], dtype=torch.uint8)]
    restored = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in saved_states])
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda states: restored.extend(states))
    state = rng_state()
    assert [s.tolist() for s in state["cuda"]] == [[1, 2, 3], [4, 5, 6]]
    set_rng_state(state)
    assert [(s.tolist(), s.device.type, s.dtype) for s in restored] == [
        ([1, 2, 3], "cpu", torch.uint8),
        ([4, 5, 6], "cpu", torch.uint8),
    ]


def test_cuda_rng_states_of_another_device_count_warn_once_and_the_rest_restores(monkeypatch, caplog) -> None:
    monkeypatch.setattr(checkpoint_module, "_warned", set())
    state = {**rng_state(), "cuda": [torch.zeros(16, dtype=torch.uint8)] * 3}
    first = _draws()
    with caplog.at_level(logging.WARNING, logger=checkpoint_module.__name__):
        set_rng_state(state)
        assert _draws() == first
        set_rng_state(state)
    messages = [r.getMessage() for r in caplog.records if r.name == checkpoint_module.__name__]
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    assert messages == [
        f"checkpoint: the CUDA RNG states of 3 device(s) were not restored (this machine has {devices}); sampling on the GPU will not repeat the original run's"
    ]
