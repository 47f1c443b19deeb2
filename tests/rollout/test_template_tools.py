"""Tools described by the chat template itself (``apply_chat_template(..., tools=...)``) where
it renders them, and by the parser's prompt in the system message where it does not (the
embedded SmolLM2: byte-identical to the text layout). Rollouts, SFT examples, DPO pairs,
context segments and ARPO replays render the same tokens either way."""

from __future__ import annotations

import json
import re

from agentic_rl import envs
from agentic_rl.chat import ChatRenderer, template_tools_mode
from agentic_rl.config import RolloutConfig
from agentic_rl.data import render_example, trajectory_to_example
from agentic_rl.engines.scripted import ScriptedBackend
from agentic_rl.envs.arithmetic import DEFAULT_SYSTEM_PROMPT
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import HermesParser, get_parser
from agentic_rl.rollout.engine import rollout
from agentic_rl.tools import ToolRegistry
from agentic_rl.tools.calculator import calculator
from agentic_rl.types import ToolCall

PARSER = HermesParser()
SCHEMAS = envs.make("arithmetic").tools.schemas()


def solver(tokenizer):
    """Calls the calculator on the question, then answers with its result."""

    def script(prompt_ids: list[int], call_index: int) -> str:
        text = tokenizer.decode(prompt_ids)
        expression = re.search(r"What is (.+)\?", text).group(1)
        if "<tool_response>\n" not in text:
            return "Computing.\n" + PARSER.format_call(
                ToolCall(name="calculator", arguments={"expression": expression})
            )
        return "<answer>" + text[text.rindex("<tool_response>\n") + 16 :].split("\n</tool_response>")[0] + "</answer>"

    return script


def run(tokenizer, **config):
    [group] = rollout(
        ScriptedBackend(tokenizer, solver(tokenizer)),
        lambda: envs.make("arithmetic"),
        [3],
        config=RolloutConfig(**config),
    )
    [trajectory] = group.trajectories
    assert trajectory.correct and trajectory.num_turns == 2
    return trajectory


def test_detecting_templates_that_render_tools(tokenizer, tools_tokenizer) -> None:
    assert template_tools_mode(tokenizer) is None and not ChatRenderer(tokenizer).render_tools(PARSER)
    assert template_tools_mode(tools_tokenizer) == "argument" and ChatRenderer(tools_tokenizer).render_tools(PARSER)
    assert not ChatRenderer(tools_tokenizer).render_tools(get_parser("search_r1"))  # a tag format describes itself


def test_tools_are_read_from_the_templates_syntax_not_its_text(tokenizer) -> None:
    """A comment or text that mentions tools does not make a template render them; a
    template that reads a message's ``tools`` key (Phi-4-mini's) takes them on the system message."""
    import copy

    def with_template(source: str):
        other = copy.deepcopy(tokenizer)
        other.chat_template = source
        return other

    loop = "{% for m in messages %}{{ m.content }}{% endfor %}"
    assert template_tools_mode(with_template("{# tools are not supported #}" + loop)) is None
    assert template_tools_mode(with_template("You have no tools." + loop)) is None
    assert template_tools_mode(with_template("{% if tools %}{{ tools | tojson }}{% endif %}" + loop)) == "argument"
    reads_key = "{% for m in messages %}{{ m.content }}{% if m['tools'] %}[{{ m['tools'] }}]{% endif %}{% endfor %}"
    assert template_tools_mode(with_template(reads_key)) == "system"
    renderer = ChatRenderer(with_template(reads_key))
    shown = renderer.prompt_text([{"role": "user", "content": "hi"}], tools=SCHEMAS)
    assert shown.startswith('[[{"name": "calculator"') and shown.endswith("hi")


def test_smollm2_keeps_the_tools_prompt_in_the_system_message_byte_for_byte(tokenizer) -> None:
    trajectory = run(tokenizer)
    task = envs.make("arithmetic").tasks[3]
    system = DEFAULT_SYSTEM_PROMPT + "\n\n" + PARSER.format_tools_prompt(SCHEMAS)
    expected = tokenizer.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": task.prompt}],
        tokenize=False,
        add_generation_prompt=True,
    )
    assert (
        trajectory.token_ids[: trajectory.prompt_length] == tokenizer(expected, add_special_tokens=False)["input_ids"]
    )
    assert trajectory.info["tools_prompt"] == "text" and trajectory.template_tools is None
    example = trajectory_to_example(trajectory, PARSER)
    assert "tools" not in example and "tools" not in trajectory.to_dict()
    assert render_example(example["messages"], ChatRenderer(tokenizer), PARSER) == (
        trajectory.token_ids,
        trajectory.loss_mask,
    )


