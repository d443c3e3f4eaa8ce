"""Qwen4-Exp models written by third-party writers (PyPI safetensors, gguf,
mlx; scripts/third_party_models.py) through the Python package: the
engine's facts, row ids from an independent hash, and rows equal to the
writers' own decoded values in synchronous reads, prefill waits and decode
steps. .ci/run writes the models into $ENGRAM_THIRD_PARTY."""

import json
import os
import pathlib

import numpy as np
import pytest

import engram


def _manifest():
    root = os.environ.get("ENGRAM_THIRD_PARTY")
    if not root:
        pytest.skip("ENGRAM_THIRD_PARTY is not set (.ci/run writes the third-party models)")
    return json.loads((pathlib.Path(root) / "manifest.json").read_text())


def _cases():
    root = os.environ.get("ENGRAM_THIRD_PARTY")
    if not root:
        return ["unset"]
    return [m["name"] for m in json.loads((pathlib.Path(root) / "manifest.json").read_text())["models"]]


@pytest.mark.parametrize("name", _cases())
def test_third_party_model_gives_the_writers_values(name):
    manifest = _manifest()
    case = next(m for m in manifest["models"] if m["name"] == name)
    dim = manifest["config"]["row_dim"]
    table = np.fromfile(case["values"], dtype="<f4").reshape(-1, dim)
    tokens = np.array(manifest["tokens"], dtype=np.uint32)
    want_ids = np.array(manifest["row_ids"], dtype=np.uint32)
    with engram.open(case["path"], format="f32", overlap_threshold=0) as e:
        info = e.info
        assert (info.tables, info.rows_per_token, info.row_dim) == (1, 16, dim)
        assert info.layer_ids == [1]
        assert info.vocab_size == manifest["config"]["vocab_size"]
        assert info.table_rows == [len(table)]
        every = np.arange(len(table), dtype=np.uint32)
        got = e.rows(0, every, format="f32")
        assert got.shape == (len(table), dim)
        np.testing.assert_array_equal(got.view(np.uint32), table.view(np.uint32))
        with e.sequence() as seq:
            ids = seq.row_ids(tokens)
            assert ids.shape == (len(tokens), 1, 16)
            np.testing.assert_array_equal(ids[:, 0, :], want_ids)
            prompt, decode = tokens[:-8], tokens[-8:]
            with seq.prefill(prompt) as p:
                upto = 0
                while upto < len(prompt):
                    upto = min(upto + 50, len(prompt))
                    view = p.wait(0, upto)
                    first = upto - len(view)
                    want = table[want_ids[first:upto].reshape(-1)].reshape(len(view), 16, dim)
                    np.testing.assert_array_equal(view.view(np.uint32), want.view(np.uint32))
            for i, token in enumerate(decode):
                seq.step_begin(int(token))
                rows = seq.step_wait(0)
                want = table[want_ids[len(prompt) + i]]
                np.testing.assert_array_equal(rows.reshape(16, dim).view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("fmt,encoding", [("hf", None), ("gguf", "q4_0"), ("mlx", None), ("hf", "fp8_e4m3")])
def test_synthetic_qwen_models_open_with_the_release_shape(tmp_path, fmt, encoding):
    path = engram.synth(tmp_path / "m", preset="qwen3.8-flash-next", scale=8192,
                        format=fmt, encoding=encoding)
    with engram.open(path, format="f32", overlap_threshold=0) as e:
        info = e.info
        assert (info.tables, info.rows_per_token, info.row_dim) == (1, 16, 160)
        assert info.layer_ids == [1]
        assert info.vocab_size == 248320
        assert info.table_rows[0] % 128 == 0
        tokens = np.array([248044, 5, 17, 17, 248319, 0, 248044, 248044, 9], dtype=np.uint32)
        with e.sequence() as seq:
            ids = seq.row_ids(tokens)[:, 0, :]
            want = e.rows(0, ids.reshape(-1)).reshape(len(tokens), 16, 160)
            with seq.prefill(tokens[:6]) as p:
                got = p.wait(0, 6)
            np.testing.assert_array_equal(got, want[:6])
            for i, t in enumerate(tokens[6:]):
                seq.step_begin(int(t))
                np.testing.assert_array_equal(seq.step_wait(0).reshape(16, 160), want[6 + i])
        with pytest.raises(engram.InvalidArgumentError):
            with e.sequence() as seq:
                seq.row_ids([248320])
