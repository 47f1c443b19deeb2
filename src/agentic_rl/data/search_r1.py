"""Search-R1's data as the ``search-qa`` env reads it (``qa_path``, ``agentic-rl index build``).

Questions: Search-R1 (Jin et al. 2025) trains on NQ + HotpotQA as FlashRAG publishes them
(``RUC-NLPIR/FlashRAG_datasets``, configs ``nq`` and ``hotpotqa``; the merged
``PeterJinGo/nq_hotpotqa_train`` has the same columns): ``question`` and
``golden_answers``, or the gold list under ``reward_model.ground_truth.target`` in the
verl parquet files. :func:`convert_qa` writes them as QA JSONL
(``{"id", "question", "answers"}`` per line).

Corpus: the Wikipedia-2018 passages Search-R1 retrieves from (``wiki-18.jsonl``, 21M
lines of ``{"id", "contents"}``, the contents ``"Title"`` on the first line and the text
after it). :func:`convert_corpus` streams them (plain or gzipped) into the
``{"id", "title", "text"}`` lines ``agentic-rl index build`` indexes.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from agentic_rl.data.hf_datasets import open_dataset

__all__ = ["convert_corpus", "convert_qa", "qa_row", "wiki_passage"]


def _gold(row: Mapping[str, Any]) -> Any:
    for column in ("golden_answers", "answers", "answer"):
        if row.get(column) is not None:
            return row[column]
    truth = (row.get("reward_model") or {}).get("ground_truth")
    return truth.get("target") if isinstance(truth, Mapping) else truth


def qa_row(row: Mapping[str, Any], *, source: str, index: int) -> dict[str, Any]:
    """One QA line from a FlashRAG / Search-R1 row; ValueError (naming the row) when it has
    no question text or no gold answer."""
    question = row.get("question")
    gold = _gold(row)
    answers = [gold] if isinstance(gold, str) else list(gold) if isinstance(gold, Sequence) else []
    answers = [str(answer).strip() for answer in answers if str(answer).strip()]
    if not isinstance(question, str) or not question.strip() or not answers:
        raise ValueError(
            f"{source}: row {index}: expected a question and golden_answers (or reward_model.ground_truth.target)"
        )
    name = row.get("data_source") or source
    return {"id": f"{name}-{row.get('id', index)}", "question": question.strip(), "answers": answers}


def convert_qa(
    sources: Sequence[str], output: str | Path, *, split: str | None = None, limit: int | None = None
) -> int:
    """The questions of every source (a data file or ``save_to_disk`` folder; ``split``
    picks a DatasetDict's split and fills ``{split}`` in paths), in order, as one QA
    JSONL at ``output``; ``limit`` rows per source at most. Returns the lines written."""
    rows = []
    for source in sources:
        dataset = open_dataset(source, split=split)
        name = Path(str(source).replace("{split}", split or "")).stem
        count = len(dataset) if limit is None else min(limit, len(dataset))
        rows += [qa_row(dataset[i], source=name, index=i) for i in range(count)]
    return _write_lines(rows, output)


def wiki_passage(row: Mapping[str, Any], *, index: int) -> dict[str, str]:
    """A corpus line from a wiki-18 row (``contents``: ``"Title"`` then the text), or from
    one that has ``title`` and ``text`` already."""
    if isinstance(row.get("text"), str):
        title, text = str(row.get("title") or ""), row["text"]
    elif isinstance(row.get("contents"), str):
        head, _, text = row["contents"].partition("\n")
        title = head.strip().removeprefix('"').removesuffix('"')
    else:
        raise ValueError(f"row {index}: expected contents (or title and text)")
    return {"id": str(row.get("id", index)), "title": title, "text": text.strip()}


def _lines(path: Path) -> Iterator[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        yield from handle


def convert_corpus(source: str | Path, output: str | Path, *, limit: int | None = None) -> int:
    """Stream a wiki-18 JSONL (``.jsonl`` or ``.jsonl.gz``) into corpus JSONL at ``output``
    (one passage at a time: the full dump is about 14 GB); ``limit`` passages at most."""
    path = Path(source)
    if not path.is_file():
        raise ValueError(f"{path}: no such file (wiki-18.jsonl or .jsonl.gz)")

    def passages() -> Iterator[dict[str, str]]:
        for index, line in enumerate(_lines(path)):
            if limit is not None and index >= limit:
                return
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}: line {index + 1}: not JSON ({error.msg})") from None
                yield wiki_passage(row, index=index)

    return _write_lines(passages(), output)


def _write_lines(rows, output: str | Path) -> int:
    target = Path(output)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    written = 0
    try:
        with tmp.open("w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")
                written += 1
    except BaseException:
        tmp.unlink(missing_ok=True)  # a failed conversion leaves no half-written file behind
        raise
    tmp.replace(target)
    return written
