"""Shared fixtures: small synthetic models (megabytes) written once per run
with engram.synth, and an independent numpy decode of stored rows."""

import pathlib

import numpy as np
import pytest

import engram

# The V4.1-Flash layout with every per-head table divided by 65536: about
# 7.7K and 11.2K rows, 5 MB of 264-byte rows.
SCALE = 65536

LLOYD4_LEVELS = np.array(
    [0.0, 0.095, 0.1901, 0.2944, 0.4126, 0.5586, 0.7484, 1.0], dtype=np.float32
)


@pytest.fixture(scope="session")
def models(tmp_path_factory):
    """Paths of the test models by name: row264 and lloyd4 GGUFs, and a
    Hugging Face checkpoint with the same rows as row264."""
    root = tmp_path_factory.mktemp("models")
    return {
        "row264": engram.synth(root / "row264", scale=SCALE),
        "lloyd4": engram.synth(
            root / "lloyd4", scale=SCALE, encoding="lloyd4_e5m3_32_r136"
        ),
        "hf": engram.synth(root / "hf", scale=SCALE, format="hf"),
    }


@pytest.fixture(scope="session")
def model(models):
    return models["row264"]


@pytest.fixture
def engine(model):
    with engram.open(model, format="f32", overlap_threshold=0) as e:
        yield e


def bf16_round(values):
    """Round float32 values to BF16 (nearest, ties to even), kept as float32."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def e4m3(codes):
    """E4M3FN codes to float32 (sign bit 7, 4 exponent bits bias 7, 3
    mantissa bits; exponent 0 subnormal)."""
    codes = codes.astype(np.int64)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    exp = (codes >> 3) & 0xF
    man = codes & 0x7
    normal = (8 + man) / 8.0 * np.exp2(exp - 7.0)
    sub = man / 8.0 * 2.0**-6
    return (sign * np.where(exp == 0, sub, normal)).astype(np.float32)


def decode_rows(raw, encoding):
    """Decodes stored rows (n, row_bytes) uint8 to (n, 256) float32 as the
    format description says, without the library."""
    n = raw.shape[0]
    if encoding == "row264":
        values = e4m3(raw[:, :256]).reshape(n, 8, 32)
        scales = np.exp2(raw[:, 256:264].astype(np.float64) - 127.0).astype(np.float32)
        return bf16_round((values * scales[:, :, None]).reshape(n, 256))
    assert encoding == "lloyd4"
    codes = raw[:, :128]
    nibbles = np.stack([codes & 15, codes >> 4], axis=-1).reshape(n, 256)
    level = LLOYD4_LEVELS[nibbles & 7]
    sign = np.where(nibbles & 8, -1.0, 1.0).astype(np.float32)
    e = (raw[:, 128:136] >> 3).astype(np.float64)
    m = (raw[:, 128:136] & 7).astype(np.float64)
    scales = ((8 + m) / 16 * np.exp2(e - 16)).astype(np.float32)
    magnitude = bf16_round((level.reshape(n, 8, 32) * scales[:, :, None]).reshape(n, 256))
    return sign * magnitude


def file_rows(engine, table, ids):
    """Stored bytes of rows `ids` of `table`, read from the model file with
    numpy (packed tables only)."""
    info = engine.info
    assert not info.table_split[table]
    size = info.stored_row_bytes[table]
    data = np.memmap(pathlib.Path(info.table_files[table]), dtype=np.uint8, mode="r")
    start = info.table_offsets[table]
    return np.stack([data[start + r * size : start + (r + 1) * size] for r in ids])


def expected_rows(engine, table, row_ids):
    """What a wait must return for the row ids (tokens, tables, columns)."""
    ids = np.asarray(row_ids)[:, table, :]
    rows = engine.rows(table, ids.ravel())
    return rows.reshape(ids.shape + rows.shape[1:])
