#!/usr/bin/env python3
"""Writes tiny Qwen4-Exp models with third-party writers, and what they hold.

Each model is written by the library its format comes from: PyPI
`safetensors` (Hugging Face checkpoints; bf16 and float8_e4m3fn through
`ml_dtypes`), `gguf` (llama.cpp's Python writer and quantizers) and
`mlx` (`mx.quantize` and `mx.save_safetensors`, as mlx-vlm saves a
quantized table). Beside each model the whole table's values are written
as the format defines them, by the same library's own decoder, as
little-endian f32 (`<name>.f32`): `ml_dtypes` widening (times the global
scale for FP8), `gguf.quants.dequantize`, `mx.dequantize` with the scales
and biases widened to f32. `manifest.json` lists the models, the hash
shape, a token sequence and the row ids an independent implementation of
the hash (scripts/qwen4exp_ref.py) gives for it.

    python3 scripts/third_party_models.py --out target/third-party

Tests read the directory named by ENGRAM_THIRD_PARTY (.ci/run sets it).
"""

import argparse
import json
import os
import pathlib
import sys

import ml_dtypes
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import qwen4exp_ref as ref  # noqa: E402  (the independent hash)

# The hash shape of the release, with a small prime base and vocabulary.
CONFIG = {
    "vocab_size": 1000,
    "ngram_size": 3,
    "heads_per_ngram": 8,
    "ngram_vocab_size_base": 211,
    "make_ngram_vocab_size_divisible_by": 128,
    "seed": 1234,
    "eos_token_id": 998,
    "ple_layer_ids": [2],
    "row_dim": 160,
}
PREFIX_HF = "model.language_model.layers.1.ple.ple_embedding."
PREFIX_MLX = "language_model.model.layers.1.ple.ple_embedding."


def table_layout():
    """Primes, offsets, rows, padded rows and multipliers of the one table."""
    [t] = ref.derive(CONFIG)
    return t["primes"], t["offsets"], t["rows"], t["stored_rows"], t["multipliers"]


