"""Prefill waits of uneven sizes across ring wraps on both tables, decode
steps with hints, and waits into caller buffers."""

import time

import numpy as np
import pytest

import engram
from conftest import expected_rows

try:
    import torch
except ImportError:  # torch is optional: its tests skip
    torch = None


def small_ring(model, **options):
    # A 32-token ring (2 chunks of 16): the waits below wrap it many times.
    return engram.open(
        model, chunk_tokens=16, ring_chunks=2, first_chunk_tokens=5,
        read_batch_tokens=8, overlap_threshold=0, **{"format": "f32", **options},
    )


@pytest.mark.parametrize("fmt", ["f32", "raw"])
def test_uneven_waits_across_ring_wraps_on_both_tables(model, fmt):
    with small_ring(model, format=fmt) as e:
        assert e.info.max_wait_tokens == 32
        seq = e.sequence()
        rng = np.random.default_rng(7)
        prompt = rng.integers(0, e.info.vocab_size, 400)
        ids = seq.row_ids(prompt)
        want = [expected_rows(e, t, ids) for t in range(2)]
        sizes = [1, 7, 32, 3, 31, 2, 16, 17, 29, 5]
        with seq.prefill(prompt) as pf:
            assert pf.tokens == 400
            upto = [0, 0]
            step = 0
            while min(upto) < 400:
                # Table 1 lags table 0 as a layer sweep would.
                for table in (0, 1):
                    if table == 1 and upto[1] + 10 > upto[0] and upto[0] < 400:
                        continue
                    n = sizes[step % len(sizes)]
                    step += 1
                    new = min(400, upto[table] + n)
                    got = pf.wait(table, new)
                    assert got.shape[0] == new - upto[table]
                    assert got.tobytes() == want[table][upto[table] : new].tobytes()
                    upto[table] = new


def test_hints_of_both_kinds_are_counted_when_their_step_begins(model):
    with engram.open(model, format="f32", cache_bytes=1 << 20, overlap_threshold=0) as e:
        seq = e.sequence()
        seq.step_begin(5)
        for table in range(2):
            seq.step_wait(table)
        # A draft chain 6, 7 and alternatives 8, 9 of the next token; the
        # next token is 8 and then 7 (not after 6): only the alternative 8
        # can be used.
        seq.hint([6, 7], draft_probs=[0.8, 0.9],
                 alternatives=np.array([8, 9]), alternative_probs=(0.1, 0.05))
        want = seq.row_ids([8, 7])
        for token in (8, 7):
            seq.step_begin(token)
            for table in range(2):
                got = seq.step_wait(table)
                row = 0 if token == 8 else 1
                assert got.tobytes() == expected_rows(e, table, want[row : row + 1]).tobytes()
        use = seq.stats()["hint_use"]
        rows = 2 * 24
        draft, alt = use["draft"], use["alternative"]
        assert draft["rows_read"] + draft["rows_dropped"] == 2 * rows
        assert alt["rows_read"] + alt["rows_dropped"] == 2 * rows
        assert draft["rows_used"] == 0
        assert alt["rows_used"] <= rows and alt["rows_used"] <= alt["rows_read"]
        if alt["rows_read"]:
            assert alt["hit_rate"] == alt["rows_used"] / alt["rows_read"]


def test_decode_steps_with_hints_match_rows(model):
    with engram.open(model, format="f32", cache_bytes=1 << 20, overlap_threshold=0) as e:
        assert e.info.cached
        seq = e.sequence()
        with seq.prefill(np.arange(50, 90)) as pf:
            pf.wait(0, 40)
            pf.wait(1, 40)
        for token in [3, 9, 27, 81, 243, 729]:
            seq.hint([token + 1, token * 2])
            ids = seq.row_ids([token])
            seq.step_begin(token)
            for table in range(2):
                assert seq.step_wait(table).tobytes() == expected_rows(e, table, ids).tobytes()
        assert len(seq) == 46
        stats = seq.stats()
        assert stats["decode"]["stall_per_token_total"]["count"] == 6
        assert seq.stall("decode") == stats["decode"]
        assert e.stats()["cache"]["budget_bytes"] == 1 << 20


