"""``multi-search-qa``: several search-qa questions answered in one episode (MEM1's
multi-objective task).

A task bundles ``num_questions`` questions of the built-in search-qa split (task i holds
questions ``i*Q .. i*Q+Q-1``); the agent searches the same corpus with the same
``search`` tool and answers all of them in order in one ``<answer>A1; A2; A3</answer>``.
The reward is the fraction answered right (exact match); ``correct`` means all of them.
The episode is long (one search per hop per question), so it is meant to run with a
bounded context: ``rollout.context`` window or summarize, and optionally the memory tools.
:meth:`MultiSearchEnv.expert_reply` runs the search-qa oracle question by question on the
results of the episode's own searches; it scores 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentic_rl.envs.base import GeneratedTasks, Task
from agentic_rl.envs.search_data import SearchQATasks, oracle_action
from agentic_rl.envs.search_qa import SearchQAEnv
from agentic_rl.envs.search_sources import get_retriever, make_search_tool
from agentic_rl.parsers import DEFAULT_MAX_ARGUMENT_CHARS, get_parser
from agentic_rl.rewards.qa import ANSWER_SEPARATOR, answer_in_text, per_question_exact_match
from agentic_rl.tools import ToolRegistry
from agentic_rl.types import ToolCall

__all__ = ["MultiSearchTasks", "MultiSearchEnv", "make_multi_search_env"]

SYSTEM_PROMPT = (
    "You answer several questions using a document collection. Use the search tool to look up each fact you need, "
    "one entity per search. When you know every answer, give them all in the questions' order inside one "
    "<answer></answer>, separated by semicolons, e.g. <answer>Orvale; 1902; Lina Marsh</answer>."
)


class MultiSearchTasks(GeneratedTasks):
    """Tasks of ``num_questions`` consecutive search-qa questions each (same splits, seeds,
    ``types`` and ``hops`` filters as search-qa)."""

    def __init__(
        self,
        *,
        split: str = "train",
        seed: int = 0,
        num_tasks: int | None = None,
        num_questions: int = 3,
        types: Sequence[str] | None = None,
        hops: int | Sequence[int] | None = None,
    ) -> None:
        if not isinstance(num_questions, int) or isinstance(num_questions, bool) or not 2 <= num_questions <= 8:
            raise ValueError(f"num_questions: expected an int in [2, 8], got {num_questions!r}")
        self.questions = SearchQATasks(split=split, seed=seed, types=types, hops=hops)
        self.num_questions = num_questions
        self.size = len(self.questions) // num_questions if num_tasks is None else num_tasks
        if not 1 <= self.size <= len(self.questions) // num_questions:
            raise ValueError(
                f"num_tasks: expected an int in [1, {len(self.questions) // num_questions}], got {num_tasks}"
            )
        self.split, self.seed = split, seed

    def generate(self, index: int) -> Task:
        parts = [self.questions[index * self.num_questions + j] for j in range(self.num_questions)]
        listed = "\n".join(f"{j}. {part.prompt}" for j, part in enumerate(parts, start=1))
        return Task(
            id=f"multi-search-qa-{self.split}-{self.seed}-{index}",
            prompt=f"Answer these {len(parts)} questions:\n{listed}",
            answer=f"{ANSWER_SEPARATOR} ".join(part.answer for part in parts),
            metadata={"parts": parts, "answers": [part.answer for part in parts]},
        )


class MultiSearchEnv(SearchQAEnv):
    """A :class:`SearchQAEnv` whose answer holds one answer per question; reward: the
    fraction right; ``correct``: all right (search-qa's ``score_answer`` on this ``score``,
    with its ``format_ok`` and terms)."""

    def score(self, answer: str | None) -> tuple[float, dict[str, float]]:
        parts = self.task.metadata["parts"]  # type: ignore[union-attr]
        right = per_question_exact_match(answer, [part.metadata["answers"] for part in parts])
        fraction = sum(right) / len(right)
        return fraction, {"em": fraction, "f1": fraction}

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """search-qa's metrics with ``search/em`` the fraction of questions right, and
        ``search/answer_recall`` the fraction whose answer some search returned."""
        metrics = super().episode_metrics(trajectory)
        if self.task is not None:
            parts = self.task.metadata["parts"]
            found = [any(answer_in_text(part.metadata["answers"], text) for text in self.retrieved) for part in parts]
            metrics["search/answer_recall"] = sum(found) / len(found)
        return metrics

    def expert_reply(self) -> str:
        """The oracle's next message: the search-qa oracle on each question in turn, fed the
        results of this episode's searches in order; once every question has its answer,
        all of them in one ``<answer>``."""
        answers, used = [], 0
        for part in self.task.metadata["parts"]:  # type: ignore[union-attr]
            needed = sum("query" in step for step in part.metadata["plan"])
            seen = self.retrieved[used : used + needed]
            action, value = oracle_action(part, seen)
            if action == "search" and len(seen) < needed:
                return self.parser.format_call(ToolCall(name="search", arguments={"query": value}, id="call_0"))
            answers.append(value)
            used += needed
        return f"<answer>{f'{ANSWER_SEPARATOR} '.join(answers)}</answer>"


def make_multi_search_env(
    *,
    split: str = "train",
    seed: int = 0,
    num_tasks: int | None = None,
    num_questions: int = 3,
    types: Sequence[str] | None = None,
    hops: int | Sequence[int] | None = None,
    top_k: int = 3,
    max_doc_chars: int | None = 300,
    max_turns: int | None = None,
    system_prompt: str | None = None,
    max_calls_per_turn: int = 4,
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    memory: str | dict | bool | None = None,
    plan_first: bool = False,
) -> MultiSearchEnv:
    """Several search-qa questions in one episode, answered with the ``search`` tool (hermes
    format) in one ``<answer>A1; A2; ...</answer>``.

    Args:
        num_questions: Questions per episode, 2 to 8: consecutive questions of the built-in search-qa split,
            answered in order in one answer; the reward is the fraction right.
        types: The built-in search-qa question templates to draw from (names in ``search_data.QUESTION_TYPES``).
        hops: Only questions of 1 (lookup), 2 or 3 hops (bridge, comparison), or of a list of them, e.g. ``[1, 2]``.
        max_turns: Turn limit; None: 3 per question plus one (a 3-hop question needs 3 searches).
    """
    tasks = MultiSearchTasks(
        split=split, seed=seed, num_tasks=num_tasks, num_questions=num_questions, types=types, hops=hops
    )
    search_tool = make_search_tool(get_retriever(seed=seed), top_k=top_k, max_doc_chars=max_doc_chars)
    return MultiSearchEnv(
        tasks,
        ToolRegistry([search_tool]),
        parser=get_parser("hermes", max_calls_per_turn=max_calls_per_turn, max_argument_chars=max_argument_chars),
        max_turns=3 * num_questions + 1 if max_turns is None else max_turns,
        system_prompt=SYSTEM_PROMPT if system_prompt is None else system_prompt,
        memory=memory,
        plan_first=plan_first,
    )
