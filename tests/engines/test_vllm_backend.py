"""The vllm backend against a fake vLLM server (tests/engines/fake_vllm): started, checked,
restarted and stopped as a managed subprocess exactly as the real one; request shapes,
token-exact multi-turn trajectories, weight pushes and version tags, failures as
infrastructure errors. The real server is exercised in test_vllm_real.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import httpx
import pytest
import torch

from agentic_rl import envs
from agentic_rl.config import BackendConfig, RolloutConfig, TrainConfig, check_world_size
from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.vllm import VLLMBackend, build_vllm_backend
from agentic_rl.engines.vllm_server import VLLMServer, VLLMUnavailable, vllm_version
from agentic_rl.models import load
from agentic_rl.rollout import rollout
from agentic_rl.seeds import stream_seed

FAKE = Path(__file__).with_name("fake_vllm")
STOP = 2


@pytest.fixture
def fake_vllm(monkeypatch) -> str:
    """The interpreter to name as backend.python: this one, with the fake vllm importable."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(FAKE), os.environ.get("PYTHONPATH", "")]))
    return sys.executable


@pytest.fixture
def tiny():
    return load("tiny-random", device="cpu")


@pytest.fixture
def backend(fake_vllm, tiny):
    backend = build_vllm_backend(
        BackendConfig(kind="vllm", python=fake_vllm, max_concurrency=4), "tiny-random", loaded=tiny
    )
    yield backend
    backend.close()


def _state(backend: VLLMBackend) -> dict:
    return httpx.get(f"{backend.base_url}/fake/state").json()


def _sample(prompt: list[int], seed: int, max_tokens: int, stops: list[int]) -> tuple[list[int], str]:
    sys.path.insert(0, str(FAKE))
    try:
        from vllm.entrypoints.openai.api_server import sample
    finally:
        sys.path.remove(str(FAKE))
    return sample(prompt, seed, max_tokens, stops)


def test_version_check_names_the_fix(tmp_path, monkeypatch) -> None:
    with pytest.raises(
        VLLMUnavailable,
        match="backend.python: /nonexistent/python does not exist; build its environment with `make vllm`",
    ):
        vllm_version("/nonexistent/python")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # nothing named vllm there
    with pytest.raises(
        VLLMUnavailable, match=r"cannot import vllm \(ModuleNotFoundError: No module named 'vllm'\); build"
    ):
        vllm_version(sys.executable)
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text('__version__ = "0.10.1+cpu"\n')
    with pytest.raises(VLLMUnavailable, match="has vLLM 0.10.1\\+cpu; the vllm backend needs 0.32.0 or newer"):
        vllm_version(sys.executable)


def test_a_server_that_exits_at_start_is_one_line_with_its_log(tmp_path, monkeypatch) -> None:
    (tmp_path / "vllm" / "entrypoints" / "openai").mkdir(parents=True)
    (tmp_path / "vllm" / "__init__.py").write_text('__version__ = "0.32.0"\n')
    (tmp_path / "vllm" / "entrypoints" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "entrypoints" / "openai" / "__init__.py").write_text("")
    (tmp_path / "vllm" / "entrypoints" / "openai" / "api_server.py").write_text(
        "raise SystemExit('out of memory for the KV cache')\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    server = VLLMServer(tmp_path / "model", python=sys.executable, startup_timeout_s=60)
    with pytest.raises(
        VLLMUnavailable, match="the vLLM server exited with code 1 while starting: out of memory for the KV cache"
    ):
        server.start()


def test_generate_sends_token_ids_and_keeps_what_the_server_sampled(backend) -> None:
    prompts = [[5, 6, 7], [8, 9, 10, 11]]
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=16, row_seeds=[11, 12])
    completions = backend.generate(prompts, sampling, stop_token_ids=[STOP], max_new_tokens=[16, 2])
    state = _state(backend)
    assert state["model"].endswith("/model")  # the managed server serves the folder written from the trainer's model
    requests = sorted(state["requests"], key=lambda r: len(r["prompt"]))
    assert [r["prompt"] for r in requests] == prompts
    assert requests[0] | {"prompt": None} == {
        "model": "policy",
        "prompt": None,
        "max_tokens": 16,
        "temperature": 0.7,
        "top_p": 0.9,
        "seed": 11,
        "logprobs": 0,
        "return_token_ids": True,
        "stop_token_ids": [STOP],
        "skip_special_tokens": False,
    }
    assert completions[0].token_ids == _sample(prompts[0], 11, 16, [STOP])[0] and completions[0].token_ids[-1] == STOP
    assert completions[0].finish_reason == "stop"
    assert (
        completions[1].token_ids == _sample(prompts[1], 12, 2, [STOP])[0] and completions[1].finish_reason == "length"
    )
    assert completions[0].logprobs == [-0.5] * len(completions[0].token_ids)
    assert {c.weight_version for c in completions} == {0}


