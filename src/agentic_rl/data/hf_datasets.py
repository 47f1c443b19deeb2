"""Task data through Hugging Face ``datasets`` (the ``[data]`` extra).

A source is a ``datasets.Dataset`` (or ``DatasetDict``) object, a folder written by
``save_to_disk`` (read with ``load_from_disk``), or a JSONL / JSON / Parquet / Arrow / CSV
file (read with ``load_dataset``). ``{split}`` in a path is replaced by the split; a
``DatasetDict`` (object or folder) is indexed by the split. A :class:`FieldMap` says which
columns hold the prompt, the answer, the id and the metadata.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from os import PathLike
from pathlib import Path
from typing import Any

from agentic_rl.types import Task

__all__ = ["FORMATS", "FieldMap", "check_columns", "open_dataset", "source_key", "tasks_from_dataset"]

FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".arrow": "arrow", ".csv": "csv"}
"""File suffix -> the ``datasets`` builder that reads it."""


@dataclass(frozen=True)
class FieldMap:
    """Which column holds what. ``id`` None: ids are ``{name}-{row}``; ``metadata`` None:
    every other column goes into ``Task.metadata``."""

    prompt: str = "question"
    answer: str = "answer"
    id: str | None = None
    metadata: tuple[str, ...] | None = None

    @classmethod
    def of(cls, value: FieldMap | Mapping[str, Any] | None) -> FieldMap:
        """A field map from a mapping such as ``{"prompt": "problem", "answer": "solution"}``
        (keys left out keep their defaults); an unknown key or a non-text column is a ValueError."""
        if value is None:
            return cls()
        if isinstance(value, FieldMap):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(
                f"fields: expected a mapping of prompt, answer, id, metadata to column names, got {type(value).__name__}"
            )
        known = [f.name for f in dataclass_fields(cls)]
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"fields: unknown key {unknown[0]!r}; keys: {', '.join(known)}")
        for key in ("prompt", "answer", "id"):
            if key in value and not (isinstance(value[key], str) or (key == "id" and value[key] is None)):
                raise ValueError(f"fields.{key}: expected a column name, got {value[key]!r}")
        metadata = value.get("metadata")
        if metadata is not None:
            if (
                isinstance(metadata, str)
                or not isinstance(metadata, Sequence)
                or not all(isinstance(c, str) for c in metadata)
            ):
                raise ValueError(f"fields.metadata: expected a list of column names, got {metadata!r}")
            metadata = tuple(metadata)
        return cls(**{**{k: v for k, v in value.items() if k != "metadata"}, "metadata": metadata})

    def metadata_columns(self, columns: Sequence[str]) -> tuple[str, ...]:
        """The columns that go into ``Task.metadata``."""
        if self.metadata is not None:
            return self.metadata
        return tuple(c for c in columns if c not in (self.prompt, self.answer, self.id))


def _datasets():
    from agentic_rl.optional import require

    return require("datasets", "pip install 'agentic-rl[data]'", "task data through Hugging Face datasets")


def open_dataset(source: Any, *, split: str | None = None, cache_dir: str | None = None):
    """The ``datasets.Dataset`` a source names (see the module docstring).

    ``split`` picks a ``DatasetDict``'s split (needed when it has several) and fills
    ``{split}`` in a path; a single file is the split itself. ``cache_dir``: where
    ``load_dataset`` keeps its Arrow cache (default: the datasets library's).
    """
    datasets = _datasets()
    if isinstance(source, datasets.DatasetDict):
        return _pick_split(source, split, "the DatasetDict")
    if isinstance(source, datasets.Dataset):
        return source
    if not isinstance(source, (str, PathLike)):
        raise ValueError(f"data: expected a path, a datasets.Dataset or a DatasetDict, got {type(source).__name__}")
    text = str(source)
    if "{split}" in text:
        if split is None:
            raise ValueError(f"{text}: the path has {{split}} but no split was given")
        text = text.replace("{split}", split)
    path = Path(text)
    if path.is_dir():
        loaded = datasets.load_from_disk(text)
        return _pick_split(loaded, split, text) if isinstance(loaded, datasets.DatasetDict) else loaded
    if not path.is_file():
        raise ValueError(f"{text}: no such file or folder")
    builder = FORMATS.get(path.suffix.lower())
    if builder is None:
        raise ValueError(
            f"{text}: unknown data format {path.suffix or '(no suffix)'!r}; expected {', '.join(FORMATS)} or a save_to_disk folder"
        )
    return datasets.load_dataset(builder, data_files=text, split="train", cache_dir=cache_dir)


def _pick_split(dataset_dict, split: str | None, where: str):
    names = list(dataset_dict)
    if split is None:
        if len(names) == 1:
            return dataset_dict[names[0]]
        raise ValueError(f"{where}: has splits {', '.join(names)}; say which (split)")
    if split not in dataset_dict:
        raise ValueError(f"{where}: no split {split!r}; splits: {', '.join(names)}")
    return dataset_dict[split]


def check_columns(
    columns: Sequence[str], fields: FieldMap, where: str, *, option_names: Mapping[str, str] | None = None
) -> None:
    """A one-line ValueError naming the first mapped column the data lacks, under the
    option that mapped it (``fields.prompt`` ..., or the caller's ``option_names``)."""
    names = {key: f"fields.{key}" for key in ("prompt", "answer", "id", "metadata")} | dict(option_names or {})
    wanted = [
        ("prompt", fields.prompt),
        ("answer", fields.answer),
        ("id", fields.id),
        *(("metadata", c) for c in fields.metadata or ()),
    ]
    for key, column in wanted:
        if column is not None and column not in columns:
            raise ValueError(f"{names[key]}: no column {column!r} in {where} (columns: {', '.join(columns)})")


def source_key(source: Any) -> Any:
    """A hashable key for caching what was read from ``source``: the path, or the
    ``datasets`` fingerprint(s) of a dataset object."""
    if isinstance(source, (str, PathLike)):
        return str(source)
    fingerprint = getattr(source, "_fingerprint", None)
    if fingerprint is not None:
        return ("dataset", fingerprint)
    if isinstance(source, Mapping):  # a DatasetDict: its splits' fingerprints
        return ("datasets", tuple((name, getattr(part, "_fingerprint", id(part))) for name, part in source.items()))
    return ("object", id(source))


def tasks_from_dataset(
    source: Any,
    *,
    fields: FieldMap | Mapping[str, Any] | None = None,
    split: str | None = None,
    name: str = "task",
    num_tasks: int | None = None,
    answer: Callable[[Any], str] | None = None,
    cache_dir: str | None = None,
) -> list[Task]:
    """Tasks from any source :func:`open_dataset` reads, mapped by ``fields``: the first
    ``num_tasks`` rows (all by default). ``answer`` turns the answer column into the gold
    answer (default ``str``); the prompt is ``str`` of its column."""
    mapping = FieldMap.of(fields)
    dataset = open_dataset(source, split=split, cache_dir=cache_dir)
    where = str(source) if isinstance(source, (str, PathLike)) else "the dataset"
    check_columns(dataset.column_names, mapping, where)
    if num_tasks is not None:
        if num_tasks < 1:
            raise ValueError(f"num_tasks: expected a positive int, got {num_tasks}")
        dataset = dataset.select(range(min(num_tasks, len(dataset))))
    extra = mapping.metadata_columns(dataset.column_names)
    convert = answer or str
    tasks = [
        Task(
            id=str(row[mapping.id]) if mapping.id else f"{name}-{index}",
            prompt=str(row[mapping.prompt]),
            answer=convert(row[mapping.answer]),
            metadata={column: row[column] for column in extra},
        )
        for index, row in enumerate(dataset)
    ]
    if not tasks:
        raise ValueError(f"{where}: no rows")
    return tasks
