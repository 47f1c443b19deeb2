"""``web-qa``: answer questions by researching the web (DeepResearcher, ARPO's deep-search
setting) with ``web_search(query)`` and ``browse(url)``.

Questions and gold answers come from a QA JSONL (``question``, ``answers``); the answer
goes inside ``<answer></answer>`` and is scored by exact match or token F1 (SQuAD
normalization), optionally mixed with a format reward, as in ``search-qa``. Page text and
search results are observations (loss_mask 0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from agentic_rl.envs.search_qa import SearchQAEnv
from agentic_rl.envs.search_sources import QATasks
from agentic_rl.parsers import DEFAULT_MAX_ARGUMENT_CHARS, get_parser
from agentic_rl.tools import ToolRegistry
from agentic_rl.tools.web import WebTools, web_tools
from agentic_rl.types import ToolResult

__all__ = ["WEB_PROMPT", "WebQAEnv", "make_web_qa_env"]

WEB_PROMPT = (
    "You answer questions by researching the web. Use web_search to find pages and browse to read a "
    "page in full; check each fact you need, then give the final answer as <answer>ANSWER</answer>, "
    "a short span with no explanation."
)


class WebQAEnv(SearchQAEnv):
    """``SearchQAEnv`` over the web tools: ``web_search`` calls are the searches; pages
    opened with ``browse`` are counted and count as retrieved text (answer recall)."""

    search_tool_name = "web_search"

    def _reset_episode(self) -> None:
        super()._reset_episode()
        self.pages: list[str] = []
        self.tool_errors = 0

    def record_calls(self, calls, call_results: list[ToolResult], results: list[ToolResult]) -> None:
        super().record_calls(calls, call_results, results)
        for call, result in zip(calls, call_results):
            if not result.ok:
                self.tool_errors += 1
            elif call.name == "browse" and isinstance(call.arguments, dict):
                self.pages.append(str(call.arguments.get("url", "")))
                self.retrieved.append(result.content)

    def episode_metrics(self, trajectory: Any = None) -> dict[str, float]:
        """``search-qa``'s metrics plus ``web/browses`` (pages read) and ``web/tool_errors``
        (calls that failed: timeouts, refused URLs, bad pages)."""
        metrics = super().episode_metrics(trajectory)
        metrics["web/browses"] = float(len(self.pages))
        metrics["web/tool_errors"] = float(self.tool_errors)
        return metrics


def make_web_qa_env(
    *,
    qa_path: str,
    split: str = "train",
    num_tasks: int | None = None,
    web: str | dict | WebTools | None = None,
    max_turns: int = 8,
    reward: Literal["em", "f1"] = "em",
    system_prompt: str | None = None,
    max_calls_per_turn: int = 4,
    max_argument_chars: int = DEFAULT_MAX_ARGUMENT_CHARS,
    attempts: int = 1,
    attempt_discount: float = 1.0,
    self_critique: bool = False,
    memory: str | dict | bool | None = None,
) -> WebQAEnv:
    """Questions from a QA JSONL answered with the web tools (hermes tool calls).

    Args:
        qa_path: The QA JSONL (``question``, ``answers``; optional ``id``); ``{split}`` in the path is replaced by
            the split.
        web: The search provider name (``brave``, ``tavily``; None: brave), a mapping of
            :class:`~agentic_rl.tools.web.WebConfig` fields (search API, caching, timeouts, size caps, domain
            allow/deny lists), or a :class:`WebTools`; the API key is read from the environment.
        reward: ``em`` (exact match) or ``f1`` (token F1) against the gold answers, as in ``search-qa``.
    """
    tasks: Sequence = QATasks(qa_path.replace("{split}", split), num_tasks=num_tasks)
    tools = web if isinstance(web, WebTools) else web_tools(web)
    return WebQAEnv(
        tasks,
        ToolRegistry(tools.tools),
        parser=get_parser("hermes", max_calls_per_turn=max_calls_per_turn, max_argument_chars=max_argument_chars),
        max_turns=max_turns,
        system_prompt=WEB_PROMPT if system_prompt is None else system_prompt,
        reward=reward,
        attempts=attempts,
        attempt_discount=attempt_discount,
        self_critique=self_critique,
        memory=memory,
    )
