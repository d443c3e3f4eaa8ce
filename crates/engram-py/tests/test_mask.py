"""The mask is a Hugging Face attention_mask (1 real token, 0 padding):
passed straight through it gives the independent reference's row ids."""

import json
import pathlib

import numpy as np
import pytest

import engram
from conftest import SCALE, expected_rows

REFERENCE = (
    pathlib.Path(__file__).resolve().parents[2]
    / "engram/tests/data/hash_vectors.json"
)


@pytest.fixture(scope="module")
def reference():
    doc = json.loads(REFERENCE.read_text())
    cases = {
        case["masked"]: np.array(case["token_rows"], dtype=np.uint32)
        for case in doc["cases"]
        if case["layout"]["scale"] == SCALE
    }
    return doc["tokens"], doc["attention_mask"], cases


@pytest.mark.parametrize(
    "as_mask",
    [
        lambda m: np.array(m, dtype=np.int64),  # a tokenizer's return_tensors="np"
        lambda m: list(m),
        lambda m: np.array(m, dtype=bool),
        lambda m: np.array(m, dtype=np.uint8),
    ],
    ids=["int64", "list", "bool", "uint8"],
)
def test_attention_mask_gives_the_reference_row_ids(engine, reference, as_mask):
    tokens, attention_mask, cases = reference
    assert 0 in attention_mask
    seq = engine.sequence()
    got = seq.row_ids(np.array(tokens), mask=as_mask(attention_mask))
    assert np.array_equal(got, cases[True])
    assert np.array_equal(seq.row_ids(tokens), cases[False])
    assert np.array_equal(seq.row_ids(tokens, mask=[1] * len(tokens)), cases[False])


def test_prefill_with_attention_mask_reads_the_masked_rows(engine, reference):
    tokens, attention_mask, cases = reference
    seq = engine.sequence()
    with seq.prefill(tokens, mask=np.array(attention_mask)) as pf:
        n = len(tokens)
        rows = pf.wait(0, n)
    assert np.array_equal(rows, expected_rows(engine, 0, cases[True]))
