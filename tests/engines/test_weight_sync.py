"""The collective weight sync (engines/weight_sync.py, engines/vllm_receiver.py) without vLLM:
bucket plans, how ``backend.weight_sync`` resolves, the config checks, and the whole
protocol over a real gloo group with a stand-in for the vLLM worker in this process. The
real server is exercised in test_vllm_real.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from agentic_rl.config import BackendConfig, TrainConfig
from agentic_rl.engines.http import BackendError
from agentic_rl.engines.vllm_receiver import ALIGN, WeightReceiver, bucket_layout
from agentic_rl.engines.weight_sync import CollectiveWeightSender, plan_buckets, resolve_weight_sync, tensor_specs
from agentic_rl.errors import ConfigError

FAKE = Path(__file__).with_name("fake_vllm")


def test_buckets_keep_the_order_and_stay_under_the_bound() -> None:
    specs = [["a", "bfloat16", [10]], ["b", "float32", [3, 5]], ["c", "bfloat16", [1000]], ["d", "float32", [2]]]
    offsets, size = bucket_layout(specs[:2])
    assert offsets == [0, ALIGN] and size == ALIGN + 60  # b starts aligned after a's 20 bytes
    buckets = plan_buckets(specs, bucket_bytes=200)
    assert [[spec[0] for spec in bucket] for bucket in buckets] == [["a", "b"], ["c"], ["d"]]  # c alone: 2000 bytes
    assert [spec for bucket in buckets for spec in bucket] == specs
    assert all(bucket_layout(bucket)[1] <= 200 for bucket in buckets if len(bucket) > 1)
    assert len(plan_buckets(specs, bucket_bytes=1 << 20)) == 1
    with pytest.raises(ValueError, match="bucket_bytes: expected a positive size"):
        plan_buckets(specs, 0)
    weights = {"w": torch.zeros(2, 3), "b": torch.zeros(4, dtype=torch.float64)}
    assert tensor_specs(weights, torch.bfloat16) == [["w", "bfloat16", [2, 3]], ["b", "bfloat16", [4]]]


def test_auto_picks_collective_only_where_it_works() -> None:
    assert resolve_weight_sync("auto", managed=True, lora=False, available=None) == "collective"
    assert resolve_weight_sync("auto", managed=False, lora=False, available=None) == "files"
    assert resolve_weight_sync("auto", managed=True, lora=True, available=None) == "files"
    assert resolve_weight_sync("auto", managed=True, lora=False, available="no extension") == "files"
    assert resolve_weight_sync("files", managed=True, lora=False, available=None) == "files"
    assert resolve_weight_sync("collective", managed=True, lora=False, available=None) == "collective"
    for kwargs, why in (
        ({"managed": False, "lora": False, "available": None}, "a vLLM server this process starts"),
        ({"managed": True, "lora": True, "available": None}, "LoRA adapters are pushed through files"),
        ({"managed": True, "lora": False, "available": "no extension"}, "no extension"),
    ):
        with pytest.raises(ConfigError, match=f"backend.weight_sync: collective is not possible here: .*{why}"):
            resolve_weight_sync("collective", **kwargs)


@pytest.mark.parametrize(
    ("settings", "needs"),
    [
        ({"backend": {"weight_sync": "collective"}}, "backend.kind vllm"),
        (
            {"backend": {"kind": "vllm", "weight_sync": "collective", "base_url": "http://127.0.0.1:8000"}},
            "a managed vLLM server",
        ),
        ({"backend": {"kind": "vllm", "weight_sync": "collective"}, "lora": {"enabled": True}}, "full weights"),
    ],
)
def test_collective_where_it_cannot_run_is_one_line(settings, needs) -> None:
    with pytest.raises(ValueError, match=f"backend.weight_sync: collective needs {needs}"):
        TrainConfig.model_validate(settings)


def test_the_default_is_auto_and_collective_validates_with_a_managed_vllm() -> None:
    assert BackendConfig().weight_sync == "auto"
    config = TrainConfig.model_validate({"backend": {"kind": "vllm", "weight_sync": "collective"}})
    assert config.backend.weight_sync == "collective"


class FakeWorker(WeightReceiver):
    """What the extension needs of a vLLM worker; ``reload_weights`` keeps what it is given."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.vllm_config = SimpleNamespace(parallel_config=SimpleNamespace(world_size=1, data_parallel_index=0))
        self.rank, self.device = 0, torch.device("cpu")
        self.loaded: dict[str, torch.Tensor] = {}
        self.reloads, self.fail_at = 0, fail_at

    def reload_weights(self, weights_iterator) -> None:
        self.reloads += 1
        if self.fail_at == -1:
            raise RuntimeError("repacking failed")  # before reading anything
        for index, (name, tensor) in enumerate(weights_iterator):
            if index == self.fail_at:
                raise RuntimeError("repacking failed")
            self.loaded[name] = tensor.clone()

    def rpc(self, method: str, kwargs, timeout_s: float) -> list:
        try:
            return [getattr(self, method)(**(kwargs or {}))]
        except Exception as error:  # what the HTTP route answers
            raise BackendError(f"HTTP 500: {error}") from None


