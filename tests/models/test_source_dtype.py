"""source_dtype: the dtype a model was published in (what final/ is saved in by default)."""

from __future__ import annotations

import json

import pytest
import torch

from agentic_rl.models import source_dtype


def test_built_in_models_have_their_published_dtype() -> None:
    assert source_dtype("smollm2-135m") == torch.bfloat16  # cached as float32 only because de-quantized from GGUF
    assert source_dtype("tiny-random") == torch.float32


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"torch_dtype": "bfloat16"}, torch.bfloat16),  # older transformers
        ({"dtype": "float16"}, torch.float16),  # newer transformers
        ({"dtype": "bfloat16", "torch_dtype": "float32"}, torch.bfloat16),  # the newer key wins
        ({"model_type": "llama"}, torch.float32),  # missing
        ({"dtype": "int8"}, torch.float32),  # not a floating dtype
        ({"dtype": "no_such_dtype"}, torch.float32),
        ({"dtype": None, "torch_dtype": "bfloat16"}, torch.bfloat16),
    ],
)
def test_local_folder_dtype_comes_from_config_json(tmp_path, config, expected) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert source_dtype(str(tmp_path)) == expected


def test_unreadable_or_absent_config_means_float32(tmp_path) -> None:
    assert source_dtype(str(tmp_path)) == torch.float32  # no config.json
    (tmp_path / "config.json").write_text("{not json")
    assert source_dtype(str(tmp_path)) == torch.float32
    (tmp_path / "config.json").write_text("[1, 2]")
    assert source_dtype(str(tmp_path)) == torch.float32
    assert source_dtype("some-org/some-model") == torch.float32  # a hub id: nothing fetched
