"""Two agents, a planner and a solver, written only with the `openai` SDK and trained with
RL through the gateway, each role with its own credit.

    python examples/multi_agent.py                                  # the embedded SmolLM2-135M on CPU
    python examples/multi_agent.py --model tiny-random --steps 2    # a seconds-long smoke run (CI)

The planner rewrites an arithmetic word problem into a bare expression; the solver
computes that expression with a calculator tool and answers. Each call names its role in
``model`` ("planner", "solver"): the gateway records the role of every call, and
``agentic_rl.agents.train`` makes each role's calls that role's samples, compares a
role's episodes only with the same role's episodes of the same task (a group per task
and role), and scores each role with its own reward: ``reward`` returns
``{"planner": ..., "solver": ...}`` (one number would be every role's). Both roles are
played by the shared policy; their system prompts tell it which one it is.

The same functions train from the command line:

    agentic-rl train-agent multi_agent:agent --reward multi_agent:reward --tasks tasks.jsonl
"""

from __future__ import annotations

import argparse
import json
import random
import re

from openai_agent import TOOLS, calculate  # the calculator of examples/openai_agent.py

PLANNER, SOLVER = "planner", "solver"
"""The roles: what each call sends as its ``model``."""
PLANNER_SYSTEM = (
    "You are the planner. Rewrite the word problem as one arithmetic expression with numbers and + - * / "
    "and parentheses. Reply with the expression only."
)
SOLVER_SYSTEM = (
    "You are the solver. Compute the expression with the calculator tool, then give the result as "
    "<answer>NUMBER</answer>."
)
TEMPLATES = (
    ("Ann has {a} boxes of {b} apples and finds {c} more apples. How many apples does she have?", "{a} * {b} + {c}"),
    ("A train carries {a} cars of {b} people; {c} more people board. How many people ride?", "{a} * {b} + {c}"),
    ("Tom reads {b} pages a day for {a} days, then {c} pages more. How many pages did he read?", "{a} * {b} + {c}"),
)


def plan(task: dict, client) -> str:
    """The planner's turn: the problem in, one expression out (its first line)."""
    messages = [{"role": "system", "content": PLANNER_SYSTEM}, {"role": "user", "content": task["question"]}]
    reply = client.chat.completions.create(model=PLANNER, messages=messages, max_tokens=32)
    lines = (reply.choices[0].message.content or "").strip().splitlines()
    return lines[0].strip() if lines else ""


def solve(expression: str, client, max_turns: int = 3) -> str | None:
    """The solver's turns: the expression in, calculator calls, the final text out."""
    messages = [{"role": "system", "content": SOLVER_SYSTEM}, {"role": "user", "content": expression or "0"}]
    for _ in range(max_turns):
        reply = client.chat.completions.create(model=SOLVER, messages=messages, tools=TOOLS, max_tokens=64)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content
        for call in message.tool_calls:
            try:
                given = json.loads(call.function.arguments).get("expression", "")
            except (json.JSONDecodeError, AttributeError):
                given = ""
            messages.append({"role": "tool", "tool_call_id": call.id, "content": calculate(str(given))})
    return None


def agent(task: dict, client) -> dict:
    """The program: the planner, then the solver on the planner's expression."""
    expression = plan(task, client)
    return {"expression": expression, "answer": solve(expression, client)}


def reward(result: dict, task: dict) -> dict[str, float]:
    """Each role its own credit: the planner for an expression whose value is the task's
    answer, the solver for answering the value of the expression it was given."""
    value = calculate(result["expression"]) if result["expression"] else "error"
    found = re.search(r"<answer>\s*(-?\d+(?:\.\d+)?)\s*</answer>", result["answer"] or "")
    return {
        PLANNER: float(value == str(task["answer"])),
        SOLVER: float(found is not None and not value.startswith("error") and found.group(1) == value),
    }


def make_tasks(count: int, seed: int) -> list[dict]:
    generator = random.Random(seed)
    tasks = []
    for index in range(count):
        a, b, c = (generator.randint(2, 30) for _ in range(3))
        question, expression = generator.choice(TEMPLATES)
        tasks.append(
            {
                "id": f"plan-{seed}-{index}",
                "question": question.format(a=a, b=b, c=c),
                "expression": expression.format(a=a, b=b, c=c),
                "answer": a * b + c,
            }
        )
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
        roles = " ".join(
            f"{role} reward {metrics.get(f'reward_mean@{role}', 0.0):.3f} "
            f"calls {metrics.get(f'calls_per_episode@{role}', 0.0):.2f}"
            for role in (PLANNER, SOLVER)
        )
        print(f"step {int(metrics['step']) + 1}/{args.steps} {roles} loss {metrics.get('loss', 0.0):.4f}", flush=True)

    agents.train(agent, make_tasks(1000, seed=0), reward, config, on_step=show)


if __name__ == "__main__":
    main()