def _finish(session, key, deadline_s: float = 30.0):
    import time

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        for done_key, completion in session.step():
            if done_key == key:
                return completion
    raise AssertionError("the turn did not finish")


def test_streamed_turns_show_their_tokens_and_add_up_to_the_whole_answer(backend) -> None:
    """stream_tokens (what the gateway asks for): vLLM answers as server-sent events, the
    session shows the turn's tokens while it is sampled, and the finished turn equals the
    unstreamed answer to the same request."""
    import time

    sampling = SamplingParams(temperature=0.7, max_new_tokens=16, stream_tokens=True)
    whole = backend.generate(
        [[5, 6, 7]],
        SamplingParams(temperature=0.7, max_new_tokens=16, row_seeds=[stream_seed(11, 0)]),
        stop_token_ids=[STOP],
    )[0]
    httpx.post(f"{backend.base_url}/fake/slow", json={"delay_s": 0.2, "tokens": 4})
    slow_whole = backend.generate([[5, 6, 7]], SamplingParams(max_new_tokens=16, seed=1), stop_token_ids=[STOP])[0]
    with backend.session(sampling, stop_token_ids=[STOP]) as session:
        session.submit("a", [5, 6, 7], 16, 11)
        seen: list[list[int]] = []
        deadline = time.monotonic() + 30
        while len(seen) < 2 and time.monotonic() < deadline:
            tokens = session.sampled("a")
            if tokens and (not seen or tokens != seen[-1]):
                seen.append(tokens)
            time.sleep(0.02)
        streamed = _finish(session, "a")
    assert (
        len(seen) >= 2 and seen[0] == slow_whole.token_ids[: len(seen[0])]
    )  # tokens arrived one by one, before the turn ended
    assert (streamed.token_ids, streamed.logprobs, streamed.finish_reason) == (
        slow_whole.token_ids,
        slow_whole.logprobs,
        slow_whole.finish_reason,
    )
    assert _state(backend)["requests"][-1]["stream"] is True
    httpx.post(f"{backend.base_url}/fake/slow", json={"delay_s": 0, "tokens": 0})
    with backend.session(sampling, stop_token_ids=[STOP]) as session:
        session.submit("b", [5, 6, 7], 16, 11)
        assert _finish(session, "b").token_ids == whole.token_ids and whole.token_ids[-1] == STOP


def test_a_cancelled_stream_ends_the_request_on_the_server(backend) -> None:
    """A client that goes away (the gateway cancels its turn) closes the stream: vLLM drops
    the request and frees its slot instead of sampling to max_tokens."""
    import time

    httpx.post(f"{backend.base_url}/fake/slow", json={"delay_s": 0.05, "tokens": 400})
    with backend.session(SamplingParams(max_new_tokens=400, stream_tokens=True), stop_token_ids=[STOP]) as session:
        session.submit("a", [5, 6, 7], 400, 1)
        deadline = time.monotonic() + 30
        while len(session.sampled("a")) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(session.sampled("a")) >= 3
        session.cancel("a")
        assert not session.busy
    deadline = time.monotonic() + 10
    while _state(backend)["aborted"] < 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _state(backend)["aborted"] == 1  # well before the 400 tokens' 20 s
    assert backend.infra_errors == 0  # a cancel is not an infrastructure error


