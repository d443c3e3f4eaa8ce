"""Rows from Python against Engine.rows and an independent numpy decode of
the bytes in the file, for every format and encoding."""

import numpy as np
import pytest

import engram
from conftest import decode_rows, expected_rows, file_rows


@pytest.mark.parametrize("encoding", ["row264", "lloyd4"])
def test_rows_match_the_file_and_an_independent_decode(models, encoding):
    with engram.open(models[encoding], format="f32", overlap_threshold=0) as e:
        names = {"row264": "e4m3_e8m0_32_row264", "lloyd4": "lloyd4_e5m3_32_r136"}
        assert e.info.encodings == [names[encoding]] * e.info.tables
        for table in range(e.info.tables):
            n = e.info.table_rows[table]
            ids = np.array([0, 1, 2, n // 2, n - 2, n - 1, 17, 17], dtype=np.uint32)
            raw = e.rows(table, ids, format="raw")
            assert raw.dtype == np.uint8
            assert raw.shape == (len(ids), e.info.stored_row_bytes[table])
            assert np.array_equal(raw, file_rows(e, table, ids))
            values = e.rows(table, ids, format="f32")
            assert values.dtype == np.float32 and values.shape == (len(ids), 256)
            want = decode_rows(raw, encoding)
            # Bit-identical, not merely close.
            assert np.array_equal(values.view(np.uint32), want.view(np.uint32))
            assert np.isfinite(values).all() and np.abs(values).max() > 0


def test_hf_checkpoint_rows_equal_the_gguf_rows(models):
    with engram.open(models["hf"], format="f32") as hf, engram.open(models["row264"]) as gguf:
        assert hf.info.table_split == [True, True]
        for table in range(2):
            ids = list(range(0, hf.info.table_rows[table], 997))
            for fmt in ("raw", "f32"):
                assert np.array_equal(hf.rows(table, ids, fmt), gguf.rows(table, ids, fmt))


@pytest.mark.parametrize("fmt", ["f32", "raw"])
@pytest.mark.parametrize("encoding", ["row264", "lloyd4"])
def test_waits_are_bit_identical_to_rows(models, fmt, encoding):
    with engram.open(models[encoding], format=fmt, overlap_threshold=0) as e:
        assert e.info.format == fmt
        seq = e.sequence()
        prompt = np.arange(1000, 1200)
        ids = seq.row_ids(prompt)
        with seq.prefill(prompt) as pf:
            for table in range(2):
                got = pf.wait(table, 200)
                want = expected_rows(e, table, ids)
                assert got.shape == want.shape
                assert got.tobytes() == want.tobytes()
        for token in (5, 6, 7):
            step_ids = seq.row_ids([token])
            seq.step_begin(token)
            for table in range(2):
                got = seq.step_wait(table)
                assert got.tobytes() == expected_rows(e, table, step_ids).tobytes()
