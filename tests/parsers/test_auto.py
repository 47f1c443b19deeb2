"""``parser: auto``: the format picked from a chat template (fixtures written from each
format's documented layout, not copied from a model repository) or special tokens."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agentic_rl import envs
from agentic_rl.errors import ConfigError
from agentic_rl.models import resolve_auto_parser
from agentic_rl.parsers import (
    FORMAT_MARKERS,
    PARSERS,
    detect_parser,
    get_parser,
    parser_for_tokenizer,
    resolve_auto_parsers,
)

HERMES = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n"
    '{% if tools %}<tools>{{ tools | tojson }}</tools> Call: <tool_call>\n{"name": ..., "arguments": ...}\n'
    "</tool_call>{% endif %}{{ message.content }}<|im_end|>\n{% endfor %}"
)
QWEN3_CODER = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{% for call in message.tool_calls %}"
    "<tool_call>\n<function={{ call.function.name }}>\n{% for key, value in call.function.arguments.items() %}"
    "<parameter={{ key }}>\n{{ value }}\n</parameter>\n{% endfor %}</function>\n</tool_call>{% endfor %}"
    "{{ message.content }}<|im_end|>\n{% endfor %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for message in messages %}<|start_header_id|>{{ message.role }}<|end_header_id|>\n\n"
    "{% if message.tool_calls %}<|python_tag|>{{ message.tool_calls[0].function | tojson }}<|eom_id|>"
    "{% else %}{{ message.content }}<|eot_id|>{% endif %}{% endfor %}"
)
LLAMA3_PLAIN = (
    "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n{{ m.content }}<|eot_id|>{% endfor %}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if message.role == 'user' %}[INST]{{ message.content }}[/INST]"
    "{% elif message.tool_calls %}[TOOL_CALLS]{{ message.tool_calls | tojson }}</s>"
    "{% elif message.role == 'tool' %}[TOOL_RESULTS]{{ message.content }}[/TOOL_RESULTS]"
    "{% else %}{{ message.content }}</s>{% endif %}{% endfor %}"
)
DEEPSEEK = (
    "{% for message in messages %}{% if message.role == 'user' %}<｜User｜>{{ message.content }}"
    "{% elif message.tool_calls %}<｜Assistant｜><｜tool▁calls▁begin｜>{% for call in message.tool_calls %}"
    "<｜tool▁call▁begin｜>function<｜tool▁sep｜>{{ call.function.name }}\n```json\n{{ call.function.arguments }}"
    "\n```<｜tool▁call▁end｜>{% endfor %}<｜tool▁calls▁end｜><｜end▁of▁sentence｜>{% endif %}{% endfor %}"
)
PHI4_MINI = (  # the shipped template's layout: tools from the system message's "tools" key
    "{% for message in messages %}{% if message.role == 'system' and message.tools %}<|system|>{{ message.content }}"
    "<|tool|>{{ message.tools }}<|/tool|><|end|>{% else %}<|{{ message.role }}|>{{ message.content }}<|end|>"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
PHI4_MINI_VLLM = "<|system|>Prefix calls with functools: functools[{...}]<|end|>{% for m in messages %}{% endfor %}"
GEMMA = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ 'model' if m.role == 'assistant' else m.role }}\n"
    "{{ m.content | trim }}<end_of_turn>\n{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
GPT_OSS = (
    "{% for m in messages %}<|start|>{{ m.role }}{% if m.role == 'assistant' %}<|channel|>final{% endif %}"
    "<|message|>{{ m.content }}<|end|>{% endfor %}{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)
CHATML_NO_TOOLS = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (HERMES, "hermes"),
        (QWEN3_CODER, "qwen3_coder"),
        (LLAMA3, "llama3_json"),
        (LLAMA3_PLAIN, "llama3_json"),
        (MISTRAL, "mistral"),
        (DEEPSEEK, "deepseek_v3"),
        ({"default": CHATML_NO_TOOLS, "tool_use": HERMES}, "hermes"),
        (PHI4_MINI, "phi4_mini"),
        (PHI4_MINI_VLLM, "phi4_mini"),
        (GEMMA, "hermes"),
        (GPT_OSS, "harmony"),  # no call tokens: the prompted format the project pairs with Gemma
    ],
)
def test_template_picks_the_format(template: str | dict, expected: str) -> None:
    assert detect_parser(template) == expected
    assert parser_for_tokenizer(SimpleNamespace(chat_template=template, all_special_tokens=[])) == expected


def test_special_tokens_when_the_template_shows_none() -> None:
    assert detect_parser(CHATML_NO_TOOLS, ["<|im_end|>", "[TOOL_CALLS]", "[INST]"]) == "mistral"
    added = {7: SimpleNamespace(content="<｜tool▁calls▁begin｜>", special=True)}
    tokenizer = SimpleNamespace(chat_template=None, all_special_tokens=["</s>"], added_tokens_decoder=added)
    assert parser_for_tokenizer(tokenizer) == "deepseek_v3"
    assert detect_parser(None, ["<|endoftext|>", "<|tool|>", "<|/tool|>", "<|end|>"]) == "phi4_mini"
    assert detect_parser(None, ["<bos>", "<start_of_turn>", "<end_of_turn>"]) == "hermes"
    assert detect_parser(None, ["<|return|>", "<|start|>", "<|end|>", "<|channel|>", "<|call|>"]) == "harmony"


def test_no_known_format_is_one_clear_line() -> None:
    with pytest.raises(ValueError) as raised:
        detect_parser(CHATML_NO_TOOLS, ["<|im_start|>", "<|im_end|>"])
    message = str(raised.value)
    assert "\n" not in message and message.startswith("parser: auto found no known tool-call format")
    assert all(name in message for name in PARSERS)


def test_markers_name_registered_parsers_only() -> None:
    assert {name for _, name in FORMAT_MARKERS} <= set(PARSERS)
    with pytest.raises(ValueError, match="parser: 'auto' .* set one of: .*hermes"):
        get_parser("auto")


def test_resolve_in_place_including_mix_entries_and_lazily() -> None:
    calls = []

    def tokenizer():
        calls.append(1)
        return SimpleNamespace(chat_template=LLAMA3, all_special_tokens=[])

    assert resolve_auto_parsers([{"parser": "hermes"}, {}], tokenizer) is None and calls == []
    options = {"mix": [{"name": "arithmetic", "parser": "auto"}, {"name": "frozenlake"}]}
    overrides = {"parser": "auto", "few_shot": 0}
    assert resolve_auto_parsers([options, overrides], tokenizer) == "llama3_json" and calls == [1]
    assert options["mix"][0]["parser"] == "llama3_json" and overrides["parser"] == "llama3_json"
    assert "parser" not in options["mix"][1]


def test_resolved_options_build_the_env() -> None:
    options = {"parser": "auto", "few_shot": 1}
    loaded = (None, SimpleNamespace(chat_template=QWEN3_CODER, all_special_tokens=["<|im_end|>"]))
    assert resolve_auto_parser([options], "some-model", loaded) == "qwen3_coder"
    env = envs.make("arithmetic", **options)
    assert env.parser.name == "qwen3_coder" and env.parser.properties["calculator"]  # the tools' schemas, bound
    assert env.reset(seed=0)[0][0]["content"].count("<function=example_function_name>") == 1


def test_config_errors_name_parser() -> None:
    unknown = (None, SimpleNamespace(chat_template=CHATML_NO_TOOLS, all_special_tokens=[]))
    with pytest.raises(ConfigError, match="^parser: auto found no known"):
        resolve_auto_parser([{"parser": "auto"}], "m", unknown)
    with pytest.raises(ConfigError, match=r"^parser: auto reads the chat template of '\./no/such-model'"):
        resolve_auto_parser([{"parser": "auto"}], "./no/such-model")
    with pytest.raises(ConfigError, match="env: parser: 'auto'"):
        envs.env_factory("arithmetic", {"parser": "auto"})
