"""The recipes for real models on GPUs (examples/configs/gpu/), which cannot run here (no
Hub, no GPU): each validates, the memory planner fits it on its stated hardware (8 x 80 GB,
rank 0's GPU shared with the vLLM server's share), and its data path runs end to end on a
tiny local sample shaped like the published datasets."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from agentic_rl.config import TrainConfig, build
from agentic_rl.envs import make
from agentic_rl.planning.config_plan import plan_config
from agentic_rl.planning.memory import advice
from agentic_rl.recipes import load_recipe
from agentic_rl.training.stages import eval_env_options

GPU = Path(__file__).parents[2] / "examples" / "configs" / "gpu"
RECIPES = sorted(GPU.glob("*.yaml"))
GPUS, GPU_BYTES = 8, 80e9


def _config(path: Path) -> TrainConfig:
    return build(TrainConfig, load_recipe(str(path))[1])


def test_both_recipes_are_there() -> None:
    assert {path.stem for path in RECIPES} == {"search-r1-qwen2.5-3b", "retool-qwen2.5-7b"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.stem)
def test_recipe_validates_and_says_it_was_not_run(path: Path) -> None:
    config = _config(path)
    assert "not yet run on GPUs" in config.description
    assert path.read_text().startswith("# Not yet run on GPUs.")
    assert (config.backend.kind, config.trainer.strategy, config.precision) == ("vllm", "fsdp2", "bf16-mixed")
    assert "/" in config.model.name  # a Hub id


@pytest.mark.parametrize("path", RECIPES, ids=lambda path: path.stem)
def test_the_planner_fits_it_on_8_gpus_beside_the_server(path: Path) -> None:
    config = _config(path)
    plan = plan_config(config, nproc=GPUS, device="cuda")
    assert advice(plan, GPU_BYTES) is None
    share = float(config.backend.vllm_args[config.backend.vllm_args.index("--gpu-memory-utilization") + 1])
    assert plan.peak + share * GPU_BYTES <= GPU_BYTES  # rank 0's GPU holds the server's share too
    # A 7B full fine-tune (fp32 masters + AdamW, ~122 GB) needs the shards; a 3B one fits one GPU
    # and takes 8 for throughput.
    alone = advice(plan_config(config, nproc=1, device="cuda"), GPU_BYTES)
    assert (alone is None) == ("3b" in path.stem), alone


def _parquet(path: Path, rows: list[dict]) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list(rows).to_parquet(str(path))


def test_search_r1_data_index_and_env_on_a_tiny_sample(tmp_path, monkeypatch) -> None:
    from agentic_rl.cli import main

    # NQ / HotpotQA as FlashRAG publishes them, and a verl-style row (gold under reward_model).
    _parquet(
        tmp_path / "train.parquet",
        [
            {"id": "train_0", "question": "who wrote the novel dune", "golden_answers": ["Frank Herbert"]},
            {"id": "train_1", "question": "what is the capital of peru", "golden_answers": ["Lima"]},
        ],
    )
    _parquet(
        tmp_path / "test.parquet",
        [
            {
                "id": "test_0",
                "question": "who wrote the novel dune",
                "data_source": "nq",
                "reward_model": {"style": "rule", "ground_truth": {"target": ["Frank Herbert", "Herbert"]}},
            }
        ],
    )
    wiki = [
        {"id": "0", "contents": '"Dune (novel)"\nDune is a 1965 science fiction novel by Frank Herbert.'},
        {"id": "1", "contents": '"Lima"\nLima is the capital and largest city of Peru.'},
        {"id": "2", "contents": '"Paris"\nParis is the capital of France.'},
    ]
    with gzip.open(tmp_path / "wiki-18.jsonl.gz", "wt") as handle:
        handle.writelines(json.dumps(row) + "\n" for row in wiki)
    data = tmp_path / "data" / "search-r1"
    monkeypatch.chdir(tmp_path)
    for split in ("train", "test"):
        assert main(["data", "search-r1-qa", f"{split}.parquet", "--output", str(data / f"{split}.jsonl")]) == 0
    assert main(["data", "wiki-corpus", "wiki-18.jsonl.gz", "--output", str(data / "wiki-18.jsonl")]) == 0
    assert main(["index", "build", str(data / "wiki-18.jsonl"), "--output-dir", str(data / "wiki-18-bm25")]) == 0
    test_rows = [json.loads(line) for line in (data / "test.jsonl").read_text().splitlines()]
    assert test_rows == [
        {"id": "nq-test_0", "question": "who wrote the novel dune", "answers": ["Frank Herbert", "Herbert"]}
    ]

    # The recipe's own env options, its relative paths resolved in this folder.
    config = _config(GPU / "search-r1-qwen2.5-3b.yaml")
    env = make("search-qa", **eval_env_options(config), split="test")
    messages, _ = env.reset(options={"task_index": 0})
    assert "who wrote the novel dune" in messages[-1]["content"]
    observations, reward, terminated, _, _ = env.step(
        {"role": "assistant", "content": "<search> dune novel author </search>"}
    )
    assert not terminated and "Frank Herbert" in observations[0]["content"]  # retrieved from the built index
    _, reward, terminated, _, _ = env.step({"role": "assistant", "content": "<answer> Herbert </answer>"})
    assert terminated and reward == 1.0


def test_retool_math_data_and_env_on_a_tiny_sample(tmp_path, monkeypatch) -> None:
    # DAPO-Math-17k-Processed's and AIME 2024's columns, as the recipe's data commands write them.
    data = tmp_path / "data"
    data.mkdir()
    _parquet(
        data / "dapo-math-17k.parquet",
        [{"prompt": "What is 7 times 6?", "solution": "42", "data_source": "math_dapo", "ability": "MATH"}],
    )
    _parquet(
        data / "aime-2024.parquet",
        [{"ID": "2024-I-1", "Problem": "Find 2 + 3.", "Solution": "2 + 3 = 5.", "Answer": 5}],
    )
    monkeypatch.chdir(tmp_path)
    config = _config(GPU / "retool-qwen2.5-7b.yaml")
    for options, question, answer in (
        (config.env.options, "What is 7 times 6?", "42"),
        (eval_env_options(config), "Find 2 + 3.", "5"),
    ):
        env = make("math-python", **options)
        try:
            messages, _ = env.reset(options={"task_index": 0})
            assert question in messages[-1]["content"] and "<code>" in messages[0]["content"]
            _, reward, terminated, _, _ = env.step({"role": "assistant", "content": f"<answer>{answer}</answer>"})
            assert terminated and reward == 1.0
        finally:
            env.close()
