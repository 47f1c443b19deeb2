"""``agentic-rl train --nproc 2`` end to end on the tiny model (torchrun, gloo on CPU): the
run directory of two ranks looks like one process's and holds the same numbers; a rank
killed mid-run ends the run instead of hanging it, and the run resumes from its
checkpoint on 2 ranks or on 1."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from agentic_rl.training.checkpoint import COMPLETE
from agentic_rl.training.rl_metrics import MACHINE_METRICS

FP32 = ("--set", "precision=fp32")  # the same numbers on every CPU (auto picks bf16 where it is fast)
# The random model's advantages are all zero, which the update would skip: forward every
# trajectory, so that the ranks' forward passes (their entropy) are compared too.
FORWARD_ALL = ("--set", "rl.skip_zero_advantage=false")


def _cli(*args: str, wait: bool = True, timeout: float = 300):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "agentic_rl", "train", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if not wait:
        return process
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-4000:]
    return output


def _layout(run: Path) -> list[str]:
    return sorted("EVENTS" if "tfevents" in p.name else str(p.relative_to(run)) for p in run.rglob("*") if p.is_file())


def _metrics(run: Path) -> list[dict]:
    return [
        {k: v for k, v in json.loads(line).items() if k not in MACHINE_METRICS}
        for line in (run / "metrics.jsonl").read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("one") / "run"
    _cli("smoke", *FP32, *FORWARD_ALL, "--set", "checkpoint_every=0", "--output-dir", str(run))
    return run


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_two_ranks_write_the_run_of_one_process(strategy: str, one_process: Path, tmp_path) -> None:
    run = tmp_path / "run"
    scratch = Path(tempfile.gettempdir())
    before = set(scratch.glob("agentic-rl-rank1-*"))
    output = _cli(
        "smoke",
        *FP32,
        *FORWARD_ALL,
        "--nproc",
        "2",
        "--set",
        f"trainer.strategy={strategy}",
        "--set",
        "checkpoint_every=0",
        "--output-dir",
        str(run),
    )
    assert _layout(run) == _layout(one_process)
    assert output.count("held-out accuracy") == 1  # one display: rank 0's
    ours, theirs = _metrics(run), _metrics(one_process)
    assert [m["step"] for m in ours] == [0, 1]
    for a, b in zip(ours, theirs):
        # Each rank samples exactly what one process samples for its tasks: the same episodes.
        for key in ("reward_mean", "accuracy", "response_length", "tool_calls_per_episode", "frac_zero_std_groups"):
            assert a[key] == b[key], key
        assert a["entropy"] == pytest.approx(b["entropy"], abs=1e-4)
    for name in ("eval_before.json", "eval_after.json"):  # each rank evaluated half of the tasks
        ours, theirs = json.loads((run / name).read_text()), json.loads((one_process / name).read_text())
        assert [t["task_id"] for t in ours["trajectories"]] == [t["task_id"] for t in theirs["trajectories"]]
        assert ours["metrics"]["avg@1"] == theirs["metrics"]["avg@1"]
        assert ours["metrics"]["mean_response_tokens"] == pytest.approx(
            theirs["metrics"]["mean_response_tokens"], rel=0.05
        )
    straight, ranks = (
        load_file(one_process / "final" / "model.safetensors"),
        load_file(run / "final" / "model.safetensors"),
    )
    for name, value in straight.items():
        torch.testing.assert_close(ranks[name], value, rtol=0, atol=1e-5)
    assert json.loads((run / "precision.json").read_text())["precision"] == "fp32"
    assert set(scratch.glob("agentic-rl-rank1-*")) == before  # rank 1's scratch directory is gone


def _rank_process(run: Path, rank: int) -> int | None:
    """The pid of the worker of ``rank`` training into ``run`` (read from /proc)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().split(b"\0")
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            str(run).encode() in command
            and f"RANK={rank}".encode() in environ
            and b"TORCHELASTIC_RUN_ID" in b"\0".join(environ)
        ):
            return int(entry.name)
    return None


