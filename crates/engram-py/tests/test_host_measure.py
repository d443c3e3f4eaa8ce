"""What the hosts (examples/host_measure.py) compute from a run: the
timeline's sums and series, and the prefill floor on the GPU's own times.
Needs no torch."""

import pathlib
import sys
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
import host_measure  # noqa: E402


def test_the_timeline_sums_labels_and_keeps_each_layers_series_in_order():
    intervals = [("layers", 1.0), ("engram0", 2.0), ("layers", 0.5), ("engram1", 4.0),
                 ("engram0", 3.0), ("engram1", 0.25)]
    assert host_measure.totals(intervals) == {"layers": 1.5, "engram0": 5.0, "engram1": 4.25}
    assert host_measure.series(intervals, "engram0") == [2.0, 3.0]
    assert host_measure.series(intervals, "engram1") == [4.0, 0.25]
    assert host_measure.series(intervals, "engram2") == []


def info(row_bytes, offsets):
    return SimpleNamespace(stored_row_bytes=row_bytes, table_offsets=offsets)


def test_unique_reads_count_first_uses_and_rows_sharing_a_page_once():
    # Two tables, two columns, three tokens; 8-byte rows, so rows 0..511 of
    # table 0 share its first page. Table 1's rows are 4 KiB apart.
    ids = np.array([[[1, 2], [7, 7]],
                    [[2, 600], [7, 8]],
                    [[1, 1], [9, 9]]], dtype=np.uint32)
    reads = host_measure.unique_reads(ids, info([8, 4096], [0, 1 << 20]))
    assert reads[0] == [0, 1, 2, 2]  # rows 1, 2: page 0; row 600: page 1
    assert reads[1] == [0, 1, 2, 3]  # rows 7; 8; 9


def sweep(chunks, layers):
    """A layer sweep's order: every chunk at layer 0, then layer 1, ..."""
    return [(layer, chunk) for layer in range(layers) for chunk in chunks]


def test_the_floor_follows_a_device_of_known_iops_on_the_gpus_times():
    # One table at layer 1, one column, every token a new row: 1,000 reads.
    ids = np.arange(1000, dtype=np.uint32).reshape(1000, 1, 1)
    reads = host_measure.unique_reads(ids, info([4096], [0]))
    order = sweep([(0, 500), (500, 1000)], 2)
    # The GPU's times: layer 0 takes 0.15 s a chunk, the Engram layer 0.1 s.
    intervals = [("layers", 150.0), ("layers", 150.0), ("engram0", 100.0), ("engram0", 100.0)]
    points = host_measure.wait_points(order, intervals, {1: 0}, reads)
    assert [(p["upto"], p["before_ms"], p["reads"]) for p in points] == [
        (500, 300.0, 500), (1000, 400.0, 1000)]
    # 1,000 reads a second: the second wait binds, 1 s of reads after 0.4 s.
    assert host_measure.floor_s(points, 1000.0) == pytest.approx(0.6)
    # Ten times faster: all hidden.
    assert host_measure.floor_s(points, 10000.0) == 0.0
    # No timeline (a CPU run): no points.
    assert host_measure.wait_points(order, [], {1: 0}, reads) == []


def test_a_schedules_idle_is_set_against_the_floor_of_residents_run():
    points = [{"table": 0, "upto": 10, "before_ms": 100.0, "reads": 300}]
    resident = {"prefill": {"floor_points": points,
                            "gpu_ms": {"layers": 900.0, "engram0": 100.0}}}
    overlap = {"prefill": {"gpu_ms": {"layers": 900.0, "engram0": 400.0}}}
    row = host_measure.floor_row([overlap], [resident], 1000.0)
    # The floor: 0.3 s of reads after 0.1 s of compute; compute 1 s.
    assert row["prefill_floor_s"] == pytest.approx(0.2)
    assert row["prefill_floor_of_compute"] == pytest.approx(0.2)
    assert row["prefill_gpu_idle_s"] == pytest.approx(0.3)
    assert row["prefill_gpu_idle_of_compute"] == pytest.approx(0.3)
    assert row["prefill_gpu_idle_over_floor"] == pytest.approx(1.5)
    assert host_measure.floor_row([overlap], [overlap], 1000.0) == {}


def test_a_chunk_sweeps_waits_count_every_table_waited_on_so_far():
    # Two tables (layers 1 and 2), one column, 100 tokens of new rows each.
    ids = np.stack([np.arange(100), 1000 + np.arange(100)], axis=1).reshape(100, 2, 1)
    reads = host_measure.unique_reads(ids.astype(np.uint32), info([4096, 4096], [0, 1 << 30]))
    chunks = [(0, 50), (50, 100)]
    order = [(layer, chunk) for chunk in chunks for layer in range(3)]  # chunk by chunk
    intervals = [("layers", 10.0), ("engram0", 5.0), ("engram1", 5.0)] * 2
    points = host_measure.wait_points(order, intervals, {1: 0, 2: 1}, reads)
    assert [(p["table"], p["upto"], p["before_ms"], p["reads"]) for p in points] == [
        (0, 50, 10.0, 50), (1, 50, 15.0, 100), (0, 100, 30.0, 150), (1, 100, 35.0, 200)]
    # 1,000 reads a second: the last wait binds, 0.2 s of reads after 35 ms.
    assert host_measure.floor_s(points, 1000.0) == pytest.approx(0.165)


def test_the_summary_sets_every_schedule_against_resident_and_flags_a_slower_floor():
    def run(prefill, decode):
        return {"prefill": {"tok_s": prefill}, "decode": {"tok_s": decode}}

    args = SimpleNamespace(layers=4)
    # Two repeats: resident's decode under pinned's in both, its prefill over.
    runs = {"resident": [run(100.0, 9.0), run(100.0, 9.5)],
            "pinned": [run(80.0, 10.0), run(80.0, 10.0)],
            "overlap": [run(50.0, 9.9), run(60.0, 9.8)]}
    rows = {r["schedule"]: r for r in host_measure.summarize(runs, args)}
    overlap = rows["overlap"]
    assert overlap["decode_of_resident"] == pytest.approx((9.9 / 9.0 + 9.8 / 9.5) / 2)
    assert overlap["decode_of_pinned"] == pytest.approx(0.985)
    assert overlap["prefill_of_resident_min"] == pytest.approx(0.5)
    # The floor is resident whatever pinned did; its row says when it was slower.
    resident = rows["resident"]
    assert resident["decode_of_resident"] == 1.0
    assert resident["decode_of_pinned"] == pytest.approx(0.925)
    assert resident["decode_floor_below_pinned"] is True
    assert resident["prefill_floor_below_pinned"] is False
    assert not any(key.endswith("floor_below_pinned") for key in overlap)
    assert not any("_of_floor" in key for row in rows.values() for key in row)
    # Without pinned: nothing to flag.
    rows = host_measure.summarize({"resident": runs["resident"]}, args)
    assert not any("pinned" in key for key in rows[0])
