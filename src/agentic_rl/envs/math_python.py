"""``math-python`` / ``gsm8k``: word problems from any JSONL, solved with a sandboxed
``python`` tool, scored by mathematical equivalence (``math-verify``).

The package ships no data: pass ``path`` (e.g. GSM8K's ``train.jsonl``; or a Parquet /
Arrow file or a ``save_to_disk`` folder, read through Hugging Face ``datasets``), or, in
Python, ``dataset`` (a ``datasets.Dataset`` / ``DatasetDict``). GSM8K answers
(reasoning, then ``#### N``) are understood: the gold answer is the part after ``####``.
Calls use the hermes ``python(code)`` format or ReTool's ``<code>`` / ``<interpreter>``
tags (``parser``); the answer is always ``<answer>...</answer>``. Few-shot demonstrations
are built-in problems converted by :mod:`agentic_rl.data.gsm8k` with real tool outputs.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agentic_rl.data.conversations import read_jsonl, text_messages, write_jsonl
from agentic_rl.data.gsm8k import ANNOTATION, TOOLS, ConversionStats, convert_example, convert_rows
from agentic_rl.data.hf_datasets import FieldMap, check_columns, open_dataset, source_key
from agentic_rl.envs.base import Task
from agentic_rl.envs.tool_env import ToolEnv
from agentic_rl.parsers import DEFAULT_MAX_ARGUMENT_CHARS, get_parser
from agentic_rl.rewards import gold_answer, math_equivalent
from agentic_rl.tools import ToolRegistry, get_tool
from agentic_rl.tools.python_tool import make_python_tool
from agentic_rl.types import Message

SYSTEM_PROMPTS = {
    "python": "You solve math word problems. Use Python to compute (print the values you need), then give the final answer as <answer>NUMBER</answer>.",
    "calculator": "You solve math word problems. Use the calculator tool for each computation, then give the final answer as <answer>NUMBER</answer>.",
    "": "You solve math word problems. Reason step by step, then give the final answer as <answer>NUMBER</answer>.",
}
"""The default instruction by the tool the env offers ("" = no tool); the answer format
matches ``math_reward`` (the last ``<answer>`` of the reply)."""
DEFAULT_SYSTEM_PROMPT = SYSTEM_PROMPTS["python"]

DEMO_PROBLEMS = (
    # Written for this package (not GSM8K items), in GSM8K's annotated format so the
    # converter in data.gsm8k turns them into tool-use turns with real tool outputs.
    {
        "question": "A baker makes 24 muffins every morning and packs them in boxes of 6. How many boxes does she fill in 5 mornings?",
        "answer": "Each morning she fills 24/6 = <<24/6=4>>4 boxes.\nIn 5 mornings she fills 4*5 = <<4*5=20>>20 boxes.\n#### 20",
    },
    {
        "question": "Tom buys 3 notebooks at $2.50 each and a pen for $1.25. He pays with a $20 bill. How much change does he get?",
        "answer": "The notebooks cost 3*2.50 = $<<3*2.50=7.5>>7.50.\nWith the pen he spends 7.50+1.25 = $<<7.5+1.25=8.75>>8.75.\nHis change is 20-8.75 = $<<20-8.75=11.25>>11.25.\n#### 11.25",
    },
    {
        "question": "A train travels 180 km in 2 hours and then 150 km in 3 hours. What is its average speed, in km per hour, over the whole trip?",
        "answer": "It travels 180+150 = <<180+150=330>>330 km in 2+3 = <<2+3=5>>5 hours.\nIts average speed is 330/5 = <<330/5=66>>66 km per hour.\n#### 66",
    },
    {
        "question": "In a class of 32 students, 3/8 chose soccer and the rest split equally between basketball and tennis. How many students chose tennis?",
        "answer": "3/8*32 = <<3/8*32=12>>12 students chose soccer.\nThat leaves 32-12 = <<32-12=20>>20 students.\nHalf of them, 20/2 = <<20/2=10>>10, chose tennis.\n#### 10",
    },
)


def math_reward(answer: str | None, task: Task) -> float:
    return 1.0 if math_equivalent(answer, task.answer) else 0.0


FIELD_OPTIONS = {"prompt": "question_field", "answer": "answer_field", "id": "id_field", "metadata": "metadata_fields"}
"""The math envs' options that map columns (error messages name them)."""


