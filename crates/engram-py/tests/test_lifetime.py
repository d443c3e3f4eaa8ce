"""Arrays handed to Python own their data: they read the same after their
prefill ended, the next prefill ran over the same ring, the next decode
step, and the engine's close."""

import gc

import numpy as np

import engram
from conftest import expected_rows


def test_prefill_array_survives_end_and_the_next_prefill(model):
    e = engram.open(model, format="f32", chunk_tokens=16, ring_chunks=1, overlap_threshold=0)
    seq = e.sequence()
    first_prompt = np.arange(10, 26)
    want = expected_rows(e, 0, seq.row_ids(first_prompt)).copy()
    with seq.prefill(first_prompt) as pf:
        kept = pf.wait(0, 16)
    assert kept.flags.owndata or kept.base is not None
    # The next prefill reuses (overwrites) the same ring slots with other rows.
    second_prompt = np.arange(5000, 5016)
    other = expected_rows(e, 0, seq.row_ids(second_prompt))
    with seq.prefill(second_prompt) as pf:
        again = pf.wait(0, 16)
    assert again.tobytes() == other.tobytes()
    assert other.tobytes() != want.tobytes()
    assert kept.tobytes() == want.tobytes()
    # A decode step, the sequence's and the engine's end change nothing.
    seq.step_begin(3)
    step = seq.step_wait(0)
    step_copy = step.copy()
    seq.step_begin(4)
    seq.step_wait(0)
    seq.close()
    e.close()
    del pf, seq, e
    gc.collect()
    assert kept.tobytes() == want.tobytes()
    assert np.array_equal(step, step_copy)
    kept[0, 0, 0] = 1.0  # writable, and only ours


def test_a_wait_on_an_ended_prefill_is_refused(model):
    with engram.open(model, format="f32", overlap_threshold=0) as e:
        seq = e.sequence()
        pf = seq.prefill([1, 2, 3])
        pf.end()
        pf.end()  # twice is fine
        try:
            pf.wait(0, 3)
        except engram.StateError as err:
            assert "ended" in str(err)
        else:
            raise AssertionError("wait on an ended prefill succeeded")
        # The next prefill on the sequence is a new one; the old object stays ended.
        with seq.prefill([4, 5]) as pf2:
            pf2.wait(0, 2)
            try:
                pf.wait(0, 1)
            except engram.StateError:
                pass
            else:
                raise AssertionError("an old prefill object reached the new prefill")
