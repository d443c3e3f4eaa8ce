"""Every bad input of the C ABI's bad_use tests, from Python: the right
exception with the facts, never a crash or a Rust panic."""

import os
import shutil
import sys

import numpy as np
import pytest

import engram

VOCAB = 129_280


def test_the_hierarchy():
    for cls in (engram.IoError, engram.FormatError, engram.RowReadError,
                engram.CorruptRowError, engram.CancelledError,
                engram.InvalidArgumentError, engram.ArgumentTypeError, engram.StateError,
                engram.InternalError):
        assert issubclass(cls, engram.Error)
    assert issubclass(engram.RowReadError, engram.IoError)
    assert issubclass(engram.InvalidArgumentError, ValueError)
    assert issubclass(engram.ArgumentTypeError, TypeError)
    assert issubclass(engram.StateError, RuntimeError)


def test_tables_out_of_range(engine):
    seq = engine.sequence()
    with pytest.raises(engram.InvalidArgumentError, match="table 2 out of range"):
        engine.rows(2, [0])
    with seq.prefill([1, 2, 3]) as pf:
        with pytest.raises(engram.InvalidArgumentError, match="table 9 out of range"):
            pf.wait(9, 1)
        with pytest.raises(engram.InvalidArgumentError, match="table 2 out of range"):
            pf.wait_into(2, 1, np.zeros(24 * 256, np.float32))
    seq.step_begin(1)
    with pytest.raises(engram.InvalidArgumentError, match="table 2 out of range"):
        seq.step_wait(2)
    with pytest.raises(engram.InvalidArgumentError, match="table 2 out of range"):
        seq.step_wait_into(2, np.zeros(24 * 256, np.float32))
    with pytest.raises(engram.InvalidArgumentError, match="row 99999999"):
        engine.rows(0, [99_999_999])


def test_bad_hints_name_the_argument(engine):
    seq = engine.sequence()
    cases = [
        (dict(tokens=[1, 2], draft_probs=[0.5, float("nan")]), r"draft_probs\[1\]"),
        (dict(tokens=[1, 2], draft_probs=[0.5]), "draft_probs"),
        (dict(alternatives=[3, 4], alternative_probs=[0.5]), "alternative_probs"),
        (dict(alternatives=[3]), "alternative_probs"),
        (dict(alternatives=[3], alternative_probs=np.array([1.5])), r"alternative_probs\[0\]"),
        (dict(alternatives=[3], alternative_probs=[-0.1]), r"alternative_probs\[0\]"),
        (dict(tokens=[1] * 17), "draft"),
        (dict(alternatives=[1] * 33, alternative_probs=[0.1] * 33), "alternatives"),
        (dict(alternatives=[3], alternative_probs="x"), "alternative_probs"),
        (dict(alternatives=[-3], alternative_probs=[0.5]), r"alternatives\[0\]"),
    ]
    for kwargs, name in cases:
        with pytest.raises(engram.InvalidArgumentError, match=name):
            seq.hint(**kwargs)
    # Nothing was hinted: a step resolves none.
    seq.step_begin(1)
    use = seq.stats()["hint_use"]
    assert use["draft"]["rows_dropped"] == use["alternative"]["rows_dropped"] == 0


def test_tokens_outside_the_vocabulary_leave_the_sequence_unchanged(engine):
    seq = engine.sequence()
    with pytest.raises(engram.InvalidArgumentError, match="outside the vocabulary"):
        seq.prefill([1, VOCAB, 2])
    with pytest.raises(engram.InvalidArgumentError, match="outside the vocabulary"):
        seq.step_begin(VOCAB + 5)
    with pytest.raises(engram.InvalidArgumentError, match="outside the vocabulary"):
        seq.hint([2**32 - 1])
    with pytest.raises(engram.InvalidArgumentError, match="not a token id"):
        seq.step_begin(-1)
    with pytest.raises(engram.InvalidArgumentError, match=r"tokens\[1\] is -3"):
        seq.prefill(np.array([1, -3]))
    with pytest.raises(engram.InvalidArgumentError, match="not a token id"):
        seq.row_ids([2**40])
    assert len(seq) == 0
    seq.step_begin(7)  # still usable
    assert len(seq) == 1


