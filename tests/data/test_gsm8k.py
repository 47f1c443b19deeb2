"""GSM8K annotations -> tool-use SFT conversations (real tool outputs, flagged mismatches)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.data import read_jsonl, render_example
from agentic_rl.data.conversations import text_messages
from agentic_rl.data.gsm8k import (
    Annotation,
    ConversionStats,
    convert_example,
    convert_rows,
    parse_rationale,
    results_match,
)
from agentic_rl.envs.math_python import gsm8k_to_sft
from agentic_rl.tools import get_tool, tool
from agentic_rl.tools.python_tool import make_python_tool

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k" / "train.jsonl"
needs_gsm8k = pytest.mark.skipif(not GSM8K.exists(), reason=f"{GSM8K} not present")

# GSM8K train row 2 ("Weng earns $12 an hour..."), copied so the structure test needs no file.
QUESTION = (
    "Weng earns $12 an hour for babysitting. Yesterday, she just did 50 minutes of babysitting. How much did she earn?"
)
RATIONALE = "Weng earns 12/60 = $<<12/60=0.2>>0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $<<0.2*50=10>>10.\n#### 10"


def calls(name: str, arguments: dict, call_id: str) -> list[dict]:
    return [{"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]


def test_parse_rationale():
    annotations, closing, answer = parse_rationale(RATIONALE)
    assert annotations == [
        Annotation("Weng earns 12/60 = $", "12/60", "0.2"),
        Annotation("0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 = $", "0.2*50", "10"),
    ]
    assert (closing, answer) == ("10.", "10")
    assert parse_rationale("no calc\n#### 1,250") == ([], "no calc", "1250")
    assert parse_rationale("<<7>>7\n#### 7")[0] == [Annotation("", "7", None)]
    with pytest.raises(ValueError, match="no '#### <answer>' line"):
        parse_rationale("just text")


@pytest.mark.parametrize(
    ("output", "annotated", "expected"),
    [
        ("24", "24", True),
        ("24.0", "24", True),  # python prints floats
        ("0.30000000000000004", "0.3", True),  # float noise
        ("3.3333333333333335", "3.33", True),  # the annotation rounds to its own decimals
        ("3.3333333333333335", "3", False),  # an integer annotation of a fraction is a mismatch
        ("4", "5", False),
        ("1,000", "1000", True),
        ("Error: division by zero", "0", False),
        ("4", None, False),
    ],
)
def test_results_match(output, annotated, expected):
    assert results_match(output, annotated) is expected


def test_calculator_conversation_structure_hand_checked():
    example = convert_example(QUESTION, RATIONALE, get_tool("calculator"), system_prompt="SYS")
    assert example["messages"] == [
        {"role": "system", "content": "SYS"},
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": "Weng earns 12/60 =",
            "tool_calls": calls("calculator", {"expression": "12/60"}, "call_0"),
        },
        {"role": "tool", "tool_call_id": "call_0", "name": "calculator", "content": "0.2"},
        # The "$" before the annotation moves to the turn that continues with the number.
        {
            "role": "assistant",
            "content": "$0.2 per minute.\nWorking 50 minutes, she earned 0.2 x 50 =",
            "tool_calls": calls("calculator", {"expression": "0.2*50"}, "call_1"),
        },
        {"role": "tool", "tool_call_id": "call_1", "name": "calculator", "content": "10"},
        {"role": "assistant", "content": "$10.\n<answer>10</answer>"},
    ]
    assert example["metadata"] == {"answer": "10", "tool": "calculator", "calls": 2, "mismatches": []}


def test_python_conversation_runs_real_code():
    tool = make_python_tool(timeout_s=5)
    try:
        example = convert_example(QUESTION, RATIONALE, tool)
    finally:
        tool.close()
    messages = example["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert messages[1]["tool_calls"] == calls("python", {"code": "print(12/60)"}, "call_0")
    assert [messages[2]["content"], messages[4]["content"]] == ["0.2", "10.0"]  # what the interpreter printed
    assert example["metadata"]["mismatches"] == []


def test_mismatches_are_flagged_never_faked():
    rows = [
        {"question": "q1", "answer": "2+2 = <<2+2=5>>5\n#### 5"},  # a wrong annotation
        {"question": "q2", "answer": "x = <<2**1000**2=1>>1\n#### 1"},  # the tool refuses it
        {"question": "q3", "answer": "3*3 = <<3*3=9>>9\n#### 9"},
        {"question": "q4", "answer": "no final answer"},
    ]
    calculator = get_tool("calculator")
    kept = list(convert_rows(rows, calculator, keep_mismatches=True))
    wrong = kept[0]
    assert wrong["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_0",
        "name": "calculator",
        "content": "4",
    }  # the real result
    assert wrong["metadata"]["mismatches"] == [
        {"expression": "2+2", "annotated": "5", "tool_output": "4", "tool_ok": True}
    ]
    refused = kept[1]["metadata"]["mismatches"][0]
    assert not refused["tool_ok"] and refused["tool_output"].startswith("Error:")
    assert [e["metadata"]["source_index"] for e in kept] == [0, 1, 2]
    stats = ConversionStats()
    clean = list(convert_rows(rows, calculator, stats=stats))
    assert [e["metadata"]["source_index"] for e in clean] == [2]
    assert (stats.rows, stats.written, stats.flagged, stats.mismatched_calls, stats.calls) == (4, 1, 2, 2, 3)
    assert stats.skipped == ["row 4: no '#### <answer>' line in the rationale"]

    @tool
    def other(expression: str) -> str:
        """Not a GSM8K tool.

        Args:
            expression: Ignored.
        """
        return expression

    with pytest.raises(ValueError, match="tool: expected one of calculator, python"):
        convert_example("q", "#### 1", other)


@needs_gsm8k
@pytest.mark.parametrize(("tool", "parser"), [("calculator", "hermes"), ("python", "retool")])
def test_converted_conversation_replays_token_exactly_in_the_env(tmp_path, tokenizer, tool, parser):
    """A converted conversation, rendered by data.conversations for SFT, gives exactly the
    tokens and loss mask of a rollout in the gsm8k env that writes the same turns."""
    from agentic_rl import envs
    from agentic_rl.chat import ChatRenderer
    from agentic_rl.engines.scripted import ScriptedBackend
    from agentic_rl.rollout import rollout

    out = tmp_path / "sft.jsonl"
    stats = gsm8k_to_sft(GSM8K, out, tool=tool, parser=parser, limit=2)
    assert (stats.rows, stats.written, stats.flagged) == (2, 2, 0)
    example = read_jsonl(out)[0]
    ids, mask = render_example(example["messages"], ChatRenderer(tokenizer), parser)

    replies = [m["content"] for m in text_messages(example["messages"], parser) if m["role"] == "assistant"]
    backend = ScriptedBackend(tokenizer, replies)
    trajectory = rollout(
        backend,
        lambda: envs.make("gsm8k", path=str(GSM8K), num_tasks=2, tools=[tool], parser=parser),
        [0],
        group_size=1,
    )[0].trajectories[0]
    assert trajectory.correct and trajectory.num_turns == len(replies) == 3
    assert [r.content for r in trajectory.tool_results] == [
        m["content"] for m in example["messages"] if m["role"] == "tool"
    ]
    assert trajectory.token_ids == ids and trajectory.loss_mask == mask


@needs_gsm8k
def test_sft_trains_on_converted_data(tmp_path, tiny):
    from agentic_rl.config import SFTConfig
    from agentic_rl.training.sft import train_sft

    out = tmp_path / "sft.jsonl"
    gsm8k_to_sft(GSM8K, out, tool="calculator", limit=4)
    model, tokenizer = copy.deepcopy(tiny[0]), tiny[1]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the tiny model gains nothing from threads on a shared CPU
    try:
        result = train_sft(
            model, tokenizer, read_jsonl(out), SFTConfig(epochs=2, batch_size=4, lr=1e-2, warmup_steps=0)
        )
    finally:
        torch.set_num_threads(threads)
    assert result.examples == 4 and result.steps == 2 and result.losses[1] < result.losses[0]


@needs_gsm8k
def test_cli(tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    assert main(["data", "gsm8k-to-sft", str(GSM8K), "--output", str(out), "--tool", "calculator", "--limit", "3"]) == 0
    rows = read_jsonl(out)
    assert len(rows) == 3 and rows[0]["messages"][1]["content"].startswith("Natalia sold clips")
    assert rows[0]["messages"][-1]["content"].endswith("<answer>72</answer>")
    assert "3 rows -> 3 conversations with 7 calculator calls; 0 flagged" in " ".join(capsys.readouterr().err.split())
    assert main(["data", "gsm8k-to-sft", str(tmp_path / "missing.jsonl"), "--output", str(out)]) == 2
    assert (
        main(["data", "gsm8k-to-sft", str(GSM8K), "--output", str(out), "--tool", "calculator", "--parser", "retool"])
        == 2
    )
    assert "retool format runs python" in capsys.readouterr().err