def test_sync_weights_pushes_the_trainers_weights_and_versions_the_samples(backend, tiny) -> None:
    model, _ = tiny
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01)
    assert backend.sync_weights(model) == 1
    state = _state(backend)
    assert state["reloads"] == 1
    expected = sum(float(p.detach().to(backend.weights_dtype).double().sum()) for p in model.parameters())
    assert state["weights_sum"] == pytest.approx(
        expected, rel=1e-9
    )  # in the server's dtype, every parameter once (tied ones too)
    assert backend.last_sync_s > 0
    completion = backend.generate([[5, 6]], SamplingParams(max_new_tokens=8, seed=1), stop_token_ids=[STOP])[0]
    assert completion.weight_version == 1 and completion.logprobs[0] == -0.25  # the reloaded "model" answered
    # A sharded trainer hands full tensors by name instead of a model.
    assert backend.sync_weights({name: p.detach() * 0 for name, p in model.named_parameters()}) == 2
    assert _state(backend)["weights_sum"] == 0.0


def test_multi_turn_rollouts_are_token_exact_and_run_concurrently(backend, tiny) -> None:
    """The continuous scheduler drives one request per turn of each episode; each turn's
    request carries the episode's whole context: prompt, earlier turns, observations."""
    make_env = lambda: envs.make("arithmetic", max_turns=3)  # noqa: E731
    groups = rollout(
        backend, make_env, [0, 1], group_size=2, config=RolloutConfig(max_new_tokens=8, max_total_tokens=512), seed=3
    )
    requests = _state(backend)["requests"]
    trajectories = [t for g in groups for t in g.trajectories]
    assert all(t.infra_error is None for t in trajectories)
    turns = sum(len(t.turns) for t in trajectories)
    assert len(requests) == turns >= 4
    for trajectory in trajectories:
        for turn in trajectory.turns:
            context = trajectory.token_ids[: turn.response_start]
            sampled = trajectory.token_ids[turn.response_start : turn.response_end]
            # A group's episodes share their prompt: one of the requests with this context sampled these tokens.
            assert any(
                r["prompt"] == context and _sample(context, r["seed"], r["max_tokens"], [STOP])[0] == sampled
                for r in requests
            )
            assert trajectory.sampler_logprobs[turn.response_start : turn.response_end] == [-0.5] * len(sampled)
    # Different episodes draw from different streams; a turn's seed differs from the episode's previous turn.
    assert len({r["seed"] for r in requests}) == len(requests)


def test_failed_requests_end_their_episodes_as_infrastructure_errors(fake_vllm, tiny) -> None:
    backend = build_vllm_backend(
        BackendConfig(kind="vllm", python=fake_vllm, max_concurrency=1), "tiny-random", loaded=tiny
    )
    try:
        backend.max_retries = 0
        httpx.post(f"{backend.base_url}/fake/fail_next", json={"n": 1})
        groups = rollout(
            backend,
            lambda: envs.make("arithmetic", max_turns=1),
            [0, 1],
            group_size=1,
            config=RolloutConfig(max_new_tokens=8),
            seed=0,
        )
        errors = [t.infra_error for g in groups for t in g.trajectories]
        assert sum(e is not None for e in errors) == 1 and "HTTP 500" in next(e for e in errors if e)
        assert backend.infra_errors == 1
    finally:
        backend.close()


def test_a_dead_managed_server_is_restarted_with_the_newest_weights(backend, tiny) -> None:
    model, _ = tiny
    with torch.no_grad():
        model.model.norm.weight.fill_(0.5)
    backend.sync_weights(model)
    with pytest.raises(httpx.HTTPError):
        httpx.post(f"{backend.base_url}/fake/die")
    backend.server.process.wait(timeout=30)
    completion = backend.generate([[5, 6]], SamplingParams(max_new_tokens=8, seed=1), stop_token_ids=[STOP])[0]
    assert completion.error is None and completion.token_ids
    assert backend.restarts == 1 and backend.server.starts == 2
    from safetensors.torch import load_file

    served = load_file(backend.server.model_dir / "model.safetensors")
    assert torch.equal(
        served["model.norm.weight"], torch.full_like(served["model.norm.weight"], 0.5)
    )  # what the restarted server loaded


