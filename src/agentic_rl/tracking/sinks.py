"""Metric sinks: where per-step scalar metrics go (JSONL, TensorBoard, W&B, MLflow).

Every sink has the same two methods, so the trainer writes ``sink.log(metrics, step)``
once per step and never branches on where metrics end up. ``make_sinks(run_dir,
names)`` builds them from config names; W&B and MLflow are optional and only used when
their package is importable.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentic_rl.config.secrets import redact_secrets
from agentic_rl.config.sinks import SINK_PACKAGES, check_sink_names
from agentic_rl.tracking.jsonl import JsonlWriter

__all__ = [
    "SINK_NAMES",
    "JsonlSink",
    "MetricSink",
    "MlflowSink",
    "MultiSink",
    "TensorBoardSink",
    "WandbSink",
    "check_sink_names",
    "make_sinks",
]


@runtime_checkable
class MetricSink(Protocol):
    """Receives one flat ``{name: value}`` dict per step."""

    def log(self, metrics: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def _scalars(metrics: dict[str, Any]) -> Iterable[tuple[str, float]]:
    # Scalar backends take finite numbers only; strings, None and NaN/inf are skipped
    # (the JSONL sink keeps the full row, with null for non-finite values).
    for key, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if math.isfinite(value):
            yield key, float(value)


class JsonlSink:
    """One JSON line per step (``metrics.jsonl``), flushed on every write."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._writer = JsonlWriter(self.path)

    def log(self, metrics: dict[str, float], step: int) -> None:
        row = dict(metrics)
        row.setdefault("step", step)  # keep the caller's key order when it already has one
        self._writer.write(row)

    def close(self) -> None:
        self._writer.close()


class TensorBoardSink:
    """TensorBoard event files under ``log_dir`` (``run_dir/tensorboard``), flushed every step.

    Metric names keep their slashes, so ``tool/calculator/success_rate`` lands in a
    ``tool`` section of the TensorBoard UI. ``purge_step``: when resuming at step N,
    pass N so TensorBoard hides the events of steps >= N that the crashed run logged
    after its last checkpoint (they are logged again).
    """

    def __init__(self, log_dir: str | Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._writer = SummaryWriter(log_dir=str(self.log_dir), purge_step=purge_step)

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in _scalars(metrics):
            if key != "step":
                self._writer.add_scalar(key, value, global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


class WandbSink:
    """Weights & Biases, offline unless told otherwise.

    The mode comes from ``WANDB_MODE`` (default ``offline``: files under
    ``run_dir/wandb``, uploadable later with ``wandb sync``); the project from
    ``WANDB_PROJECT`` (default ``agentic-rl``); the run name is the run directory's name.
    """

    def __init__(self, run_dir: str | Path, config: dict[str, Any] | None = None) -> None:
        import wandb

        run_dir = Path(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        self._run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "agentic-rl"),
            name=run_dir.name,
            dir=str(run_dir),
            mode=os.environ.get("WANDB_MODE", "offline"),
            config=redact_secrets(config or {}),  # W&B runs get uploaded: no API keys
            reinit=True,
        )

    def log(self, metrics: dict[str, float], step: int) -> None:
        self._run.log({key: value for key, value in _scalars(metrics) if key != "step"}, step=step)

    def close(self) -> None:
        self._run.finish()


_MLFLOW_BAD_CHARS = re.compile(r"[^A-Za-z0-9_\-. /]")


class MlflowSink:
    """MLflow with a file store inside the run directory (``run_dir/mlruns``), so it
    works offline; ``mlflow ui --backend-store-uri run_dir/mlruns`` browses it.

    MLflow metric names allow letters, digits, ``_ - . / `` and space only, so other
    characters become ``_`` (``avg@4`` is logged as ``avg_4``).
    """

    def __init__(self, run_dir: str | Path, experiment: str = "agentic-rl") -> None:
        from mlflow.tracking import MlflowClient

        store = Path(run_dir).resolve() / "mlruns"
        store.mkdir(parents=True, exist_ok=True)
        self._client = MlflowClient(tracking_uri=store.as_uri())
        found = self._client.get_experiment_by_name(experiment)
        experiment_id = found.experiment_id if found else self._client.create_experiment(experiment)
        self._run_id = self._client.create_run(experiment_id, run_name=Path(run_dir).name).info.run_id

    def log(self, metrics: dict[str, float], step: int) -> None:
        for key, value in _scalars(metrics):
            if key != "step":
                self._client.log_metric(self._run_id, _MLFLOW_BAD_CHARS.sub("_", key), value, step=step)

    def close(self) -> None:
        self._client.set_terminated(self._run_id)


class MultiSink:
    """Fans one ``log`` out to several sinks.

    A failing optional sink (W&B, MLflow, TensorBoard) must not stop training: its first
    error becomes a warning and the sink is dropped. JSONL errors propagate, because the
    run directory's ``metrics.jsonl`` is the record every other tool reads.
    """

    def __init__(self, sinks: Iterable[MetricSink], on_error: Callable[[str], None] | None = None) -> None:
        self.sinks = list(sinks)
        self._on_error = on_error or (lambda message: warnings.warn(message, RuntimeWarning, stacklevel=3))

    def _call(self, sink: MetricSink, method: str, *args: Any) -> bool:
        try:
            getattr(sink, method)(*args)
            return True
        except Exception as exc:
            if isinstance(sink, JsonlSink):
                raise
            self._on_error(f"metric sink {type(sink).__name__} failed in {method}() and was disabled: {exc}")
            return False

    def log(self, metrics: dict[str, float], step: int) -> None:
        self.sinks = [sink for sink in self.sinks if self._call(sink, "log", metrics, step)]

    def close(self) -> None:
        for sink in self.sinks:
            self._call(sink, "close")
        self.sinks = []

    def __enter__(self) -> MultiSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# name -> builder(run_dir, start_step); the names and the packages they need are config's
# (``config.sinks``), so a config is checked before a run starts.
_BUILDERS: dict[str, Callable[[Path, int | None], MetricSink]] = {
    "jsonl": lambda run_dir, start: JsonlSink(run_dir / "metrics.jsonl"),
    "tensorboard": lambda run_dir, start: TensorBoardSink(run_dir / "tensorboard", purge_step=start),
    "wandb": lambda run_dir, start: WandbSink(run_dir),
    "mlflow": lambda run_dir, start: MlflowSink(run_dir),
}
SINK_NAMES: tuple[str, ...] = tuple(SINK_PACKAGES)


def make_sinks(run_dir: str | Path, names: Iterable[str], *, start_step: int | None = None) -> list[MetricSink]:
    """Build the named sinks for a run directory, in order (duplicates dropped).

    Names: ``jsonl`` (``run_dir/metrics.jsonl``), ``tensorboard``
    (``run_dir/tensorboard/``), ``wandb``, ``mlflow`` (``run_dir/mlruns``). Everything
    is validated before any sink is created, so a bad name leaves no files behind.
    ``start_step``: the step a resumed run continues from (TensorBoard purges later
    events of the interrupted run); None for a fresh run.

    Raises:
        ValueError: one line naming an unknown sink, or a requested sink whose package
            is not installed (with the install command).
    """
    run_dir = Path(run_dir)
    wanted = check_sink_names(names)
    run_dir.mkdir(parents=True, exist_ok=True)
    sinks: list[MetricSink] = []
    try:
        for name in wanted:
            sinks.append(_BUILDERS[name](run_dir, start_step))
    except BaseException:
        for sink in sinks:
            sink.close()
        raise
    return sinks
