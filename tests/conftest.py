"""Shared fixtures: the tiny random model with the real SmolLM2 tokenizer and chat template."""

from __future__ import annotations

import pytest
import torch

from agentic_rl.models import load


@pytest.fixture(scope="session", autouse=True)
def cpu_without_fast_bf16():
    """``precision: auto`` resolves to fp32 in every test, whatever this CPU's bf16 speed
    (it varies between machines): tests that want bf16-mixed ask for it. Yields the real
    measuring function, for the tests of the measurement itself."""
    from agentic_rl.models import precision

    measured = precision.cpu_bf16_speedup
    precision.cpu_bf16_speedup = lambda: 1.0
    yield measured
    precision.cpu_bf16_speedup = measured


@pytest.fixture(scope="session")
def tiny():
    """``(model, tokenizer)`` of the tiny random Llama (real tokenizer, chat template)."""
    return load("tiny-random", device="cpu")


@pytest.fixture(scope="session")
def tokenizer(tiny):
    return tiny[1]


@pytest.fixture(scope="module")
def one_thread():
    """One torch thread for a test module: the tiny model's matmuls gain nothing from
    threads, and on a busy 2-core machine each OpenMP barrier can cost a scheduler tick
    (~10-20x slower). Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


TOOLS_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n\n{% endif %}"
    '# Tools\n{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}Call one with <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n'
    "{% elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}{% if not (loop.first and message['role'] == 'system') %}"
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A ChatML template that describes ``tools`` itself (as Qwen's does), for the tokenizer below."""


FRAMING_TEMPLATE = TOOLS_TEMPLATE.replace(
    "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n",
    "{% if message['role'] == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message['content'] }}\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endif %}",
)
"""TOOLS_TEMPLATE that also frames tool messages in ``<tool_response>`` itself, as Qwen's
and Hermes' templates do."""
assert FRAMING_TEMPLATE != TOOLS_TEMPLATE


@pytest.fixture(scope="session")
def framing_tokenizer(tokenizer):
    """The SmolLM2 tokenizer with a Qwen-style template: it renders ``tools`` and frames tool output."""
    import copy

    framing = copy.deepcopy(tokenizer)
    framing.chat_template = FRAMING_TEMPLATE
    return framing


@pytest.fixture(scope="session")
def tools_tokenizer(tokenizer):
    """The SmolLM2 tokenizer with a chat template that renders ``tools`` (no download)."""
    import copy

    tools = copy.deepcopy(tokenizer)
    tools.chat_template = TOOLS_TEMPLATE
    return tools