def test_close_stops_the_server_and_removes_its_folder(fake_vllm, tiny) -> None:
    backend = build_vllm_backend(BackendConfig(kind="vllm", python=fake_vllm), "tiny-random", loaded=tiny)
    process, folder = backend.server.process, backend.server.model_dir.parent
    assert folder.is_dir() and process.poll() is None
    backend.close()
    assert process.poll() is not None and not folder.exists()


def test_a_running_server_is_used_as_it_is(backend) -> None:
    other = VLLMBackend(backend.tokenizer, backend.base_url + "/v1", api_key=backend.api_key)
    try:
        assert other.model_name == "policy"
        assert other.generate([[5]], SamplingParams(max_new_tokens=4, seed=0), stop_token_ids=[STOP])[0].token_ids
        with pytest.raises(ValueError, match="weights_folder is needed"):
            other.sync_weights({"w": torch.zeros(1)})
    finally:
        other.close()
    assert backend.server.alive  # not ours to stop


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"rl": {"sampling": "arpo", "arpo": {"initial_samples": 2}, "group_size": 2}},
            "rl.sampling: backend.kind vllm: ARPO branches on per-token entropies",
        ),
        (
            {"backend": {"kind": "sglang"}, "lora": {"enabled": True}},
            "lora.enabled: backend.kind sglang: pushing LoRA adapters into an SGLang server is not implemented yet",
        ),
        (
            {"lora": {"enabled": True, "r": 1024}},
            "lora.r: backend.kind vllm: vLLM serves adapters up to rank 512, got 1024",
        ),
    ],
)
def test_training_settings_the_vllm_backend_refuses(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TrainConfig.model_validate({"backend": {"kind": "vllm"}, **overrides})
    assert TrainConfig.model_validate(
        {"backend": {"kind": "vllm"}, "lora": {"enabled": True}}
    ).lora.enabled  # adapters are pushed into vLLM


@pytest.fixture
def lora_tiny():
    """The tiny model with rank-4 adapters (peft), as ``lora.enabled`` trains it."""
    from agentic_rl.config import LoraConfig
    from agentic_rl.models.lora import apply_lora

    model, tokenizer = load("tiny-random", device="cpu")
    return apply_lora(model, LoraConfig(enabled=True, r=4)), tokenizer


def _adapter_sum(model) -> float:
    return sum(float(p.detach().double().sum()) for name, p in model.named_parameters() if ".lora_" in name)


def test_a_lora_policy_is_served_as_its_base_and_pushes_only_its_adapters(fake_vllm, lora_tiny) -> None:
    from safetensors.torch import load_file

    model, _ = lora_tiny
    backend = build_vllm_backend(
        BackendConfig(kind="vllm", python=fake_vllm, max_concurrency=2), "tiny-random", loaded=lora_tiny
    )
    try:
        command = backend.server.command()
        assert (
            command[command.index("--max-lora-rank") + 1] == "8" and "--enable-lora" in command
        )  # rank 4 rounds up to vLLM's 8
        assert _state(backend)["max_lora_rank"] == 8
        # The served folder holds the base under plain Hugging Face names.
        served = load_file(backend.server.model_dir / "model.safetensors")
        assert set(served) == {name for name, _ in load("tiny-random", device="cpu")[0].named_parameters()}
        q_proj = model.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight
        assert torch.equal(served["model.layers.0.self_attn.q_proj.weight"], q_proj.detach().to(backend.weights_dtype))
        sampling = SamplingParams(max_new_tokens=4, seed=1)
        backend.generate([[5, 6]], sampling, stop_token_ids=[STOP])
        assert _state(backend)["requests"][-1]["model"] == "policy"  # no adapter pushed yet: the base answers
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if ".lora_B" in name:
                    parameter.fill_(0.01)
        assert backend.sync_weights(model) == 1
        state = _state(backend)
        assert state["reloads"] == 0 and state["lora_loads"] == 1  # the adapters moved, the base did not
        assert state["lora_sum"] == pytest.approx(_adapter_sum(model), rel=1e-9)
        completion = backend.generate([[5, 6]], sampling, stop_token_ids=[STOP])[0]
        assert completion.weight_version == 1 and completion.logprobs[0] == -0.125  # the adapter answered
        assert _state(backend)["requests"][-1]["model"] == "policy-lora" and backend.last_sync_s > 0
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if ".lora_B" in name:
                    parameter.fill_(-0.02)
        assert backend.sync_weights(model) == 2  # replaced in place (a second load of the name needs load_inplace)
        state = _state(backend)
        assert state["lora_loads"] == 2 and state["lora_sum"] == pytest.approx(_adapter_sum(model), rel=1e-9)
        assert sorted(p.name for p in backend.weights_folder.glob("adapter-*")) == [
            "adapter-2"
        ]  # older versions removed
        # A server that died comes back with the base and gets the newest adapter again.
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"{backend.base_url}/fake/die")
        backend.server.process.wait(timeout=30)
        completion = backend.generate([[5, 6]], sampling, stop_token_ids=[STOP])[0]
        assert completion.error is None and completion.logprobs[0] == -0.125 and backend.restarts == 1
        assert _state(backend)["adapters"] == {"policy-lora": str(backend.weights_folder / "adapter-2")}
    finally:
        backend.close()


