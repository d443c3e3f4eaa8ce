"""engram.torch: rows delivered through DeviceRows are the engine's own,
bit for bit, in prefill (uneven waits across ring wraps) and decode, for
f32 and raw rows; the raw decode is the format's; the buffers and events
keep rows from being overwritten while they are read. On the CPU always
(where torch is installed), on CUDA where there is a GPU."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import engram  # noqa: E402
import engram.torch as et  # noqa: E402
from conftest import bf16_round, decode_rows, e4m3, expected_rows  # noqa: E402

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def small_ring(model, **options):
    # A 32-token ring (2 chunks of 16): the waits below wrap it many times.
    return engram.open(model, chunk_tokens=16, ring_chunks=2, first_chunk_tokens=5,
                       read_batch_tokens=8, overlap_threshold=0,
                       **{"format": "f32", **options})


def host(t):
    if t.is_cuda:
        torch.cuda.synchronize()
    return t.cpu().numpy()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["f32", "raw"])
def test_prefill_waits_deliver_the_engines_rows(model, fmt, device):
    with small_ring(model, format=fmt) as e, small_ring(model, format="f32") as ref:
        rows = et.DeviceRows(e, device)
        seq = e.sequence()
        prompt = np.random.default_rng(7).integers(0, e.info.vocab_size, 300)
        ids = seq.row_ids(prompt)
        want = [expected_rows(e, t, ids) for t in range(2)]
        values = [expected_rows(ref, t, ids) for t in range(2)]
        sizes = [1, 7, 32, 3, 31, 2, 16, 17, 29, 5]
        with rows.prefill(seq, prompt) as pf:
            upto, step, held = [0, 0], 0, []
            while min(upto) < 300:
                for table in (0, 1):
                    if table == 1 and upto[1] + 10 > upto[0] and upto[0] < 300:
                        continue  # table 1 lags table 0, as in a layer sweep
                    new = min(300, upto[table] + sizes[step % len(sizes)])
                    step += 1
                    got = pf.wait(table, new)
                    assert got.device.type == device
                    assert got.shape == want[table][upto[table]:new].shape
                    assert host(got).tobytes() == want[table][upto[table]:new].tobytes()
                    # Raw rows decode to the engine's f32 rows, bit for bit.
                    dec = host(rows.decode(table, got).float())
                    assert dec.view(np.uint32).tobytes() == \
                        values[table][upto[table]:new].view(np.uint32).tobytes()
                    rows.consumed(table)
                    held.append((table, upto[table], new, got))
                    upto[table] = new
                    # The delivery before this one of the same table is intact.
                    prev = [h for h in held if h[0] == table][-2:-1]
                    for t, lo, hi, tensor in prev:
                        assert host(tensor).tobytes() == want[t][lo:hi].tobytes()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fmt", ["f32", "raw"])
def test_decode_steps_deliver_the_engines_rows(model, fmt, device):
    with engram.open(model, format=fmt, overlap_threshold=0) as e, \
            engram.open(model, format="f32") as ref:
        rows = et.DeviceRows(e.info, device)
        seq = e.sequence()
        with rows.prefill(seq, np.arange(50, 90)) as pf:
            pf.wait(0, 40)
            pf.wait(1, 40)
        ptrs = {0: [], 1: []}
        for token in [3, 9, 27, 81, 243, 729, 2187]:
            ids = seq.row_ids([token])
            seq.step_begin(token)
            for table in range(2):
                got = rows.step(seq, table)
                assert got.shape == (1, e.info.rows_per_token,
                                     e.info.stored_row_bytes[table] if fmt == "raw" else 256)
                assert host(got).tobytes() == expected_rows(e, table, ids).tobytes()
                dec = host(rows.decode(table, got).float())
                assert dec.tobytes() == expected_rows(ref, table, ids).tobytes()
                rows.consumed(table)
                ptrs[table].append(got.data_ptr())
        # Two buffers per table, alternating: nothing is allocated per step.
        for table in range(2):
            assert len(set(ptrs[table])) == 2
            assert ptrs[table][0::2] == [ptrs[table][0]] * 4


@pytest.mark.parametrize("device", DEVICES)
def test_decode_steps_into_a_fixed_tensor(model, device):
    """out=: the rows land in the caller's tensor (a CUDA graph's input)."""
    with engram.open(model, format="raw", overlap_threshold=0) as e:
        rows = et.DeviceRows(e, device)
        seq = e.sequence()
        fixed = [torch.zeros((1, 24, 264), dtype=torch.uint8, device=device) for _ in range(2)]
        for token in [5, 6, 7]:
            ids = seq.row_ids([token])
            seq.step_begin(token)
            for table in range(2):
                assert rows.step(seq, table, out=fixed[table]) is fixed[table]
                assert host(fixed[table]).tobytes() == expected_rows(e, table, ids).tobytes()
                rows.consumed(table)
        seq.step_begin(8)
        for bad in (torch.zeros((1, 24, 265), dtype=torch.uint8, device=device),
                    torch.zeros((1, 24, 264), dtype=torch.float32, device=device),
                    torch.zeros((2, 24, 264), dtype=torch.uint8, device=device)):
            with pytest.raises(ValueError, match="out"):
                rows.deliver(0, 1, lambda buf: seq.step_wait_into(0, buf), out=bad)


def test_row_shapes_come_from_the_engines_info():
    """No row width is assumed: a 160-value model's raw bf16 rows of 320
    bytes and its f32 rows of 160 floats (an Info stand-in)."""
    class Info:
        tables, rows_per_token, row_dim = 1, 16, 160
        stored_row_bytes, encodings = [320], ["bf16"]
        format = "raw"

    rows = et.DeviceRows(Info(), "cpu", tokens=3)
    values = np.random.default_rng(1).standard_normal((3, 16, 160)).astype(np.float32)
    stored = (values.view(np.uint32) >> 16).astype(np.uint16)  # truncated to bf16

    def fill(buf):
        assert buf.shape == (3, 16, 320) and buf.dtype == np.uint8
        buf[...] = stored.view(np.uint8).reshape(3, 16, 320)
        return buf.nbytes

    got = rows.decode(0, rows.deliver(0, 3, fill))
    assert got.dtype == torch.bfloat16 and got.shape == (3, 16, 160)
    assert np.array_equal(got.float().numpy().view(np.uint32),
                          stored.astype(np.uint32) << 16)
    Info.format = "f32"
    rows = et.DeviceRows(Info(), "cpu")
    got = rows.deliver(0, 2, lambda buf: buf.fill(1.5))
    assert got.dtype == torch.float32 and got.shape == (2, 16, 160)
    assert rows.decode(0, got) is got


def test_a_fill_that_writes_the_wrong_size_is_an_error():
    class Info:
        tables, rows_per_token, row_dim = 1, 2, 256
        stored_row_bytes, encodings, format = [264], ["e4m3_e8m0_32_row264"], "raw"

    rows = et.DeviceRows(Info(), "cpu")
    with pytest.raises(RuntimeError, match="table 0: the fill wrote 10 bytes"):
        rows.deliver(0, 1, lambda buf: 10)
    with pytest.raises(engram.InvalidArgumentError, match="table 2 out of range"):
        rows.consumed(2)
    with pytest.raises(ValueError, match="tokens"):
        et.DeviceRows(Info(), "cpu", tokens=0)


def test_prefill_waits_the_engine_refuses_advance_nothing(model):
    with small_ring(model, format="raw") as e:
        rows = et.DeviceRows(e, "cpu", tokens=16)
        seq = e.sequence()
        prompt = np.arange(100, 200)
        want = expected_rows(e, 0, seq.row_ids(prompt))
        with rows.prefill(seq, prompt) as pf:
            assert pf.wait(0, 0).shape == (0, 24, 264)
            assert host(pf.wait(0, 10)).tobytes() == want[:10].tobytes()
            with pytest.raises(engram.InvalidArgumentError, match="waits advance"):
                pf.wait(0, 5)
            with pytest.raises(engram.InvalidArgumentError):
                pf.wait(0, 10 + 33)  # wider than the 32-token ring
            with pytest.raises(engram.InvalidArgumentError):
                pf.wait(0, 101)
            assert host(pf.wait(0, 40)).tobytes() == want[10:40].tobytes()
            assert pf.prefill.ready_tokens(0) >= 40
        with pytest.raises(engram.StateError):
            pf.wait(1, 10)
        seq.step_begin(1)  # the prefill ended with the block


def test_the_device_decode_of_e4m3_rows_is_the_formats():
    """Every E4M3 code (but the two NaNs) under every E8M0 scale (but the
    corrupt 255), subnormal results included, against the independent numpy
    decode of the format description."""
    codes = np.array([c for c in range(256) if c & 0x7F != 0x7F], dtype=np.uint8)
    raw = []
    for scale in range(255):
        row = np.empty(264, dtype=np.uint8)
        row[:256] = np.resize(np.roll(codes, scale), 256)
        row[256:] = [scale, 254 - scale, 127, scale // 2, 0, 1, 200, 60]
        raw.append(row)
    raw = np.stack(raw)
    want = decode_rows(raw, "row264")
    decoder = et.RowDecoder("e4m3_e8m0_32_row264", 256, 264)
    got = decoder(torch.from_numpy(raw)).float().numpy()
    finite = np.isfinite(want)
    assert finite.sum() > 0.9 * want.size and (want[finite] != 0).any()
    assert np.array_equal(got.view(np.uint32)[finite], want.view(np.uint32)[finite])
    # Beyond float32's range (scale 254 on a large code) both say inf.
    assert np.array_equal(np.isinf(got), ~finite)


def test_e4m3_rows_of_another_width_decode_by_the_same_rule():
    """160-value rows: 160 codes, then 5 scales (165 bytes)."""
    rng = np.random.default_rng(3)
    raw = rng.integers(0, 256, (40, 165)).astype(np.uint8)
    raw[:, :160][(raw[:, :160] & 0x7F) == 0x7F] = 0x11
    raw[:, 160:] = rng.integers(100, 150, (40, 5))
    values = e4m3(raw[:, :160]).reshape(40, 5, 32)
    scales = np.exp2(raw[:, 160:].astype(np.float64) - 127.0).astype(np.float32)
    want = bf16_round((values * scales[:, :, None]).reshape(40, 160))
    got = et.RowDecoder("e4m3_e8m0_32_row165", 160, 165)(torch.from_numpy(raw))
    assert got.shape == (40, 160)
    assert np.array_equal(got.float().numpy().view(np.uint32), want.view(np.uint32))


def test_dense_raw_rows_are_views():
    values = np.random.default_rng(4).standard_normal((2, 3, 160)).astype(np.float32)
    for name, stored in (("f16", values.astype(np.float16)), ("f32", values),
                         ("bf16", (values.view(np.uint32) >> 16).astype(np.uint16))):
        raw = torch.from_numpy(stored.view(np.uint8).copy())
        got = et.RowDecoder(name, 160, 160 * stored.itemsize)(raw)
        assert got.data_ptr() == raw.data_ptr()  # no copy, no kernel
        assert got.shape == (2, 3, 160)
        if name == "bf16":
            assert np.array_equal(got.float().numpy().view(np.uint32),
                                  stored.astype(np.uint32) << 16)
        else:
            assert np.array_equal(got.numpy(), stored)


def test_encodings_it_does_not_decode_say_so(models):
    with pytest.raises(ValueError, match="format=\"f32\""):
        et.RowDecoder("lloyd4_e5m3_32_r136", 256, 136)
    with pytest.raises(ValueError, match="165 bytes"):
        et.RowDecoder("e4m3_e8m0_32_row264", 160, 264)
    with pytest.raises(ValueError, match="320 bytes"):
        et.RowDecoder("bf16", 160, 160)
    with engram.open(models["lloyd4"], format="raw") as e:
        rows = et.DeviceRows(e, "cpu")  # delivering raw lloyd4 rows is fine
        with pytest.raises(ValueError, match="lloyd4"):
            rows.decoder(0)
    with engram.open(models["lloyd4"], format="f32") as e:
        rows = et.DeviceRows(e, "cpu")
        x = torch.ones(1, 24, 256)
        assert rows.decode(1, x) is x
    with pytest.raises(ValueError, match="uint8"):
        et.RowDecoder("e4m3_e8m0_32_row264", 256, 264)(torch.ones(1, 264))


# --- CUDA: the events ------------------------------------------------

def sleep_ms(ms):
    """Keeps the current stream busy for about `ms` (a spin kernel)."""
    torch.cuda._sleep(int(ms * 1e6))  # cycles; ~1-2 GHz


@cuda_only
def test_the_first_copy_into_a_fresh_buffer_waits_for_queued_work(model):
    """The caching allocator hands a new device buffer memory that a kernel
    still queued on the compute stream writes; the copy stream must not
    write it first (the race the example once had)."""
    with engram.open(model, format="raw", overlap_threshold=0) as e:
        seq = e.sequence()
        nbytes = 24 * 264
        for _ in range(3):
            want = expected_rows(e, 0, seq.row_ids([11]))
            seq.step_begin(11)
            # The block the DeviceRows below will get, written behind a sleep.
            scratch = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            sleep_ms(50)
            scratch.fill_(0)
            del scratch
            rows = et.DeviceRows(e, "cuda")
            got = rows.step(seq, 0)
            assert host(got).tobytes() == want.tobytes()
            seq.step_wait(1)


@cuda_only
@pytest.mark.parametrize("mark", [True, False])
def test_a_buffer_is_not_rewritten_while_the_gpu_reads_it(model, mark):
    """The compute stream reads a delivery late (behind a sleep); two
    deliveries later the copy into the same buffer waits for that read:
    after consumed() where it is marked, else for all queued work."""
    with engram.open(model, format="raw", overlap_threshold=0) as e:
        rows = et.DeviceRows(e, "cuda")
        seq = e.sequence()
        tokens = [21, 22, 23, 24, 25, 26]
        seen, want = [], []
        for token in tokens:
            want.append(expected_rows(e, 0, seq.row_ids([token])))
            seq.step_begin(token)
            got = rows.step(seq, 0)
            sleep_ms(20)  # the GPU is behind the host
            seen.append(got.clone())  # the read, queued after the sleep
            if mark:
                rows.consumed(0)
            seq.step_wait(1)
        torch.cuda.synchronize()
        for s, w in zip(seen, want):
            assert s.cpu().numpy().tobytes() == w.tobytes()


@cuda_only
def test_without_a_side_stream_the_rows_are_the_same(model):
    with engram.open(model, format="raw", overlap_threshold=0) as e:
        rows = et.DeviceRows(e, "cuda", side_stream=False)
        assert rows.copy_stream is None
        seq = e.sequence()
        for token in [31, 32, 33]:
            ids = seq.row_ids([token])
            seq.step_begin(token)
            for table in range(2):
                got = rows.step(seq, table)
                sleep_ms(5)
                assert host(got.clone()).tobytes() == expected_rows(e, table, ids).tobytes()


@pytest.mark.parametrize("device", DEVICES)
def test_the_module_docstrings_lines_run(model, device):
    """The ten lines engram.torch's docstring shows, run as written (the
    model path and device filled in), deliver the engine's rows."""
    doc = et.__doc__
    block = doc[doc.index("    import engram, engram.torch"):doc.index("\nA delivered")]
    code = "\n".join(line[4:] for line in block.splitlines())
    code = code.replace('"model.gguf"', repr(str(model))).replace('"cuda"', repr(device))
    assert code.count("\n") >= 10
    delivered = []

    def engram_block(h, x):
        delivered.append(host(x.float()))
        return h + x.float().sum()

    scope = {"prompt": np.arange(1000, 1300), "chunk_ends": [100, 256, 300], "t": 1,
             "token": 77, "h": torch.zeros(()), "engram_block": engram_block}
    exec(compile(code, "engram.torch docstring", "exec"), scope)
    with engram.open(model, format="f32") as ref:
        seq = ref.sequence()
        ids = seq.row_ids(np.append(scope["prompt"], 77))
        want = expected_rows(ref, 1, ids)
    assert [d.shape[0] for d in delivered] == [100, 156, 44, 1]
    assert np.concatenate(delivered).tobytes() == want.tobytes()
