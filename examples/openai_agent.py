"""A plain multi-turn agent with a calculator tool, written only with the `openai` SDK, and
trained with RL through the gateway.

    python examples/openai_agent.py                                  # the embedded SmolLM2-135M on CPU
    python examples/openai_agent.py --model tiny-random --steps 2    # a seconds-long smoke run (CI)

``agent`` is what you would write against any OpenAI-compatible server: it sends the
conversation with a function tool, runs the tool calls the model makes, and returns the
final text. ``agentic_rl.agents.train`` runs it G times per task against the policy
(each run's calls recorded token-exact by the gateway), scores each run with ``reward``,
and updates the policy with GRPO.

The same functions train from the command line:

    agentic-rl train-agent openai_agent:agent --reward openai_agent:reward --tasks tasks.jsonl
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import random
import re

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
SYSTEM = (
    "Solve the problem. Call the calculator tool for the arithmetic, then give the result as <answer>NUMBER</answer>."
)
OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.USub: operator.neg,
}


def calculate(expression: str) -> str:
    """+ - * / on numbers, nothing else (the model's text is untrusted)."""

    def value(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in OPERATORS:
            return OPERATORS[type(node.op)](value(node.operand))
        raise ValueError("only numbers and + - * /")

    try:
        result = value(ast.parse(expression[:200], mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError) as error:
        return f"error: {error}"
    return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


def agent(task: dict, client, max_turns: int = 3) -> str | None:
    """The agent: any OpenAI-compatible ``client``; returns the final reply's text."""
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task["question"]}]
    for _ in range(max_turns):
        reply = client.chat.completions.create(model="policy", messages=messages, tools=TOOLS, max_tokens=64)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            try:
                expression = json.loads(call.function.arguments).get("expression", "")
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculate(str(expression))})
    return None


def reward(answer: str | None, task: dict) -> float:
    """1 for the right number in <answer></answer>, else 0."""
    found = re.search(r"<answer>\s*(-?\d+)\s*</answer>", answer or "")
    return float(found is not None and int(found.group(1)) == task["answer"])


def make_tasks(count: int, seed: int) -> list[dict]:
    generator = random.Random(seed)
    tasks = []
    for index in range(count):
        a, b, c = (generator.randint(2, 60) for _ in range(3))
        tasks.append({"id": f"calc-{seed}-{index}", "question": f"What is {a} * {b} + {c}?", "answer": a * b + c})
    return tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--tasks-per-step", type=int, default=4)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--output-dir", default=None)
    args = parser.parse_args()
    from agentic_rl import agents

    config = {
        "model": {"name": args.model},
        "rl": {"steps": args.steps, "tasks_per_step": args.tasks_per_step, "group_size": args.group_size},
        "rollout": {"max_new_tokens": 64, "max_total_tokens": 1024},
        "optim": {"lr": 1e-6},
        "output_dir": args.output_dir,
    }

    def show(metrics: dict) -> None:
        print(
            f"step {int(metrics['step']) + 1}/{args.steps} reward {metrics['reward_mean']:.3f} calls/episode {metrics['calls_per_episode']:.2f} "
            f"agent_errors {metrics['agent_errors']:.2f} loss {metrics.get('loss', 0.0):.4f}",
            flush=True,
        )

    agents.train(agent, make_tasks(1000, seed=0), reward, config, on_step=show)


if __name__ == "__main__":
    main()