def test_role_adapters_are_served_each_under_its_own_name(fake_vllm) -> None:
    """``lora.roles``: every adapter of the model is pushed and served under its own name
    (the server started for as many), and a request names the adapter selected when it
    was built (a role's turns are sampled by its adapter)."""
    from agentic_rl.config import TrainConfig, build
    from agentic_rl.models.lora import add_role_adapters, apply_lora

    lora = build(TrainConfig, {"lora": {"enabled": True, "r": 4, "roles": {"planner": "own", "judge": "frozen"}}}).lora
    model, tokenizer = load("tiny-random", device="cpu")
    model = add_role_adapters(apply_lora(model, lora), lora)
    backend = build_vllm_backend(BackendConfig(kind="vllm", python=fake_vllm), "tiny-random", loaded=(model, tokenizer))
    try:
        command = backend.server.command()
        assert command[command.index("--max-loras") + 1] == "3"  # the shared one, the planner's, the frozen one
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if ".lora_B.planner." in name:
                    parameter.fill_(0.01)
        assert backend.sync_weights(model) == 1
        state, folder = _state(backend), backend.weights_folder / "adapter-1"
        assert state["adapters"] == {
            "policy-lora": str(folder),
            "policy-lora-frozen": str(folder / "frozen"),
            "policy-lora-planner": str(folder / "planner"),
        }

        def adapter_sum(adapter: str) -> float:
            return sum(float(p.detach().double().sum()) for n, p in model.named_parameters() if f".{adapter}." in n)

        for adapter in ("default", "planner", "frozen"):
            served = "policy-lora" if adapter == "default" else f"policy-lora-{adapter}"
            assert state["lora_sums"][served] == pytest.approx(adapter_sum(adapter), rel=1e-9), adapter
        sampling = SamplingParams(max_new_tokens=2, seed=1)
        for adapter, served in (("planner", "policy-lora-planner"), ("default", "policy-lora")):
            backend.select_adapter(adapter)
            backend.generate([[5, 6]], sampling, stop_token_ids=[STOP])
            assert _state(backend)["requests"][-1]["model"] == served
    finally:
        backend.close()


def test_a_server_started_without_lora_is_named_as_the_problem(backend, lora_tiny, tmp_path) -> None:
    from agentic_rl.engines.http import BackendError

    other = VLLMBackend(backend.tokenizer, backend.base_url, weights_folder=tmp_path, api_key=backend.api_key)
    try:
        with pytest.raises(BackendError, match="--enable-lora --max-lora-rank N"):
            other.sync_weights(lora_tiny[0])
        assert other.model_name == "policy" and other.weight_version == 0
    finally:
        other.close()