def load_math_tasks(
    source: Any,
    *,
    question_field: str = "question",
    answer_field: str = "answer",
    name: str = "math",
    num_tasks: int | None = None,
    split: str | None = None,
    id_field: str | None = None,
    metadata_fields: Sequence[str] = (),
) -> list[Task]:
    """Math tasks from ``source``: a JSONL path (read directly), any other path or a
    ``datasets`` object (through :func:`agentic_rl.data.hf_datasets.open_dataset`; ``split``
    picks a DatasetDict's split and fills ``{split}`` in a path). The gold answer is the
    part after ``####`` of the answer column (``metadata["solution"]`` keeps it whole);
    ``id_field`` names the id column (default ``{name}-{row}``), ``metadata_fields`` columns
    to keep in the metadata."""
    fields = FieldMap(prompt=question_field, answer=answer_field, id=id_field, metadata=tuple(metadata_fields))
    if isinstance(source, (str, Path)) and "{split}" in str(source) and split is not None:
        source = str(source).replace("{split}", split)
    if isinstance(source, (str, Path)) and str(source).endswith(".jsonl"):
        rows: Any = read_jsonl(source)[: num_tasks or None]
        for index, row in enumerate(rows):
            check_columns(list(row), fields, f"{source} row {index + 1}", option_names=FIELD_OPTIONS)
    else:
        rows = open_dataset(source, split=split)
        check_columns(
            rows.column_names,
            fields,
            str(source) if isinstance(source, (str, Path)) else "the dataset",
            option_names=FIELD_OPTIONS,
        )
        if num_tasks:
            rows = rows.select(range(min(num_tasks, len(rows))))
    tasks = []
    for index, row in enumerate(rows):
        solution = str(row[answer_field])
        task_id = str(row[id_field]) if id_field else f"{name}-{index}"
        metadata = {"solution": solution, **{column: row[column] for column in metadata_fields}}
        tasks.append(Task(id=task_id, prompt=str(row[question_field]), answer=gold_answer(solution), metadata=metadata))
    if not tasks:
        raise ValueError(f"{source}: no tasks")
    return tasks


