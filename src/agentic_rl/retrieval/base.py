"""Documents, the one retriever interface, and corpus files.

Every retriever answers ``search(query, k) -> list[Document]`` (best first) and
``search_batch(queries, k)``. A corpus is JSONL with one ``{"id", "title", "text"}``
object per line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

__all__ = ["Document", "Retriever", "read_corpus", "write_corpus", "format_documents"]


@dataclass(frozen=True)
class Document:
    """One retrieved (or indexed) passage; ``score`` is the retriever's relevance score."""

    id: str
    title: str
    text: str
    score: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Document:
        return cls(
            id=str(data["id"]),
            title=str(data.get("title", "")),
            text=str(data.get("text", "")),
            score=float(data.get("score", 0.0)),
        )


@runtime_checkable
class Retriever(Protocol):
    """Anything that ranks documents for a text query."""

    def search(self, query: str, k: int = 3) -> list[Document]: ...

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Document]]: ...


def read_corpus(path: str | Path) -> Iterator[Document]:
    """Documents of a JSONL corpus; a line without ``id`` or ``text`` fails with its number."""
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: invalid JSON: {exc.msg}") from None
            if not isinstance(data, dict) or "id" not in data or "text" not in data:
                raise ValueError(f'{path}:{number}: expected an object with "id", "title" and "text"')
            yield Document(id=str(data["id"]), title=str(data.get("title", "")), text=str(data["text"]))


def write_corpus(documents: Iterable[Document], path: str | Path) -> Path:
    """Write documents as a JSONL corpus (``id``, ``title``, ``text``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        for doc in documents:
            handle.write(json.dumps({"id": doc.id, "title": doc.title, "text": doc.text}, ensure_ascii=False) + "\n")
    return path


def format_documents(documents: Sequence[Document], *, max_chars: int | None = None) -> str:
    """Search-R1 style observation text: ``Doc 1(Title: ...) text`` per line (``Doc 1: text``
    for a document without a title, as ZeroSearch's simulated documents are).

    ``max_chars`` truncates each document's text (not the title) to that many characters.
    """
    if not documents:
        return "No results."
    lines = []
    for rank, doc in enumerate(documents, start=1):
        text = doc.text
        if max_chars is not None and len(text) > max_chars:
            text = text[:max_chars].rstrip() + "..."
        lines.append(f"Doc {rank}(Title: {doc.title}) {text}" if doc.title else f"Doc {rank}: {text}")
    return "\n".join(lines)