def _kill_rank_after_checkpoint(launcher: subprocess.Popen, run: Path, step: int = 2) -> float:
    """SIGKILL rank 1 of ``launcher``'s run once checkpoint ``step`` is complete; returns when."""
    deadline = time.monotonic() + 240
    while not (run / "checkpoints" / f"step-{step:06d}" / COMPLETE).is_file():
        assert launcher.poll() is None and time.monotonic() < deadline, launcher.stdout.read()[-3000:]
        time.sleep(0.05)
    pid = _rank_process(run, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    return time.monotonic()


# The tiny model never earns a reward in smoke runs (zero advantages): weight decay under a
# warmup schedule moves every weight by an amount that depends on the step and the
# scheduler's position, so a resume that restored them wrongly ends elsewhere.
MOVING = ("--set", "optim.lr=0.05", "--set", "optim.weight_decay=0.5", "--set", "optim.warmup_steps=3")


@pytest.mark.slow
@pytest.mark.parametrize(("strategy", "critic"), [("ddp", False), ("fsdp2", False), ("fsdp2", True)])
def test_a_killed_rank_ends_the_run_and_it_resumes_on_two_ranks_or_one(strategy: str, critic: bool, tmp_path) -> None:
    """DDP checkpoints are rank 0's one-process files; FSDP2's are sharded
    (torch.distributed.checkpoint, each rank its shards) and reshard on load, a separate
    PPO critic's weights and optimizer included."""
    import shutil

    run = tmp_path / "run"
    ppo = ("--set", "algorithm.preset=ppo", "--set", "algorithm.critic.kind=separate") if critic else ()
    args = (
        "--set",
        f"trainer.strategy={strategy}",
        "--set",
        "rl.steps=4",
        "--set",
        "checkpoint_every=1",
        "--set",
        "trainer.timeout_s=60",
        *MOVING,
        *ppo,
    )
    launcher = _cli("smoke", *FP32, "--nproc", "2", *args, "--output-dir", str(run), wait=False)
    killed = _kill_rank_after_checkpoint(launcher, run)
    output, _ = launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    assert time.monotonic() - killed < 60  # torch elastic stops the other rank: no hang until the collective timeout
    assert not (run / "final").exists()

    assert (run / "checkpoints" / "step-000002" / "sharded").is_dir() == (strategy == "fsdp2")
    single = tmp_path / "single"
    shutil.copytree(run, single)
    _cli("--resume", str(run), "--nproc", "2")
    _cli("--resume", str(single))
    straight = tmp_path / "straight"
    _cli("smoke", *FP32, "--nproc", "2", *args, "--output-dir", str(straight))
    for folder in (run, single, straight):
        assert [m["step"] for m in _metrics(folder)] == [0, 1, 2, 3]
    expected = load_file(straight / "final" / "model.safetensors")
    initial = load_file(one_process_initial(tmp_path))
    assert max(float((expected[name] - initial[name]).abs().max()) for name in expected) > 1e-3  # the weights moved
    for folder in (run, single):
        resumed = load_file(folder / "final" / "model.safetensors")
        for name, value in expected.items():
            torch.testing.assert_close(resumed[name], value, rtol=0, atol=1e-6)
    if critic:  # gathered from the shards into the one-process layout
        expected = load_file(straight / "final" / "critic.safetensors")
        assert "head.linear.weight" in expected and any(name.startswith("model.model.layers.") for name in expected)
        for folder in (run, single):
            resumed = load_file(folder / "final" / "critic.safetensors")
            assert resumed.keys() == expected.keys()
            for name, value in expected.items():
                torch.testing.assert_close(resumed[name], value, rtol=0, atol=1e-6)


def one_process_initial(tmp_path: Path) -> Path:
    """The tiny model's initial weights as a safetensors file."""
    from safetensors.torch import save_file

    from agentic_rl.models import load
    from agentic_rl.training.checkpoint import trainable_state

    path = tmp_path / "initial.safetensors"
    save_file(trainable_state(load("tiny-random", device="cpu")[0]), path)
    return path


@pytest.mark.slow
def test_max_restarts_continues_the_run_after_a_rank_dies(tmp_path) -> None:
    """--max-restarts 1: torch elastic restarts both ranks after one is killed, and the
    restarted processes resume the run from its newest checkpoint instead of starting over."""
    run = tmp_path / "run"
    args = ("--set", "rl.steps=4", "--set", "checkpoint_every=1", "--set", "trainer.timeout_s=60", *MOVING)
    launcher = _cli("smoke", *FP32, "--nproc", "2", "--max-restarts", "1", *args, "--output-dir", str(run), wait=False)
    _kill_rank_after_checkpoint(launcher, run)
    output, _ = launcher.communicate(timeout=300)
    assert launcher.returncode == 0, output[-4000:]
    assert "resumed from step-00000" in output
    assert [m["step"] for m in _metrics(run)] == [0, 1, 2, 3]
    assert (run / "final" / "model.safetensors").is_file()


class _TwoHosts:
    """Two network namespaces joined by a veth pair: hosts 10.231.7.1 and 10.231.7.2 with
    nothing else in common but the file system, as two nodes of a cluster."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.names = [f"arl{tag}a", f"arl{tag}b"]
        self.devices = [f"arlv{tag}a", f"arlv{tag}b"]
        self.addresses = ["10.231.7.1", "10.231.7.2"]

    def __enter__(self) -> _TwoHosts:
        def ip(*args: str) -> None:
            subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)

        try:
            for name in self.names:
                ip("netns", "add", name)
        except (OSError, subprocess.CalledProcessError) as error:
            self.__exit__()
            pytest.skip(f"network namespaces unavailable ({error}): needs root and iproute2")
        ip("link", "add", self.devices[0], "type", "veth", "peer", "name", self.devices[1])
        for name, device, address in zip(self.names, self.devices, self.addresses):
            ip("link", "set", device, "netns", name)
            ip("-n", name, "addr", "add", f"{address}/24", "dev", device)
            ip("-n", name, "link", "set", device, "up")
            ip("-n", name, "link", "set", "lo", "up")
        return self

    def __exit__(self, *exc) -> None:
        for name in self.names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


@pytest.mark.slow
def test_two_nodes_with_rendezvous_train_like_one_process(one_process: Path, tmp_path) -> None:
    """Plain ``torchrun --nnodes 2`` with c10d rendezvous, one rank on each of two hosts
    (network namespaces), as the README's multi-node command: the run equals one process's."""
    run = tmp_path / "run"
    with _TwoHosts() as hosts:
        launchers = []
        for node, (name, device, address) in enumerate(zip(hosts.names, hosts.devices, hosts.addresses)):
            command = [
                "ip",
                "netns",
                "exec",
                name,
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes",
                "2",
                "--nproc-per-node",
                "1",
                "--rdzv-backend",
                "c10d",
                "--rdzv-endpoint",
                f"{hosts.addresses[0]}:29555",
                "--rdzv-id",
                "arl-test",
                "--rdzv-conf",
                f"is_host={str(node == 0).lower()}",
                "--local-addr",
                address,
                "-m",
                "agentic_rl",
                "train",
                "smoke",
                *FP32,
                "--set",
                "checkpoint_every=0",
                "--output-dir",
                str(run),
            ]
            # gloo picks its interface from the host name, which both namespaces share: name it, as on a real cluster.
            env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": device}
            launchers.append(
                subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            )
        outputs = [launcher.communicate(timeout=300)[0] for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0, 0], "\n".join(output[-3000:] for output in outputs)
    assert _layout(run) == _layout(one_process)
    for a, b in zip(_metrics(run), _metrics(one_process)):
        for key in ("reward_mean", "accuracy", "response_length"):
            assert a[key] == b[key], key
    straight, nodes = (
        load_file(one_process / "final" / "model.safetensors"),
        load_file(run / "final" / "model.safetensors"),
    )
    for name, value in straight.items():
        torch.testing.assert_close(nodes[name], value, rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_sft_then_rl_on_two_ranks_equals_one_process(strategy: str, tmp_path) -> None:
    """SFT runs data-parallel under DDP, then the RL stage wraps the same model again (DDP or
    FSDP2): the final weights equal the one-process run's."""
    from agentic_rl.data import write_jsonl

    data = tmp_path / "sft.jsonl"
    write_jsonl(
        data,
        [
            {
                "messages": [
                    {"role": "user", "content": f"What is {a} + {a + 3}?"},
                    {"role": "assistant", "content": f"<answer>{2 * a + 3}</answer>"},
                ]
            }
            for a in range(6)
        ],
    )
    sft = (
        "--set",
        "sft.enabled=true",
        "--set",
        f"sft.data={data}",
        "--set",
        "sft.train.batch_size=3",
        "--set",
        "sft.train.epochs=1",
        "--set",
        "checkpoint_every=0",
        *MOVING,
    )
    one, two = tmp_path / "one", tmp_path / "two"
    _cli("smoke", *FP32, *sft, "--output-dir", str(one))
    _cli("smoke", *FP32, "--nproc", "2", "--set", f"trainer.strategy={strategy}", *sft, "--output-dir", str(two))
    losses = [
        [json.loads(line)["loss"] for line in (run / "sft_metrics.jsonl").read_text().splitlines()]
        for run in (one, two)
    ]
    assert len(losses[0]) == 2 and losses[1] == pytest.approx(losses[0], rel=1e-5)
    expected, got = load_file(one / "final" / "model.safetensors"), load_file(two / "final" / "model.safetensors")
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_role_adapters_on_two_ranks_equal_one_process(tmp_path) -> None:
    """An env's roles each with an adapter (``lora.roles``) on two DDP ranks: every role's
    saved adapter equals the one-process run's (the ranks' micro-batches train different
    adapters; their gradients are averaged once per step). The random model earns no
    reward, so what moves is weight decay, on the adapters a sample used: the shared one,
    which no role plays, must stay as it is on both (tests/distributed/test_parity.py checks
    the gradient steps)."""
    roles = ("--set", "env.name=arithmetic-team", "--set", "lora.enabled=true", "--set", "checkpoint_every=0")
    roles += ("--set", "lora.roles={planner: own, solver: own}", *FORWARD_ALL, *MOVING)
    one, two = tmp_path / "one", tmp_path / "two"
    _cli("smoke", *FP32, *roles, "--output-dir", str(one))
    _cli("smoke", *FP32, *roles, "--nproc", "2", "--output-dir", str(two))
    for adapter in ("adapter_model.safetensors", "planner/adapter_model.safetensors"):
        expected = load_file(one / "final" / "adapters" / adapter)
        got = load_file(two / "final" / "adapters" / adapter)
        assert expected.keys() == got.keys() and expected
        for name, value in expected.items():
            torch.testing.assert_close(got[name], value, rtol=0, atol=1e-5)
