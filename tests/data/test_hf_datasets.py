"""Task data through Hugging Face datasets: every source kind, the field mapping, one-line
errors, and the GSM8K env reading a test split through it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentic_rl import envs
from agentic_rl.data.hf_datasets import FieldMap, open_dataset, tasks_from_dataset

datasets = pytest.importorskip("datasets", reason="needs the [data] extra")

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k" / "train.jsonl"
ROWS = [
    {"uid": "p1", "problem": "What is 2 + 3?", "solution": "2 + 3 = 5\n#### 5", "level": 1},
    {"uid": "p2", "problem": "What is 4 * 6?", "solution": "4 * 6 = 24\n#### 24", "level": 2},
    {"uid": "p3", "problem": "What is 9 - 7?", "solution": "9 - 7 = 2\n#### 2", "level": 1},
]
FIELDS = {"prompt": "problem", "answer": "solution", "id": "uid", "metadata": ["level"]}


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """load_dataset's Arrow cache under the test's tmp dir, not the user's."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def sources(tmp_path: Path) -> dict[str, object]:
    dataset = datasets.Dataset.from_list(ROWS)
    jsonl = tmp_path / "rows.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    dataset.to_parquet(str(tmp_path / "rows.parquet"))
    dataset.save_to_disk(str(tmp_path / "saved"))
    datasets.DatasetDict({"train": dataset, "test": datasets.Dataset.from_list(ROWS[:1])}).save_to_disk(
        str(tmp_path / "saved_dict")
    )
    arrow = next((tmp_path / "saved").glob("*.arrow"))
    return {
        "jsonl": str(jsonl),
        "parquet": str(tmp_path / "rows.parquet"),
        "arrow": str(arrow),
        "load_from_disk": str(tmp_path / "saved"),
        "load_from_disk dict": str(tmp_path / "saved_dict"),
        "Dataset": dataset,
    }


def test_every_source_gives_the_same_mapped_tasks(tmp_path):
    for kind, source in sources(tmp_path).items():
        tasks = tasks_from_dataset(
            source, fields=FIELDS, split="train", answer=lambda s: s.rpartition("####")[2].strip()
        )
        assert [(t.id, t.prompt, t.answer, t.metadata) for t in tasks] == [
            ("p1", "What is 2 + 3?", "5", {"level": 1}),
            ("p2", "What is 4 * 6?", "24", {"level": 2}),
            ("p3", "What is 9 - 7?", "2", {"level": 1}),
        ], kind


def test_default_mapping_ids_and_metadata(tmp_path):
    dataset = datasets.Dataset.from_list([{"question": "q", "answer": "a", "topic": "t", "extra": 3}])
    (task,) = tasks_from_dataset(dataset, name="demo")
    assert (task.id, task.prompt, task.answer, task.metadata) == ("demo-0", "q", "a", {"topic": "t", "extra": 3})
    assert len(tasks_from_dataset(sources(tmp_path)["Dataset"], fields=FIELDS, num_tasks=2)) == 2


def test_splits_of_a_dataset_dict(tmp_path):
    folder = sources(tmp_path)["load_from_disk dict"]
    assert len(open_dataset(folder, split="test")) == 1
    with pytest.raises(ValueError, match=r"has splits train, test; say which \(split\)"):
        open_dataset(folder)
    with pytest.raises(ValueError, match="no split 'dev'; splits: train, test"):
        open_dataset(folder, split="dev")
    assert len(open_dataset(str(tmp_path / "rows.{split}"), split="parquet")) == 3  # {split} in a path


def test_bad_sources_and_mappings_fail_in_one_line(tmp_path):
    source = sources(tmp_path)["parquet"]
    with pytest.raises(ValueError) as error:
        tasks_from_dataset(source, fields={"prompt": "question"})
    assert (
        str(error.value) == f"fields.prompt: no column 'question' in {source} (columns: uid, problem, solution, level)"
    )
    with pytest.raises(ValueError, match="fields.metadata: no column 'grade'"):
        tasks_from_dataset(source, fields={**FIELDS, "metadata": ["grade"]})
    with pytest.raises(ValueError, match="fields: unknown key 'label'; keys: prompt, answer, id, metadata"):
        FieldMap.of({"label": "x"})
    with pytest.raises(ValueError, match="unknown data format '.txt'"):
        (tmp_path / "rows.txt").write_text("x")
        open_dataset(str(tmp_path / "rows.txt"))
    with pytest.raises(ValueError, match="no such file or folder"):
        open_dataset(str(tmp_path / "missing.parquet"))


def gsm8k_rows(count: int) -> list[dict]:
    if not GSM8K.is_file():
        pytest.skip("the shared GSM8K data is not here")
    with GSM8K.open() as handle:
        return [json.loads(next(handle)) for _ in range(count)]


def test_gsm8k_test_split_through_datasets(tmp_path):
    rows = gsm8k_rows(30)
    # GSM8K in the Hub's shape: a DatasetDict with train and test splits.
    splits = datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows[:20]), "test": datasets.Dataset.from_list(rows[20:])}
    )
    splits.save_to_disk(str(tmp_path / "gsm8k"))
    for name, part in splits.items():
        part.to_parquet(str(tmp_path / f"{name}-00000-of-00001.parquet"))
    expected = [(r["question"], r["answer"].rpartition("####")[2].strip()) for r in rows[20:]]
    for options in (
        {"path": str(tmp_path / "gsm8k")},
        {"path": str(tmp_path / "{split}-00000-of-00001.parquet")},
        {"dataset": splits},
    ):
        env = envs.env_factory("gsm8k", {**options, "tools": []}, split="test")()
        assert [(t.prompt, t.answer) for t in env.tasks] == expected
        envs.check_env(env)
        env.reset(options={"task_index": 0})
        assert env.step({"role": "assistant", "content": f"<answer>{expected[0][1]}</answer>"})[1] == 1.0
    with pytest.raises(ValueError, match="question_field: no column 'prompt'"):
        envs.make("math-python", path=str(tmp_path / "gsm8k"), split="test", question_field="prompt", tools=[])


def test_math_python_maps_id_and_metadata_columns(tmp_path):
    source = sources(tmp_path)["parquet"]
    env = envs.make(
        "math-python",
        path=source,
        question_field="problem",
        answer_field="solution",
        id_field="uid",
        metadata_fields=["level"],
        tools=[],
    )
    assert [(t.id, t.answer, t.metadata["level"]) for t in env.tasks] == [
        ("p1", "5", 1),
        ("p2", "24", 2),
        ("p3", "2", 1),
    ]
    jsonl = sources(tmp_path)["jsonl"]  # JSONL is read directly, with the same mapping and errors
    env = envs.make(
        "math-python", path=jsonl, question_field="problem", answer_field="solution", id_field="uid", tools=[]
    )
    assert [t.id for t in env.tasks] == ["p1", "p2", "p3"]
    with pytest.raises(ValueError, match="id_field: no column 'key' in .*rows.jsonl row 1"):
        envs.make(
            "math-python", path=jsonl, question_field="problem", answer_field="solution", id_field="key", tools=[]
        )