def buffers_for(fmt, nbytes):
    """Every kind of caller buffer a wait may fill, by name."""
    kinds = {
        "numpy-u8": lambda: np.zeros(nbytes, np.uint8),
        "bytearray": lambda: bytearray(nbytes),
        "memoryview": lambda: memoryview(bytearray(nbytes)),
    }
    if fmt == "f32":
        kinds["numpy-f32"] = lambda: np.zeros(nbytes // 4, np.float32)
    if torch is not None:
        dtype = torch.float32 if fmt == "f32" else torch.uint8
        kinds["torch"] = lambda: torch.zeros(nbytes // (4 if fmt == "f32" else 1), dtype=dtype)
        if torch.cuda.is_available():
            kinds["torch-pinned"] = lambda: torch.zeros(
                nbytes // (4 if fmt == "f32" else 1), dtype=dtype
            ).pin_memory()
    return kinds


def as_bytes(buf):
    if torch is not None and isinstance(buf, torch.Tensor):
        return buf.numpy().tobytes()
    return bytes(buf) if not isinstance(buf, np.ndarray) else buf.tobytes()


@pytest.mark.parametrize("fmt", ["f32", "raw"])
def test_wait_into_every_buffer_kind(model, fmt):
    with small_ring(model, format=fmt) as e:
        row_bytes = 1024 if fmt == "f32" else 264
        seq = e.sequence()
        prompt = np.arange(200, 300)
        ids = seq.row_ids(prompt)
        want = expected_rows(e, 0, ids)
        token_bytes = 24 * row_bytes
        kinds = buffers_for(fmt, 10 * token_bytes)
        with seq.prefill(prompt) as pf:
            upto = 0
            for name, make in kinds.items():
                buf = make()
                written = pf.wait_into(0, upto + 10, buf)
                assert written == 10 * token_bytes, name
                assert as_bytes(buf)[:written] == want[upto : upto + 10].tobytes(), name
                upto += 10
        step_want = expected_rows(e, 1, seq.row_ids([11]))
        seq.step_begin(11)
        for name, make in buffers_for(fmt, token_bytes).items():
            buf = make()
            assert seq.step_wait_into(1, buf) == token_bytes, name
            assert as_bytes(buf) == step_want.tobytes(), name


def test_wait_into_checks_type_and_size_before_waiting(model):
    with small_ring(model) as e:
        seq = e.sequence()
        with seq.prefill(np.arange(40)) as pf:
            with pytest.raises(engram.ArgumentTypeError, match="dtype float64"):
                pf.wait_into(0, 4, np.zeros(4 * 24 * 256, np.float64))
            with pytest.raises(engram.InvalidArgumentError, match="nothing was consumed"):
                pf.wait_into(0, 4, np.zeros(4 * 24 * 256 - 1, np.float32))
            with pytest.raises(engram.InvalidArgumentError, match="read-only"):
                ro = np.zeros(4 * 24 * 256, np.float32)
                ro.flags.writeable = False
                pf.wait_into(0, 4, ro)
            with pytest.raises(engram.InvalidArgumentError, match="C-contiguous"):
                pf.wait_into(0, 4, np.zeros((2 * 4 * 24, 256), np.float32)[::2])
            with pytest.raises(engram.ArgumentTypeError):
                pf.wait_into(0, 4, bytes(4 * 24 * 1024))
            # Nothing was consumed: the first wait still starts at token 0.
            first = pf.wait(0, 4)
            assert first.shape == (4, 24, 256)
        with pytest.raises(engram.ArgumentTypeError, match="does not hold raw"):
            with engram.open(model, format="raw") as raw_engine:
                s = raw_engine.sequence()
                s.step_begin(1)
                s.step_wait_into(0, np.zeros(24 * 264, np.float32))


@pytest.mark.parametrize("how", ["wait", "wait_into"])
def test_a_wait_as_wide_as_the_ring_hands_its_slots_back_once_copied(model, how):
    # Both waits copy the rows out, so the readers refill the ring without
    # another wait (no reuse store or page-cache warm-up to read into).
    with small_ring(model, reuse_bytes=0, warm_page_cache=0) as e:
        seq = e.sequence()
        prompt = np.arange(1, 129) * 37 % e.info.vocab_size
        ids = seq.row_ids(prompt)
        want = expected_rows(e, 0, ids)
        ring = e.info.max_wait_tokens
        with seq.prefill(prompt) as pf:
            if how == "wait":
                got = pf.wait(0, ring)
            else:
                got = np.empty_like(want[:ring])
                pf.wait_into(0, ring, got)
            assert got.tobytes() == want[:ring].tobytes()
            deadline = time.monotonic() + 10
            while pf.ready_tokens(0) < 2 * ring and time.monotonic() < deadline:
                time.sleep(0.001)
            assert pf.ready_tokens(0) == 2 * ring
            got = pf.wait(0, 2 * ring)
            assert got.tobytes() == want[ring : 2 * ring].tobytes()
