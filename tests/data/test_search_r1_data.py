"""Search-R1's questions and corpus as the search-qa env reads them (data/search_r1.py)."""

from __future__ import annotations

import json

import pytest

from agentic_rl.data.search_r1 import convert_corpus, qa_row, wiki_passage


def test_qa_rows_from_flashrag_and_verl_rows() -> None:
    flashrag = {"id": "dev_3", "question": " who is the author ", "golden_answers": ["A. Author", " "]}
    assert qa_row(flashrag, source="nq", index=3) == {
        "id": "nq-dev_3",
        "question": "who is the author",
        "answers": ["A. Author"],
    }
    verl = {"question": "q", "data_source": "hotpotqa", "reward_model": {"ground_truth": {"target": ["x", "y"]}}}
    assert qa_row(verl, source="file", index=7) == {"id": "hotpotqa-7", "question": "q", "answers": ["x", "y"]}
    assert qa_row({"question": "q", "answer": "one"}, source="s", index=0)["answers"] == ["one"]
    for bad in ({"question": "q"}, {"question": "", "golden_answers": ["a"]}, {"golden_answers": ["a"]}):
        with pytest.raises(ValueError, match=r"^s: row 2: expected a question and golden_answers"):
            qa_row(bad, source="s", index=2)


def test_wiki_passages() -> None:
    row = {"id": "12", "contents": '"Lima"\nLima is the capital of Peru.\n'}
    assert wiki_passage(row, index=0) == {"id": "12", "title": "Lima", "text": "Lima is the capital of Peru."}
    assert wiki_passage({"title": "T", "text": "body"}, index=4) == {"id": "4", "title": "T", "text": "body"}
    with pytest.raises(ValueError, match="row 5: expected contents"):
        wiki_passage({"id": "x"}, index=5)


def test_a_corpus_that_fails_midway_leaves_no_file(tmp_path) -> None:
    source = tmp_path / "wiki.jsonl"
    source.write_text(json.dumps({"id": "0", "contents": '"A"\ntext'}) + "\n{not json\n")
    out = tmp_path / "out" / "corpus.jsonl"
    with pytest.raises(ValueError, match=r"wiki.jsonl: line 2: not JSON"):
        convert_corpus(source, out)
    assert list(out.parent.iterdir()) == []
    assert convert_corpus(source, out, limit=1) == 1 and json.loads(out.read_text())["title"] == "A"
    with pytest.raises(ValueError, match="no such file"):
        convert_corpus(tmp_path / "missing.jsonl", out)