def make_math_python_env(
    *,
    path: str | None = None,
    dataset: Any = None,
    question_field: str = "question",
    answer_field: str = "answer",
    id_field: str | None = None,
    metadata_fields: Sequence[str] = (),
    split: str | None = None,
    num_tasks: int | None = None,
    tools: Sequence[str] = ("python",),
    parser: str = "hermes",
    max_calls_per_turn: int | None = None,
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    few_shot: int = 0,
    max_turns: int = 4,
    system_prompt: str | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_chars: int = 1024,
    name: str = "math",
    attempts: int = 1,
    attempt_discount: float = 1.0,
    self_critique: bool = False,
    memory: str | dict | bool | None = None,
) -> ToolEnv:
    """Math word problems from a JSONL file, with a sandboxed stateful ``python`` tool.

    Args:
        path: The data file: JSONL (read directly), or Parquet, Arrow or a ``save_to_disk``
            folder (read through Hugging Face ``datasets``, the ``[data]`` extra). Give ``path``
            or ``dataset``, exactly one: the package ships no data.
        dataset: A ``datasets.Dataset`` or ``DatasetDict`` object to read instead of ``path``
            (Python only).
        question_field: The column holding the question (the prompt).
        answer_field: The column holding the gold answer; in GSM8K's form (reasoning, then
            ``#### N``) the gold answer is the part after ``####``, and ``Task.metadata["solution"]``
            keeps the whole text.
        id_field: The column holding task ids. Unset: ids are ``{name}-{row}``.
        metadata_fields: Columns kept in ``Task.metadata`` (beside ``solution``).
        split: Picks a ``DatasetDict``'s split and fills ``{split}`` in ``path``; a single file is
            the split itself.
        tools: ``python`` (a sandboxed, stateful interpreter), ``calculator``, or ``[]`` for none.
            The first of python / calculator picks the default system prompt and the
            demonstrations' tool; without tools the model is told to reason step by step.
        parser: The tool-call format, e.g. ``hermes`` (a ``python(code)`` tool call) or ``retool``
            (code in ``<code>```python ...```</code>``, output in ``<interpreter>``; any
            ``tools`` must include ``python``). The answer is always ``<answer>...</answer>``.
        few_shot: How many solved demonstrations precede the question, from 0 to 4: built-in
            problems (not GSM8K items) converted by :mod:`agentic_rl.data.gsm8k`, with real calls
            to and outputs of the demonstrations' tool (see ``tools``), or the reasoning alone
            without tools.
        name: The prefix of task ids when ``id_field`` is unset (``{name}-{row}``), and the env's
            name in the error for a missing ``path``.
    """
    if not path and dataset is None:
        raise ValueError(
            f"{name}: set env.path to a JSONL / Parquet / Arrow file or a save_to_disk folder (this package ships no data)"
        )
    if path and dataset is not None:
        raise ValueError("dataset: give either path or dataset, not both")
    if not 0 <= few_shot <= len(DEMO_PROBLEMS):
        raise ValueError(f"few_shot: expected an int in [0, {len(DEMO_PROBLEMS)}], got {few_shot}")
    if parser == "retool" and tools and "python" not in tools:
        raise ValueError("parser: the retool format runs python code; add 'python' to tools")
    limit = max_calls_per_turn if max_calls_per_turn is not None else (1 if parser == "retool" else 4)
    call_parser = get_parser(parser, max_calls_per_turn=limit, max_argument_chars=max_argument_chars)
    registry = ToolRegistry(
        make_python_tool(timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=max_output_chars)
        if tool_name == "python"
        else get_tool(tool_name)
        for tool_name in tools
    )
    demo_tool = next((tool_name for tool_name in tools if tool_name in ("python", "calculator")), "")
    if few_shot and tools and not demo_tool:
        raise ValueError("few_shot: demonstrations need the python or calculator tool (or no tools)")
    return ToolEnv(
        _cached_tasks(
            path or dataset, question_field, answer_field, name, num_tasks, split, id_field, tuple(metadata_fields)
        ),
        registry,
        parser=call_parser,
        reward_fn=math_reward,
        max_turns=max_turns,
        system_prompt=SYSTEM_PROMPTS[demo_tool] if system_prompt is None else system_prompt,
        # Fresh dicts per env: the cached demonstrations are shared by every env of the process.
        demonstrations=[
            [dict(message) for message in demo]
            for demo in _demonstrations(few_shot, demo_tool, parser, limit, max_output_chars)
        ],
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=memory,
    )


_CACHE: dict = {}


def _cached_tasks(source, question_field, answer_field, name, num_tasks, split, id_field, metadata_fields):
    key = (source_key(source), question_field, answer_field, name, num_tasks, split, id_field, metadata_fields)
    if key not in _CACHE:  # envs are built per trajectory: read the data once
        _CACHE[key] = load_math_tasks(
            source,
            question_field=question_field,
            answer_field=answer_field,
            name=name,
            num_tasks=num_tasks,
            split=split,
            id_field=id_field,
            metadata_fields=metadata_fields,
        )
    return _CACHE[key]