def values(padded, seed):
    """The table's f32 values: groups of 32 of varied magnitude."""
    rng = np.random.default_rng(seed)
    v = rng.uniform(-1, 1, size=(padded, CONFIG["row_dim"])).astype(np.float32)
    mag = 2.0 ** rng.integers(-6, 2, size=(padded, CONFIG["row_dim"] // 32))
    return (v * np.repeat(mag, 32, axis=1)).astype(np.float32)


def config_json(extra):
    c = CONFIG
    heads = (c["ngram_size"] - 1) * c["heads_per_ngram"]
    text = {k: v for k, v in c.items() if k not in ("row_dim", "seed")}
    text.update(model_type="qwen4_exp_text", hidden_size=c["row_dim"] * heads,
                ple_embed_dim=c["row_dim"] * heads, ple_conv_kernel_size=4)
    text.update(extra.pop("text", {}))
    return {"model_type": "qwen4_exp", "architectures": ["Qwen4ExpForConditionalGeneration"],
            "text_config": text, **extra}


def constants(primes, offsets, mult):
    return {
        PREFIX_HF + "layer_multipliers": np.array(mult, dtype=np.int64),
        PREFIX_HF + "ngram_heads_vocab_sizes": np.array(primes, dtype=np.int64),
        PREFIX_HF + "ngram_heads_offsets": np.array(offsets, dtype=np.int64),
    }


def hf_shards(table, parts):
    """vLLM's split: ceil(rows / parts) rows a shard, the last the rest."""
    per = -(-len(table) // parts)
    return [table[s * per:(s + 1) * per] for s in range(parts)]


def write_hf(out, name, table_values, dtype, parts, index, scale=None):
    import safetensors.numpy as st
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    primes, offsets, rows, padded, mult = table_layout()
    stored = (table_values / scale if scale else table_values).astype(dtype)
    expect = stored.astype(np.float32) * np.float32(scale) if scale else stored.astype(np.float32)
    tensors = constants(primes, offsets, mult)
    if scale:
        tensors[PREFIX_HF + "ngram_embedding.weight_scale"] = np.array(scale, dtype=np.float32)
    if parts:
        for s, shard in enumerate(hf_shards(stored, parts)):
            tensors[PREFIX_HF + f"ngram_embedding.shard_{s}.weight"] = np.ascontiguousarray(shard)
    else:
        tensors[PREFIX_HF + "ngram_embedding.weight"] = stored
    names = sorted(tensors)
    files = [names[: len(names) // 2], names[len(names) // 2:]] if index else [names]
    weight_map = {}
    for i, group in enumerate(files):
        fname = f"model-{i + 1:05}-of-{len(files):05}.safetensors"
        st.save_file({n: tensors[n] for n in group}, str(d / fname))
        weight_map.update({n: fname for n in group})
    if index:
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    extra = {"text": {"split_ngram_parts": parts or 128}}
    if scale:
        extra["quantization_config"] = {"quant_method": "fp8",
                                        "modules_to_convert": ["ple.ple_embedding.ngram_embedding"]}
    (d / "config.json").write_text(json.dumps(config_json(extra), indent=1))
    return d, expect


def write_gguf(out, name, table_values, qtype):
    import gguf
    path = out / f"{name}.gguf"
    primes, offsets, rows, padded, mult = table_layout()
    c = CONFIG
    w = gguf.GGUFWriter(str(path), "qwen4exp")
    w.add_uint32("qwen4exp.vocab_size", c["vocab_size"])
    w.add_uint32("qwen4exp.embedding_length_per_layer_input", c["row_dim"])
    u64s = gguf.GGUFValueType.UINT64

    def add_u64s(key, values):
        # As llama.cpp's converter writes the constants: u64 arrays.
        w.add_key_value(key, [int(v) for v in values], gguf.GGUFValueType.ARRAY, sub_type=u64s)

    w.add_array("qwen4exp.ple.layers", [1])
    w.add_uint32("qwen4exp.ple.ngram_size", c["ngram_size"])
    w.add_uint32("qwen4exp.ple.heads_per_ngram", c["heads_per_ngram"])
    w.add_uint32("qwen4exp.ple.conv_kernel", 4)
    w.add_uint32("qwen4exp.ple.eos_token_id", c["eos_token_id"])
    add_u64s("qwen4exp.ple.layer_multipliers", mult)
    add_u64s("qwen4exp.ple.head_offsets", offsets)
    add_u64s("qwen4exp.ple.head_vocab_sizes", primes)
    t = gguf.GGMLQuantizationType[qtype]
    if t in (gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16):
        data = table_values.astype(np.float32 if qtype == "F32" else np.float16)
        w.add_tensor("per_layer_token_embd.weight", data)
        expect = data.astype(np.float32)
    else:
        data = gguf.quants.quantize(table_values, t)
        w.add_tensor("per_layer_token_embd.weight", data, raw_dtype=t)
        expect = gguf.quants.dequantize(data, t).astype(np.float32)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path, expect


def write_mlx(out, name, table_values, parts):
    import mlx.core as mx
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    primes, offsets, rows, padded, mult = table_layout()
    w = mx.array(table_values).astype(mx.bfloat16)
    tensors, expect = {}, []
    # mlx-vlm's split: divmod, the first rows % parts shards one row longer.
    per, extra = divmod(padded, parts) if parts else (padded, 0)
    first = 0
    for s in range(parts or 1):
        n = per + (1 if s < extra else 0)
        q, scales, biases = mx.quantize(w[first:first + n], group_size=32, bits=4)
        leaf = f"ngram_embedding.shards.{s}." if parts else "ngram_embedding."
        tensors[PREFIX_MLX + leaf + "weight"] = q
        tensors[PREFIX_MLX + leaf + "scales"] = scales
        tensors[PREFIX_MLX + leaf + "biases"] = biases
        deq = mx.dequantize(q, scales.astype(mx.float32), biases.astype(mx.float32),
                            group_size=32, bits=4)
        expect.append(np.array(deq.astype(mx.float32)))
        first += n
    mx.save_safetensors(str(d / "model.safetensors"), tensors)
    extra_cfg = {"quantization": {"group_size": 32, "bits": 4, "mode": "affine"}}
    if parts:
        extra_cfg["text"] = {"split_ngram_parts": parts}
    (d / "config.json").write_text(json.dumps(config_json(extra_cfg), indent=1))
    return d, np.concatenate(expect)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=pathlib.Path)
    out = ap.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    primes, offsets, rows, padded, mult = table_layout()
    table = values(padded, 7)
    models = []

    def add(name, fmt, encoding, path, expect):
        expect.astype("<f4").tofile(out / f"{name}.f32")
        models.append({"name": name, "format": fmt, "encoding": encoding,
                       "path": str(path.resolve()), "values": str((out / f"{name}.f32").resolve())})

    for name, dtype, parts, index in [
        ("hf-bf16", ml_dtypes.bfloat16, 4, True),
        ("hf-bf16-unsharded", ml_dtypes.bfloat16, 0, False),
        ("hf-f16", np.float16, 3, False),
        ("hf-f32", np.float32, 4, True),
    ]:
        add(name, "hf", np.dtype(dtype).name if dtype is not ml_dtypes.bfloat16 else "bf16",
            *write_hf(out, name, table, dtype, parts, index))
    add("hf-fp8", "hf", "fp8_e4m3", *write_hf(out, "hf-fp8", table, ml_dtypes.float8_e4m3fn, 4, True, scale=1 / 64))
    for qtype in ["F32", "F16", "BF16", "Q8_0", "Q5_1", "Q4_0", "Q4_1"]:
        add(f"gguf-{qtype.lower()}", "gguf", qtype.lower(), *write_gguf(out, f"gguf-{qtype.lower()}", table, qtype))
    add("mlx4", "mlx", "mlx4", *write_mlx(out, "mlx4", table, 3))
    add("mlx4-unsharded", "mlx", "mlx4", *write_mlx(out, "mlx4-unsharded", table, 0))

    c = CONFIG
    eos = c["eos_token_id"]
    tokens = [5, 17, 17, 17, eos, 3, 999, 0, eos, eos, 42, 17, 5, 17, 998 - 1, 1] + \
             [(i * 37 + 11) % c["vocab_size"] for i in range(240)]
    ids = [per_table[0] for per_table in ref.rows_from_scratch(tokens, None, ref.derive(c), c)]
    manifest = {
        "config": c, "primes": primes, "offsets": offsets, "rows": rows, "padded_rows": padded,
        "multipliers": [int(m) for m in mult], "tokens": tokens, "row_ids": ids, "models": models,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    print(f"wrote {len(models)} models to {out}")


if __name__ == "__main__":
    main()