def test_a_template_that_renders_tools_describes_them_and_sft_renders_the_same_tokens(
    tokenizer, tools_tokenizer
) -> None:
    from agentic_rl.training.sft import tokenize_examples

    trajectory = run(tools_tokenizer)
    prompt = tools_tokenizer.decode(trajectory.token_ids[: trajectory.prompt_length])
    assert prompt.startswith(f"<|im_start|>system\n{DEFAULT_SYSTEM_PROMPT}\n\n# Tools\n")
    assert json.dumps(SCHEMAS[0], ensure_ascii=False) in prompt and SCHEMAS[0]["function"]["name"] == "calculator"
    assert "You can call these tools" not in prompt  # the parser's own description is left out
    assert trajectory.messages[0] == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert trajectory.template_tools == SCHEMAS and trajectory.to_dict()["tools"] == SCHEMAS
    example = trajectory_to_example(trajectory, PARSER)
    assert example["tools"] == SCHEMAS
    renderer = ChatRenderer(tools_tokenizer)
    assert render_example(example["messages"], renderer, PARSER, tools=example["tools"]) == (
        trajectory.token_ids,
        trajectory.loss_mask,
    )
    [(ids, mask)], dropped = tokenize_examples([example], tools_tokenizer, PARSER, max_length=4096)
    assert (ids, mask, dropped) == (trajectory.token_ids, trajectory.loss_mask, 0)
    # The same example on a model whose template knows no tools: the text layout a rollout there gives.
    text_mode = run(tokenizer)
    assert render_example(example["messages"], ChatRenderer(tokenizer), PARSER, tools=example["tools"]) == (
        text_mode.token_ids,
        text_mode.loss_mask,
    )


def test_an_env_keeps_its_text_prompt_for_a_tag_format(tools_tokenizer) -> None:
    env = ToolEnv(
        envs.make("arithmetic").tasks, ToolRegistry([calculator]), parser="search_r1", system_prompt="Search."
    )
    messages, info = env.reset(options={"task_index": 0, "tools_prompt": "template"})
    assert info["tools_prompt"] == "text" and messages[0]["content"] == env.system_prompt != "Search."
    hermes = ToolEnv(envs.make("arithmetic").tasks, ToolRegistry([calculator]), system_prompt="Solve.")
    messages, info = hermes.reset(options={"task_index": 0, "tools_prompt": "template"})
    assert (info["tools_prompt"], info["tools"], messages[0]) == (
        "template",
        [calculator.schema()],
        {"role": "system", "content": "Solve."},
    )
    messages, info = hermes.reset(options={"task_index": 0})
    assert info["tools_prompt"] == "text" and messages[0]["content"] == hermes.system_prompt


def test_a_new_context_segment_is_rendered_with_the_tools(tools_tokenizer) -> None:
    answer = solver(tools_tokenizer)

    def twice(prompt_ids: list[int], call_index: int) -> str:  # two calls, so the window cuts the first
        return (
            PARSER.format_call(ToolCall(name="calculator", arguments={"expression": "1 + 1"}))
            if call_index < 2
            else answer(prompt_ids, call_index)
        )

    [group] = rollout(
        ScriptedBackend(tools_tokenizer, twice),
        lambda: envs.make("arithmetic"),
        [3],
        config=RolloutConfig(context="window", context_turns=1),
    )
    [trajectory] = group.trajectories
    [first] = trajectory.segments
    for segment in (first, trajectory):
        assert "# Tools\n" in tools_tokenizer.decode(segment.token_ids[: segment.prompt_length])


def test_dpo_pairs_carry_the_tools(tools_tokenizer) -> None:
    from agentic_rl.training.dpo import pairs_from_rollout_records, tokenize_pairs

    good = run(tools_tokenizer)
    bad = run(tools_tokenizer)
    bad.reward = 0.0
    bad.messages[-1] = {"role": "assistant", "content": "<answer>0</answer>"}
    records = [{**t.to_dict(), "step": 0, "group_id": "g"} for t in (good, bad)]
    [pair] = pairs_from_rollout_records(records, PARSER)
    assert pair["tools"] == SCHEMAS
    [(chosen, _)], _ = tokenize_pairs([pair], tools_tokenizer, PARSER, max_length=4096)
    assert chosen == (good.token_ids, good.loss_mask)


