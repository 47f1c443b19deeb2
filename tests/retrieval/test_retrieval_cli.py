"""``agentic-rl index build`` and the errors of ``retriever serve``."""

from agentic_rl.cli import main
from agentic_rl.retrieval import Document, load_index, write_corpus


def test_index_build_from_jsonl_and_builtin(tmp_path):
    corpus = write_corpus([Document("1", "Zorbu", "Zorbu is the capital of Quandia.")], tmp_path / "c.jsonl")
    assert main(["index", "build", str(corpus), "--output-dir", str(tmp_path / "idx")]) == 0
    assert load_index(tmp_path / "idx").search("Quandia capital", 1)[0].id == "1"
    assert main(["index", "build", "builtin", "--output-dir", str(tmp_path / "demo")]) == 0
    assert load_index(tmp_path / "demo").num_docs > 2000


def test_cli_errors_exit_2(tmp_path, capsys):
    assert main(["index", "build", str(tmp_path / "missing.jsonl"), "--output-dir", str(tmp_path / "x")]) == 2
    assert main(["retriever", "serve", str(tmp_path / "no-index")]) == 2
    assert "index build" in capsys.readouterr().err
