"""The GIL is released while a call blocks, and sequences on one engine run
from several threads at once."""

import threading
import time

import numpy as np

import engram
from conftest import expected_rows


def test_other_threads_run_while_one_waits(model):
    # Every pread sleeps 20 ms first: an 8-token wait (about 190 rows, 8 reads
    # in flight) takes several hundred ms.
    with engram.open(model, format="f32", inject_latency_us=20_000, overlap_threshold=0, io_depth=8) as e:
        seq = e.sequence()
        done = threading.Event()
        result = {}

        def wait():
            with seq.prefill(np.arange(300, 308)) as pf:
                started = time.perf_counter()
                result["rows"] = pf.wait(0, 8)
                result["wait_s"] = time.perf_counter() - started
            done.set()

        worker = threading.Thread(target=wait)
        worker.start()
        spins = 0
        while not done.wait(0):  # pure Python work: needs the GIL
            spins += 1
        worker.join(timeout=60)
        assert not worker.is_alive()
        print(f"wait {result['wait_s']:.3f} s, {spins} spins meanwhile")
        assert result["wait_s"] > 0.05, result
        # Held GIL: the main thread would get a few switch intervals at best.
        assert spins > 10_000, spins
        assert result["rows"].shape == (8, 24, 256)


def test_four_threads_with_their_own_sequences(model):
    with engram.open(model, format="f32", overlap_threshold=0, chunk_tokens=32, ring_chunks=2) as e:
        errors = []
        barrier = threading.Barrier(4, timeout=30)

        def run(k):
            try:
                seq = e.sequence()
                prompt = np.arange(1000 * k, 1000 * k + 150)
                ids = seq.row_ids(prompt)
                want = [expected_rows(e, t, ids) for t in range(2)]
                barrier.wait()
                with seq.prefill(prompt) as pf:
                    for upto in range(25, 151, 25):
                        for t in range(2):
                            got = pf.wait(t, upto)
                            assert got.tobytes() == want[t][upto - 25 : upto].tobytes()
                for token in range(k, k + 20):
                    step_ids = seq.row_ids([token])
                    seq.step_begin(token)
                    for t in range(2):
                        assert seq.step_wait(t).tobytes() == expected_rows(e, t, step_ids).tobytes()
                seq.close()
            except Exception as err:  # reported by the main thread
                errors.append((k, repr(err)))

        threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        stats = e.stats()
        assert stats["sequences_freed"] == 4