def test_vllm_with_several_trainer_processes_but_not_lora_yet() -> None:
    check_world_size(TrainConfig.model_validate({"backend": {"kind": "vllm"}}), 2)  # one shared server
    with pytest.raises(ValueError, match="lora.enabled: LoRA with backend.kind vllm runs with one trainer process"):
        check_world_size(TrainConfig.model_validate({"backend": {"kind": "vllm"}, "lora": {"enabled": True}}), 2)


@pytest.mark.parametrize("variant", ["full", "lora", "roles"])
def test_a_training_run_pushes_its_weights_after_every_step(fake_vllm, tmp_path, monkeypatch, variant: str) -> None:
    """The pipeline end to end on the vllm backend (fake server, tiny model): rollouts come
    from the server, every optimizer step is pushed into it (full weights, or the LoRA
    adapters: with ``lora.roles`` every role's, and each role's turns name its own), the
    server is stopped at the end."""
    from agentic_rl.training.pipeline import train

    lora = variant != "full"
    pushes = {"full": 0, "adapter": 0}
    named: list[str] = []
    reload, load_adapter, request_body = VLLMBackend.reload, VLLMBackend.load_adapter, VLLMBackend.request_body
    monkeypatch.setattr(
        VLLMBackend,
        "reload",
        lambda self, folder: (pushes.__setitem__("full", pushes["full"] + 1), reload(self, folder))[1],
    )
    monkeypatch.setattr(
        VLLMBackend,
        "load_adapter",
        lambda self, folder, *name: (
            pushes.__setitem__("adapter", pushes["adapter"] + 1),
            load_adapter(self, folder, *name),
        )[1],
    )
    monkeypatch.setattr(
        VLLMBackend,
        "request_body",
        lambda self, *args, **kw: (named.append(self.model_name), request_body(self, *args, **kw))[1],
    )

    config = {
        "model": {"name": "tiny-random", "device": "cpu"},
        "precision": "fp32",
        "backend": {"kind": "vllm", "python": fake_vllm},
        "env": {"name": "arithmetic", "max_turns": 1},
        "rollout": {"max_new_tokens": 8, "max_total_tokens": 256},
        "eval": {"num_tasks": 2},
        "rl": {"steps": 2, "tasks_per_step": 2, "group_size": 2, "skip_zero_advantage": False},
        "checkpoint_every": 0,
        "output_dir": str(tmp_path / "run"),
        "lora": {"enabled": lora, "r": 4},
    }
    if variant == "roles":  # the planner's turns end the episode here (the fake server writes no expression)
        config["env"] = {"name": "arithmetic-team", "max_turns": 2}
        config["lora"]["roles"] = {"planner": "own", "solver": "own"}
    result = train(config)
    assert [step["weight_sync_time_s"] > 0 for step in result.steps] == [True, True]
    assert (
        pushes["adapter" if lora else "full"] >= (6 if variant == "roles" else 2)
        and pushes["full" if lora else "adapter"] == 0
    )  # LoRA moves adapters only; with roles three of them (shared, planner, solver) per push
    if variant == "roles":
        assert "policy-lora-planner" in named and "policy" in named  # before the first push: the base
    import json

    rows = [json.loads(line) for line in (result.run_dir / "rollouts.jsonl").read_text().splitlines()]
    versions = {}
    for row in rows:
        versions.setdefault(row["step"], set()).update(row["weight_versions"])
    assert versions[1] == {v + 1 for v in versions[0]}  # step 1 sampled from the weights pushed after step 0


def test_the_server_dtype_follows_precision_auto(monkeypatch) -> None:
    """bfloat16 where bf16 matmuls are fast, float32 where the CPU emulates them (an AVX2-only
    CPU runs a bf16 vLLM server several times slower than a float32 one)."""
    from agentic_rl.engines.remote import server_dtype
    from agentic_rl.models import precision

    monkeypatch.setattr(precision, "cpu_bf16_speedup", lambda: 0.2)
    assert server_dtype("auto") == "float32"
    monkeypatch.setattr(precision, "cpu_bf16_speedup", lambda: 2.0)
    assert server_dtype("auto") == "bfloat16"
    assert server_dtype("float16") == "float16"