@functools.lru_cache(maxsize=16)
def _demonstrations(
    count: int, tool_name: str, parser: str, max_calls_per_turn: int, max_output_chars: int
) -> tuple[tuple[Message, ...], ...]:
    """The first ``count`` demo problems as conversation turns, computed once per process
    (envs are built per trajectory; the python demos run in a real sandbox)."""
    if not count:
        return ()
    call_parser = get_parser(parser, max_calls_per_turn=max_calls_per_turn)
    if not tool_name:
        return tuple(
            (
                {"role": "user", "content": row["question"]},
                {"role": "assistant", "content": _answer_only(row["answer"])},
            )
            for row in DEMO_PROBLEMS[:count]
        )
    tool = (
        make_python_tool(timeout_s=10.0, max_output_chars=max_output_chars)
        if tool_name == "python"
        else get_tool(tool_name)
    )
    try:
        demos = []
        for row in DEMO_PROBLEMS[:count]:
            example = convert_example(row["question"], row["answer"], tool)
            if example["metadata"]["mismatches"]:  # a sandbox failure, never silently shown
                raise RuntimeError(f"few-shot demonstration failed to compute: {example['metadata']['mismatches'][0]}")
            demos.append(tuple(text_messages(example["messages"], call_parser)))
        return tuple(demos)
    finally:
        if hasattr(tool, "close"):
            tool.close()


def _answer_only(rationale: str) -> str:
    body, _, answer = rationale.rpartition("####")
    return f"{ANNOTATION.sub('', body).strip()}\n<answer>{gold_answer(answer)}</answer>"


def make_gsm8k_env(
    *,
    path: str | None = None,
    dataset: Any = None,
    split: str | None = None,
    num_tasks: int | None = None,
    tools: Sequence[str] = ("python",),
    parser: str = "hermes",
    max_calls_per_turn: int | None = None,
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    few_shot: int = 0,
    max_turns: int = 4,
    system_prompt: str | None = None,
    timeout_s: float = 5.0,
    memory_mb: int = 512,
    max_output_chars: int = 1024,
    attempts: int = 1,
    attempt_discount: float = 1.0,
    self_critique: bool = False,
    memory: str | dict | bool | None = None,
) -> ToolEnv:
    """GSM8K (``question`` / ``answer`` with ``#### N``) from a path or dataset you give, with the python tool.

    Task ids are ``gsm8k-{row}``; the gold answer is the part after ``####``. Every option
    means what it means for :func:`make_math_python_env` (``options_from`` below).
    """
    return make_math_python_env(
        path=path,
        dataset=dataset,
        split=split,
        num_tasks=num_tasks,
        tools=tools,
        parser=parser,
        max_calls_per_turn=max_calls_per_turn,
        max_argument_chars=max_argument_chars,
        few_shot=few_shot,
        max_turns=max_turns,
        system_prompt=system_prompt,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_output_chars=max_output_chars,
        name="gsm8k",
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=memory,
    )


def gsm8k_to_sft(
    in_path: str | Path,
    out_path: str | Path,
    *,
    tool: str = "calculator",
    parser: str = "hermes",
    keep_mismatches: bool = False,
    limit: int | None = None,
) -> ConversionStats:
    """Convert a GSM8K JSONL file into SFT conversations (JSONL) for the ``gsm8k`` env with
    ``tools=[tool]`` and ``parser``: the system prompt is that env's, and the tool is that
    env's own (same limits), so SFT sees exactly what evaluation shows."""
    if tool not in TOOLS:
        raise ValueError(f"tool: expected one of {', '.join(TOOLS)}, got {tool!r}")
    if parser == "retool" and tool != "python":
        raise ValueError("parser: the retool format runs python code; use tool=python with it")
    rows = read_jsonl(in_path)[: limit or None]
    env = make_gsm8k_env(path=str(in_path), num_tasks=1, tools=[tool], parser=parser)
    stats = ConversionStats()
    try:
        write_jsonl(
            out_path,
            convert_rows(
                rows, env.tools.get(tool), system_prompt=env.system_prompt, keep_mismatches=keep_mismatches, stats=stats
            ),
        )
    finally:
        env.close()
    return stats


make_gsm8k_env.options_from = make_math_python_env  # envs/option_docs.py reads its Args