def _weights() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return {f"layer.{i}.weight": torch.randn(64, 48 + i) for i in range(6)} | {"norm.weight": torch.randn(7)}


def test_weights_cross_in_buckets_into_one_reload_and_equal_a_plain_cast() -> None:
    worker = FakeWorker()
    sender = CollectiveWeightSender(worker.rpc, bucket_bytes=16 << 10, timeout_s=60)
    weights = _weights()
    buckets = len(plan_buckets(tensor_specs(weights, torch.bfloat16), 16 << 10))
    assert buckets == 3  # two 64x48.. tensors in bf16 per 16 KiB, the small norm beside the last two
    for round_ in range(2):  # the group stays up between pushes
        report = sender.push({k: v * (round_ + 1) for k, v in weights.items()}, torch.bfloat16)
        [result] = report["results"]
        assert report["buckets"] == result["buckets"] == buckets and result["tensors"] == 7
        assert 0 <= result["waiting_s"] <= result["seconds"]
        assert sender.backend == "gloo" and worker.reloads == round_ + 1  # all buckets in one reload
        for name, value in weights.items():
            assert torch.equal(worker.loaded[name], (value * (round_ + 1)).to(torch.bfloat16))
    sender.close()


@pytest.mark.parametrize("fail_at", [-1, 0, 3])
def test_a_failed_load_is_one_line_and_the_next_push_works(fail_at) -> None:
    worker = FakeWorker(fail_at=fail_at)
    sender = CollectiveWeightSender(worker.rpc, bucket_bytes=16 << 10, timeout_s=60)
    with pytest.raises(BackendError, match="did not load the broadcast weights: HTTP 500: repacking failed"):
        sender.push(_weights(), torch.float32)  # the worker takes the buckets left, so nothing waits
    worker.fail_at = None
    sender.push(_weights(), torch.float32)
    assert torch.equal(worker.loaded["norm.weight"], _weights()["norm.weight"])


def test_a_server_that_takes_nothing_does_not_hold_the_sender_for_its_timeout() -> None:
    worker = FakeWorker()
    sender = CollectiveWeightSender(worker.rpc, timeout_s=120)
    sender.connect()
    worker.agentic_rl_receive_weights = lambda spec: (_ for _ in ()).throw(RuntimeError("no such method"))
    started = time.monotonic()
    with pytest.raises(BackendError, match="did not load the broadcast weights: HTTP 500: no such method"):
        sender.push(_weights(), torch.float32)
    assert time.monotonic() - started < 30 and not sender.connected


def test_a_server_without_the_receiver_falls_back_to_files(monkeypatch) -> None:
    """The fake vLLM server answers no weight-group call: auto pushes through files, and
    collective is a one-line error."""
    from agentic_rl.engines.vllm import build_vllm_backend
    from agentic_rl.models import load

    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]))
    tiny = load("tiny-random", device="cpu")
    config = BackendConfig(kind="vllm", python=sys.executable, max_concurrency=2)
    backend = build_vllm_backend(config, "tiny-random", loaded=tiny)
    try:
        command = backend.server.command()
        assert command[command.index("--worker-extension-cls") + 1] == "agentic_rl_vllm_receiver.WeightReceiver"
        assert backend.transport() == "files" and backend.sync_weights(tiny[0]) == 1
        assert backend.last_transport == "files"
        backend.weight_sync = "collective"  # what build_vllm_backend asks right after the start
        with pytest.raises(ConfigError, match="collective is not possible here: the server does not take weights"):
            backend.transport()
    finally:
        backend.close()


def test_a_restarted_server_gets_the_newest_broadcast_again_while_it_is_held() -> None:
    """What a managed server that died gets pushed again after its restart: a model's
    weights (the model is kept, no copy); a mapping's tensors while the caller still holds
    them, else a one-line error naming the files transport (no copy is kept alive)."""
    from agentic_rl.engines.vllm import resolve_source, weak_source

    model = torch.nn.Linear(3, 2)
    assert resolve_source(weak_source(model), 4).keys() == {"weight", "bias"}
    weights = {"weight": torch.ones(2, 3), "bias": torch.zeros(2)}
    kept = weak_source(weights)
    assert torch.equal(resolve_source(kept, 4)["weight"], torch.ones(2, 3))
    del weights
    with pytest.raises(BackendError, match="lost weight version 4, .* set backend.weight_sync files"):
        resolve_source(kept, 4)


def test_nccl_only_between_ranks_on_gpus_of_their_own(monkeypatch) -> None:
    from agentic_rl.engines import weight_sync

    assert weight_sync.group_backend([{"device": "cpu", "gpu": ""}]) == "gloo"
    monkeypatch.setattr(weight_sync.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(weight_sync.torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(weight_sync, "gpu_id", lambda device: "GPU-a")
    assert weight_sync.group_backend([{"device": "cuda", "gpu": "GPU-b"}]) == "nccl"
    assert weight_sync.group_backend([{"device": "cuda", "gpu": "GPU-a"}]) == "gloo"  # the trainer's own GPU
    assert weight_sync.group_backend([{"device": "cuda", "gpu": "GPU-b"}, {"device": "cpu", "gpu": ""}]) == "gloo"
