"""Terminal display: a progress bar fed by per-trajectory events, and metric tables.

Progress, logs and reports go to stderr (``console``); listings meant to be piped
(``print_listing``) go to stdout. Redirected to a file (a cluster log), lines are never
wrapped and progress is a plain line every so often, never a bar redrawn with carriage
returns.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from agentic_rl.types import Trajectory

_REDIRECTED = not sys.stderr.isatty()
console = Console(stderr=True, soft_wrap=True, width=200) if _REDIRECTED else Console(stderr=True)
"""Redirected: no wrapping at 80 columns (a metric line stays one line; tables get 200)."""

PLAIN_LINES = 4
"""Redirected, a progress reports this many plain lines (and one at the end)."""


def clock(seconds: float) -> str:
    """``1:02:03`` / ``2:03``: elapsed time and ETA in progress lines."""
    minutes, secs = divmod(int(seconds + 0.5), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


@contextmanager
def progress(total: int, description: str, *, transient: bool = False) -> Iterator[Callable[[str], None]]:
    """Yield ``advance(status)`` for one finished item of ``total``: a bar with elapsed time
    and ETA on a terminal; redirected, a plain line every ``total / PLAIN_LINES`` items.
    ``transient``: the bar goes when done, and redirected output gets no lines (what is
    inside one RL step: the step's own line follows)."""
    if console.is_terminal:
        columns = (TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn())
        columns += (TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=console, transient=transient) as bar:
            task = bar.add_task(description, total=total, status="")
            yield lambda status="": bar.update(task, advance=1, status=status)
        return
    if transient:
        yield lambda status="": None
        return
    started, done, every = time.monotonic(), [0], max(1, -(-total // PLAIN_LINES))

    def advance(status: str = "") -> None:
        done[0] += 1
        if done[0] % every and done[0] != total:
            return
        elapsed = time.monotonic() - started
        eta = elapsed / done[0] * max(total - done[0], 0)
        line = f"{description} {done[0]}/{total}  {status}  elapsed {clock(elapsed)}  eta {clock(eta)}"
        console.print(" ".join(line.split()), markup=False, highlight=False)

    yield advance


@contextmanager
def trajectory_progress(
    total: int, description: str = "rollouts", *, transient: bool = False
) -> Iterator[Callable[[Trajectory | dict], None]]:
    """Yield an ``on_finish`` callback that advances a :func:`progress`: for a finished
    trajectory, showing running accuracy; for a training step's metrics (SFT, DPO), its loss."""
    finished = {"n": 0, "correct": 0}
    with progress(total, description, transient=transient) as advance:

        def on_finish(item: Trajectory | dict) -> None:
            if isinstance(item, dict):
                advance(f"loss {item['loss']:.3f}")
                return
            finished["n"] += 1
            finished["correct"] += int(item.correct)
            advance(f"acc {finished['correct'] / finished['n']:.2f}")

        yield on_finish


class StepClock:
    """The ETA of the RL steps left of ``total``, from the mean ``step_time_s`` of the steps
    seen so far (a resumed run's from where it resumed; evaluations not included)."""

    def __init__(self, total: int) -> None:
        self.total, self.seconds, self.seen = total, 0.0, 0

    def eta(self, metrics: dict[str, float]) -> str:
        self.seconds, self.seen = self.seconds + metrics.get("step_time_s", 0.0), self.seen + 1
        left = max(self.total - int(metrics["step"]) - 1, 0)
        return f"eta {clock(self.seconds / self.seen * left)}"


_HEADLINE = (
    "tool_calls_per_episode",
    "tool_success_rate",
    "malformed_call_rate",
    "mean_turns",
    "mean_response_tokens",
    "mean_reward",
    "infra_error_rate",
)


def metrics_table(metrics: dict[str, float], k: int, title: str = "evaluation") -> Table:
    """The headline metrics first, then every other metric by name."""
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("metric")
    table.add_column("value", justify="right")
    keys = [f"avg@{k}", f"pass@{k}", f"maj@{k}", *_HEADLINE]
    # Then everything else (termination reasons, per-tool and env-reported metrics such as search/*).
    keys += sorted(key for key in metrics if key not in keys)
    for key in keys:
        if key in metrics:
            value = metrics[key]
            table.add_row(key, f"{value:.4f}" if isinstance(value, float) and not value.is_integer() else f"{value:g}")
    return table


def env_labels(metrics: dict[str, float], k: int) -> list[str]:
    """The env labels of a mix's per-env metrics (``avg@{k}@label``), in their order, without ``weighted``."""
    prefix = f"avg@{k}@"
    return [key[len(prefix) :] for key in metrics if key.startswith(prefix) and key != f"{prefix}weighted"]


def without_env_metrics(metrics: dict[str, float], k: int) -> dict[str, float]:
    """``metrics`` less a mix's per-env and weighted copies (``env_table`` shows those)."""
    suffixes = tuple(f"@{label}" for label in (*env_labels(metrics, k), "weighted"))
    return (
        {key: value for key, value in metrics.items() if not key.endswith(suffixes)}
        if len(suffixes) > 1
        else dict(metrics)
    )


def env_table(metrics: dict[str, float], k: int, title: str = "per env") -> Table:
    """A mix's evaluation: one row per headline metric, one column per env, then the
    mix-weighted and the overall (every task equal) values."""
    labels = env_labels(metrics, k)
    mix = f"avg@{k}@weighted" in metrics  # else an env's roles: no weighted column
    table = Table(title=title if mix else "per role", show_header=True, header_style="bold")
    for column in ("metric", *labels, *(["weighted"] if mix else []), "overall"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    for key in (f"avg@{k}", f"pass@{k}", f"maj@{k}", *_HEADLINE):
        cells = [metrics.get(f"{key}@{label}") for label in (*labels, *(["weighted"] if mix else []))] + [
            metrics.get(key)
        ]
        if any(cell is not None for cell in cells):
            table.add_row(key, *("-" if cell is None else f"{cell:.4f}" for cell in cells))
    return table


_STEP_KEYS = (
    ("reward_mean", "reward"),
    ("accuracy", "acc"),
    ("tool_success_rate", "tool ok"),
    ("tool_calls_per_episode", "calls"),
    ("calls_per_episode", "model calls"),
    ("entropy", "ent"),
    ("kl", "kl"),
    ("clip_frac_high", "clip hi"),
    ("grad_norm", "|g|"),
    ("response_length", "len"),
    ("step_time_s", "s"),
)


def print_step(metrics: dict[str, float], total_steps: int, eta: StepClock | None = None) -> None:
    """One compact line per RL step with the key metrics (and the run's ETA)."""
    parts = [f"[bold]step {int(metrics['step']) + 1}/{total_steps}[/]"]
    for key, label in _STEP_KEYS:
        if key in metrics:
            parts.append(f"{label} {metrics[key]:.3g}")
    parts += [
        f"{key[len('reward_mean@') :]} {value:.3g}" for key, value in metrics.items() if key.startswith("reward_mean@")
    ]
    if eta is not None:
        parts.append(eta.eta(metrics))
    console.print("  ".join(parts))


def print_eval(label: str, metrics: dict[str, float], k: int) -> None:
    """One line per evaluation inside a training run."""
    keys = (
        (f"avg@{k}", f"avg@{k}"),
        ("tool_success_rate", "tool ok"),
        ("tool_calls_per_episode", "calls/episode"),
        ("malformed_call_rate", "malformed"),
        ("mean_turns", "turns"),
    )
    console.print(f"[bold]eval {label}[/]: " + "  ".join(f"{name} {metrics[key]:.3f}" for key, name in keys))
    labels = env_labels(metrics, k)
    if labels:
        # a mix: each env's accuracy and the mix-weighted one; an env with roles: each role's
        names = (*labels, "weighted") if f"avg@{k}@weighted" in metrics else labels
        console.print("  " + "  ".join(f"{name} {metrics[f'avg@{k}@{name}']:.3f}" for name in names))


def print_listing(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> None:
    """A listing (``agentic-rl envs``, ``agentic-rl recipes``) on stdout: a table on a
    terminal; piped, one tab-separated line per row and no header, so ``| grep NAME`` and
    ``| cut -f1`` see whole rows."""
    rows = [[" ".join(str(cell).split()) for cell in row] for row in rows]
    if not sys.stdout.isatty():
        for row in rows:
            print("\t".join(row))
        return
    table = Table(show_header=True, header_style="bold")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*map(escape, row))
    Console().print(table)