def test_arpo_replays_an_env_reset_for_the_template(tools_tokenizer) -> None:
    from test_arpo import run as arpo_run  # same directory (pytest puts it on sys.path)

    _, [group], stats = arpo_run(tools_tokenizer, budget=3, initial=1)
    assert stats.branches == 2 and stats.replay_mismatches == 0
    assert all("# Tools\n" in tools_tokenizer.decode(t.token_ids[: t.prompt_length]) for t in group.trajectories)


def test_a_template_that_frames_tool_output_gets_bare_results(tokenizer, tools_tokenizer, framing_tokenizer) -> None:
    """Qwen's template writes <tool_response> around a tool message itself: the env, SFT
    examples, DPO pairs and ARPO replays then keep results bare, so the model sees one frame,
    exactly as in its own format; templates that do not frame keep the parser's frame."""
    from agentic_rl.training.dpo import pairs_from_rollout_records, tokenize_pairs
    from agentic_rl.training.sft import tokenize_examples

    framing = ChatRenderer(framing_tokenizer)
    assert (
        framing.frames_tool_output(PARSER)
        and not ChatRenderer(tools_tokenizer).frames_tool_output(PARSER)
        and not ChatRenderer(tokenizer).frames_tool_output(PARSER)
    )
    assert not framing.frames_tool_output(get_parser("search_r1"))  # its frame is <information>
    trajectory = run(framing_tokenizer)
    text = framing_tokenizer.decode(trajectory.token_ids)
    assert text.count("<tool_response>") == 1 and "<tool_response>\n<tool_response>" not in text
    [result] = [m for m in trajectory.messages if m["role"] == "tool"]
    assert (
        result["content"] == trajectory.messages[-1]["content"][len("<answer>") : -len("</answer>")]
    )  # bare: the calculator's output
    assert trajectory.info["tool_output_template"] == framing.tool_output_template
    # SFT: the stored example holds the bare result and renders the rollout's tokens.
    example = trajectory_to_example(trajectory, PARSER)
    assert [m["content"] for m in example["messages"] if m["role"] == "tool"] == [result["content"]]
    assert render_example(example["messages"], framing, PARSER, tools=example["tools"]) == (
        trajectory.token_ids,
        trajectory.loss_mask,
    )
    [(ids, mask)], _ = tokenize_examples([example], framing_tokenizer, PARSER, max_length=4096)
    assert (ids, mask) == (trajectory.token_ids, trajectory.loss_mask)
    # The same example on a template that does not frame: the parser frames, as a rollout there does.
    unframed = run(tools_tokenizer)
    assert render_example(example["messages"], ChatRenderer(tools_tokenizer), PARSER, tools=example["tools"]) == (
        unframed.token_ids,
        unframed.loss_mask,
    )
    # DPO pairs from rollouts.jsonl records.
    bad = run(framing_tokenizer)
    bad.reward = 0.0
    bad.messages[-1] = {"role": "assistant", "content": "<answer>0</answer>"}
    [pair] = pairs_from_rollout_records(
        [{**t.to_dict(), "step": 0, "group_id": "g"} for t in (trajectory, bad)], PARSER
    )
    [(chosen, _)], _ = tokenize_pairs([pair], framing_tokenizer, PARSER, max_length=4096)
    assert chosen == (trajectory.token_ids, trajectory.loss_mask)
    # Demonstrations' results go bare too.
    env = envs.make("arithmetic", few_shot=1)
    messages, _ = env.reset(
        options={"task_index": 0, "tools_prompt": "template", "tool_output_template": framing.tool_output_template}
    )
    [demo_result] = [m for m in messages if m["role"] == "tool"]
    assert not demo_result["content"].startswith("<tool_response>") and demo_result["content"].strip()
    messages, _ = env.reset(
        options={
            "task_index": 0,
            "tools_prompt": "template",
            "tool_output_template": ChatRenderer(tools_tokenizer).tool_output_template,
        }
    )
    assert [m for m in messages if m["role"] == "tool"][0]["content"].startswith("<tool_response>\n")


def test_arpo_replays_a_framing_template(framing_tokenizer) -> None:
    from test_arpo import run as arpo_run

    _, [group], stats = arpo_run(framing_tokenizer, budget=3, initial=1)
    assert stats.branches == 2 and stats.replay_mismatches == 0
    texts = [framing_tokenizer.decode(t.token_ids) for t in group.trajectories]
    assert all("<tool_response>" in text and "<tool_response>\n<tool_response>" not in text for text in texts)