def test_argument_types(engine):
    seq = engine.sequence()
    with pytest.raises(engram.ArgumentTypeError, match="expected integers"):
        seq.prefill([1.5, 2.0])
    with pytest.raises(engram.ArgumentTypeError, match="expected integers"):
        seq.row_ids(["a", "b"])
    with pytest.raises(engram.InvalidArgumentError, match="1-D"):
        seq.row_ids(np.zeros((2, 2), np.int64))
    with pytest.raises(engram.ArgumentTypeError, match="token"):
        seq.step_begin("7")
    with pytest.raises(engram.ArgumentTypeError, match="token"):
        seq.step_begin(True)
    with pytest.raises(engram.ArgumentTypeError):
        seq.row_ids([1, 2], mask=[0.5, 1.0])
    with pytest.raises(engram.InvalidArgumentError, match="mask has 1 entries for 2 tokens"):
        seq.row_ids([1, 2], mask=[1])
    with pytest.raises(TypeError):
        engine.rows("zero", [1])
    seq.step_begin(np.int64(5))  # numpy scalars are tokens too
    seq.step_begin(np.array(6, dtype=np.uint32))


def test_wrong_state_is_refused_without_consuming(engine):
    seq = engine.sequence()
    with pytest.raises(engram.InvalidArgumentError, match="before step_begin"):
        seq.step_wait(0)
    pf = seq.prefill(np.arange(16))
    with pytest.raises(engram.StateError, match="prefill is open"):
        seq.step_begin(4)
    with pytest.raises(engram.StateError, match="still open"):
        seq.prefill([1])
    pf.wait(1, 8)
    with pytest.raises(engram.InvalidArgumentError, match="waits advance"):
        pf.wait(1, 4)
    with pytest.raises(engram.InvalidArgumentError, match="upto must be in"):
        pf.wait(0, 17)
    with pytest.raises(engram.InvalidArgumentError, match="nothing was consumed"):
        pf.wait_into(1, 16, np.zeros(8 * 24 * 256 - 1, np.float32))
    assert pf.wait(1, 16).shape == (8, 24, 256)
    pf.end()
    with pytest.raises(engram.StateError, match="ended"):
        pf.wait(0, 1)
    seq.step_begin(4)
    with pytest.raises(engram.InvalidArgumentError, match="the rows need 24576"):
        seq.step_wait_into(0, np.zeros(24 * 256 - 1, np.float32))


def test_a_wait_wider_than_the_ring(model):
    with engram.open(model, format="f32", chunk_tokens=8, ring_chunks=2, overlap_threshold=0) as e:
        with e.sequence().prefill(np.arange(40)) as pf:
            with pytest.raises(engram.InvalidArgumentError, match="the ring holds 16"):
                pf.wait(0, 17)


def test_bad_options(model):
    with pytest.raises(engram.InvalidArgumentError, match="I/O depth 0"):
        engram.open(model, io_depth=0)
    with pytest.raises(engram.InvalidArgumentError, match="backend"):
        engram.open(model, backend="floppy")
    with pytest.raises(engram.InvalidArgumentError, match="format"):
        engram.open(model, format="f16")
    with pytest.raises(engram.InvalidArgumentError, match="chunk_tokens"):
        engram.open(model, chunk_tokens=0)
    with pytest.raises(engram.InvalidArgumentError, match="workers"):
        engram.open(model, workers=0)
    with pytest.raises(engram.InvalidArgumentError, match='io_depth = "-1"'):
        engram.open(model, io_depth=-1)
    with pytest.raises(engram.InvalidArgumentError, match='prefetch = "2"'):
        engram.open(model, prefetch=2)
    with pytest.raises(engram.ArgumentTypeError, match="ring_chunks"):
        engram.open(model, ring_chunks=1.5)
    with pytest.raises(TypeError):
        engram.open(model, no_such_option=1)
    with pytest.raises(engram.InvalidArgumentError, match="phase"):
        with engram.open(model) as e:
            e.sequence().stall("warmup")


def test_missing_and_malformed_models(tmp_path, model):
    missing = tmp_path / "nonexistent" / "model.gguf"
    with pytest.raises(engram.IoError) as err:
        engram.open(missing)
    assert err.value.path == str(missing)
    assert err.value.errno == 2
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + bytes(60))
    with pytest.raises(engram.FormatError) as err:
        engram.open(garbage)
    assert err.value.path == str(garbage)
    assert err.value.field