def test_serve_puts_the_gateway_in_front_of_vllm(fake_vllm, tmp_path) -> None:
    """`agentic-rl serve --engine vllm` starts a vLLM server for the model and serves the
    OpenAI API over it: an episode's calls record the ids and log-probs vLLM sampled."""
    import socket
    import subprocess
    import time

    openai = pytest.importorskip("openai")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "agentic_rl",
        "serve",
        "--model",
        "tiny-random",
        "--engine",
        "vllm",
        "--port",
        str(port),
        "--set",
        f"backend.python={fake_vllm}",
    ]
    server = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert server.poll() is None, server.stdout.read()[-2000:]
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.5)
        client = openai.OpenAI(base_url=f"{url}/episodes/e1/v1", api_key="unused", max_retries=0)
        reply = client.chat.completions.create(
            model="tiny-random", messages=[{"role": "user", "content": "Hi"}], max_tokens=8, seed=3
        )
        assert reply.choices[0].finish_reason == "stop"
        [call] = httpx.get(f"{url}/episodes/e1").json()["calls"]
        assert (
            len(call["completion_ids"]) == 4 and call["logprobs"] == [-0.5] * 4
        )  # the fake vLLM's 3 tokens + stop, its log-probs
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=60)
    assert "serving tiny-random with vLLM at http://127.0.0.1:" in output
    assert server.returncode == 0  # SIGTERM: a clean exit that stopped the vLLM server it started
    managed = output.split("with vLLM at ")[1].split()[0]
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"{managed}/health", timeout=2)
    bad = subprocess.run(
        [sys.executable, "-m", "agentic_rl", "serve", "--model", "tiny-random", "--set", "backend.base_url=http://x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (
        bad.returncode != 0 and "only with --engine vllm" in bad.stderr + bad.stdout and "Traceback" not in bad.stderr
    )


def test_the_gateway_streams_vllm_turns_as_sampled_and_a_client_that_leaves_frees_the_request(backend) -> None:
    """The gateway over vLLM: an SDK stream gets content while vLLM samples (not the whole
    turn at its end), and adds up to the stored call; a client that disconnects mid-stream
    ends the request on the vLLM server."""
    import time

    openai = pytest.importorskip("openai")
    from agentic_rl.gateway.server import GatewayServer

    server = GatewayServer(backend, model_name="tiny-random", port=0)
    server.start()
    try:
        httpx.post(f"{backend.base_url}/fake/slow", json={"delay_s": 0.1, "tokens": 12})
        client = openai.OpenAI(base_url=server.episode_url("s"), api_key="unused", max_retries=0)
        started, arrivals, text = time.monotonic(), [], ""
        for chunk in client.chat.completions.create(
            model="tiny-random", messages=[{"role": "user", "content": "Hi"}], max_tokens=12, stream=True, seed=1
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                arrivals.append(time.monotonic() - started)
                text += chunk.choices[0].delta.content
        [call] = server.store.get("s").calls
        assert call.completion_ids == [10 + i for i in range(12)] and text == call.reply["content"]
        assert len(arrivals) >= 3 and arrivals[0] < arrivals[-1] - 0.5  # spread over the ~1.2 s of sampling

        httpx.post(f"{backend.base_url}/fake/slow", json={"delay_s": 0.05, "tokens": 400})
        stream = client.chat.completions.create(
            model="tiny-random", messages=[{"role": "user", "content": "Hi"}], max_tokens=400, stream=True, seed=2
        )
        for count, _ in enumerate(stream):
            if count == 3:
                break
        stream.close()
        deadline = time.monotonic() + 15
        while _state(backend)["aborted"] < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(backend)["aborted"] == 1  # long before vLLM would have sampled 400 tokens (20 s)
    finally:
        server.shutdown()
        server.server_close()