def test_a_bad_hot_file_is_refused_naming_it(tmp_path, model):
    missing = tmp_path / "missing.hot"
    with pytest.raises(engram.IoError) as err:
        engram.open(model, hot_path=missing)
    assert err.value.path == str(missing)
    garbage = tmp_path / "garbage.hot"
    garbage.write_bytes(b"not a hot-row file" * 8)
    with pytest.raises(engram.FormatError) as err:
        engram.open(model, hot_path=garbage)
    assert err.value.path == str(garbage)
    # The engine opens as before without it.
    with engram.open(model, format="f32") as engine:
        assert engine.info.tables == 2


def test_a_truncated_model_file_raises_row_read_error_naming_it(tmp_path, model):
    path = tmp_path / "model.gguf"
    shutil.copy(model, path)
    with engram.open(path, format="f32", overlap_threshold=0) as e:
        info = e.info
        last = info.table_rows[1] - 1
        # Cut the file inside table 1 after the engine opened it.
        os.truncate(path, info.table_offsets[1] + 264 * (last // 2))
        with pytest.raises(engram.RowReadError) as err:
            e.rows(1, [last])
        assert err.value.path == str(path)
        assert err.value.table == 1 and err.value.row == last
        assert err.value.offset == info.table_offsets[1] + 264 * last
        assert str(path) in str(err.value)


def test_a_corrupt_row_raises_corrupt_row_error(tmp_path, model):
    path = tmp_path / "model.gguf"
    shutil.copy(model, path)
    with engram.open(path, format="f32") as e:
        offset = e.info.table_offsets[0] + 264 * 5
    with open(path, "r+b") as f:
        f.seek(offset + 3)
        f.write(b"\x7f")  # an E4M3 NaN code
    with engram.open(path, format="f32", overlap_threshold=0) as e:
        assert e.rows(0, [5], format="raw")[0, 3] == 0x7F
        with pytest.raises(engram.CorruptRowError) as err:
            e.rows(0, [4, 5])
        assert (err.value.table, err.value.row) == (0, 5)
        seq = e.sequence()
        ids = seq.row_ids(np.arange(VOCAB - 2000, VOCAB))
        # A prompt whose rows include row 5 fails its wait with the same facts.
        hit = np.nonzero((ids[:, 0, :] == 5).any(axis=1))[0]
        assert len(hit) > 0, "the prompt should reach row 5"
        with seq.prefill(np.arange(VOCAB - 2000, VOCAB)) as pf:
            with pytest.raises(engram.CorruptRowError) as err:
                pf.wait(0, int(hit[0]) + 1)
            assert (err.value.table, err.value.row) == (0, 5)


def test_closing_the_engine_cancels_open_sequences(model):
    e = engram.open(model, format="f32")
    seq = e.sequence()
    e.close()
    e.close()  # twice is fine
    with pytest.raises(engram.CancelledError):
        seq.step_begin(1)
    with pytest.raises(engram.StateError, match="closed"):
        e.sequence()
    seq.close()
    with pytest.raises(engram.StateError, match="closed"):
        seq.step_begin(1)


def test_no_bad_input_reaches_a_rust_panic(engine):
    """Odd values in every argument: each call returns or raises an ordinary
    exception; a Rust panic would surface as a BaseException that is not an
    Exception and fail the test."""
    odd = [None, -1, 0, 2**31, 2**64, 1.5, "x", b"\x00", [], [[1]], [-1], [2**33],
           np.zeros(0), np.zeros((0, 3)), np.full(3, np.nan), np.array([True]),
           bytearray(3), memoryview(b"ro"), object()]
    seq = engine.sequence()
    calls = [
        lambda v: engine.rows(0, v),
        lambda v: engine.rows(v, [1]),
        lambda v: engine.rows(0, [1], format=v),
        lambda v: seq.row_ids(v),
        lambda v: seq.row_ids([1, 2, 3], mask=v),
        lambda v: seq.hint(v),
        lambda v: seq.step_begin(v),
        lambda v: seq.step_wait(v),
        lambda v: seq.step_wait_into(0, v),
        lambda v: seq.stall(v),
        lambda v: seq.rollback(v),
    ]
    for call in calls:
        for value in odd:
            try:
                call(value)
            except Exception:
                pass  # any ordinary exception is fine; BaseException escapes
    with seq.prefill([1, 2, 3]) as pf:
        for value in odd:
            for call in (lambda v: pf.wait(0, v), lambda v: pf.wait(v, 1),
                         lambda v: pf.wait_into(0, 3, v), lambda v: pf.ready_tokens(v)):
                try:
                    call(value)
                except Exception:
                    pass


def test_without_numpy_the_import_fails_saying_so():
    # A `pip install --no-deps` leaves numpy out: the import must say so,
    # not panic at the first array. Blocking the module in a fresh
    # interpreter stands in for its absence.
    import subprocess
    import sys

    code = "import sys; sys.modules['numpy'] = None; import engram"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    assert "ImportError: engram needs numpy" in done.stderr, done.stderr


def test_a_bad_reader_class_is_named(model):
    with pytest.raises(engram.InvalidArgumentError, match='readers = "fast"'):
        engram.open(model, readers="fast")


def test_env_applies_only_when_asked_and_a_bad_value_is_named(model, monkeypatch):
    monkeypatch.setenv("ENGRAM_REUSE_MIB", "3")
    monkeypatch.setenv("ENGRAM_PREFETCH", "0")
    with engram.open(model, format="f32") as e:
        assert (e.options["prefetch"], e.options["reuse_bytes"]) == ("1", str(16 << 20))
    with engram.open(model, format="f32", env=True) as e:
        assert (e.options["prefetch"], e.options["reuse_bytes"]) == ("0", str(3 << 20))
    # A keyword overrides the environment.
    with engram.open(model, format="f32", env=True, prefetch=True) as e:
        assert e.options["prefetch"] == "1"
    for var, value in (("ENGRAM_READERS", "fast"), ("ENGRAM_REUSE_MIB", "lots")):
        monkeypatch.setenv(var, value)
        with pytest.raises(engram.InvalidArgumentError, match=f'{var}="{value}"'):
            engram.open(model, env=True)
        monkeypatch.delenv(var)


def test_every_option_has_one_default_in_the_stub():
    """The .pyi's keywords of open() are the core's option table, with its
    defaults."""
    import ast
    import pathlib
    stub = pathlib.Path(engram.__file__).with_name("_engram.pyi").read_text()
    fn = next(n for n in ast.parse(stub).body
              if isinstance(n, ast.FunctionDef) and n.name == "open")
    stubbed = {a.arg: ast.literal_eval(d)
               for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults)}
    stubbed.pop("env"), stubbed.pop("inject_latency_us")
    table = engram.options()
    assert list(stubbed) == list(table)
    for name, (default, doc, values) in table.items():
        want = stubbed[name]
        text = ("1" if want else "0") if isinstance(want, bool) else \
            ("" if want is None else str(want))
        assert text == default, name
        assert doc and values


def engine_threads(prefix="engram-"):
    """This process's engine threads whose names start with `prefix`, by
    thread id."""
    tids = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                if f.read().startswith(prefix):
                    tids.add(int(tid))
        except OSError:  # the thread ended meanwhile
            continue
    return tids


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux scheduling classes")
def test_readers_take_the_class_asked_for(model, monkeypatch):
    monkeypatch.delenv("ENGRAM_READERS", raising=False)
    for readers, policy in (("batch", os.SCHED_BATCH), (None, os.SCHED_OTHER)):
        before, hints_before = engine_threads(), engine_threads("engram-hint-")
        with engram.open(model, format="f32", readers=readers, overlap_threshold=0) as e:
            with e.sequence().prefill(np.arange(64)) as pf:
                pf.wait(0, 64)
                hints = engine_threads("engram-hint-") - hints_before
                mine = engine_threads() - before - hints
                assert mine, "the engine has reader threads"
                assert {os.sched_getscheduler(t) for t in mine} == {policy}, readers
                # Hint threads wake without preempting, whatever the readers' class.
                assert hints, "the engine has hint threads"
                assert {os.sched_getscheduler(t) for t in hints} == {os.SCHED_BATCH}, readers
