"""Independent reference vectors for engram's Engram layout and row hash.

Written from the facts in docs (not from engram's Rust code): its own prime walk,
NumPy's default_rng for the multipliers, the Python `tokenizers` package for the
token map and tokenization, and NumPy int64 arithmetic for the hash.

Produced with numpy 2.4.6 and tokenizers 0.23.3 (Python 3.11.7) by running, from the
repository root:

    python3 tests/reference/hash_vectors.py > crates/engram/tests/data/hash_vectors.json

It reads the vendored assets/deepseek-v4/tokenizer.json.gz.
"""

import gzip
import json
import sys

import numpy as np
from tokenizers import Regex, Tokenizer, normalizers

TEXT = (
    "The quick brown fox jumps over the lazy dog. Engram tables hold hashed n-gram "
    "embeddings, and a decode step reads 48 rows of 264 bytes each.\n\n"
    "fn main() {\n    let rows: Vec<u32> = (0..24).map(|c| c * 7 % 13).collect();\n"
    "    println!(\"{:?}\", rows);\n}\n\n"
    "def mix(ids, m):\n\treturn functools.reduce(operator.xor, (i * k for i, k in zip(ids, m)))\n\n"
    "Crème brûlée, naïve café, façade, Ångström, Zürich, São Paulo, Đà Nẵng, "
    "ÉCOLE Élève — ＦＵＬＬＷＩＤＴＨ ｔｅｘｔ and ligatures ﬁ ﬂ.\n"
    "深度求索发布了新的模型。東京の天気は晴れです。한국어 문장도 있습니다. "
    "数学：∑ x² ≤ ∞; emoji 🚀🦀 and a family 👨‍👩‍👧.\n"
    "SELECT id, name FROM users WHERE age >= 21 ORDER BY name; -- SQL comment\n"
    "In 1907, l'Académie française débattit de l'orthographe; Ærøskøbing et Øresund.\n"
    "   multiple   spaces\t\ttabs\r\nand CRLF lines   \n"
)

LAYER_IDS = [1, 14]
MAX_NGRAM = 4
N_HEADS = 8
ENGRAM_VOCAB = 16_000_000
SEED = 0
PAD_TOKEN = 2
# 65536: small enough for a test to build the model (about 6K rows a table).
SCALES = [1, 1024, 65536]


def load_tokenizer():
    with gzip.open("assets/deepseek-v4/tokenizer.json.gz", "rb") as f:
        return Tokenizer.from_str(f.read().decode("utf-8"))


def token_map(tok):
    lone = "\ue000"
    norm = normalizers.Sequence([
        normalizers.NFKC(), normalizers.NFD(), normalizers.StripAccents(),
        normalizers.Lowercase(), normalizers.Replace(Regex(r"[ \t\r\n]+"), " "),
        normalizers.Replace(Regex(r"^ $"), lone), normalizers.Strip(),
        normalizers.Replace(lone, " "),
    ])
    ids, lut = {}, []
    for tid in range(tok.get_vocab_size(with_added_tokens=True)):
        text = tok.decode([tid], skip_special_tokens=False)
        if "\ufffd" in text:
            key = tok.id_to_token(tid)
        else:
            key = norm.normalize_str(text) or text
        lut.append(ids.setdefault(key, len(ids)))
    return np.array(lut, dtype=np.int64), len(ids)


def fnv1a64(values):
    """FNV-1a over the little-endian bytes of each value as a u32."""
    h = 0xCBF29CE484222325
    for v in values:
        for byte in int(v).to_bytes(4, "little"):
            h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def is_prime(n):
    if n < 2:
        return False
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1
    return True


def primes_per_table(engram_vocab):
    used, tables = set(), []
    for _ in LAYER_IDS:
        cols = []
        for _order in range(2, MAX_NGRAM + 1):
            c = engram_vocab - 1
            for _head in range(N_HEADS):
                c += 1
                while not is_prime(c) or c in used:
                    c += 1
                used.add(c)
                cols.append(c)
        tables.append(cols)
    return tables


def multipliers(cvocab, layer_id):
    half = max(1, (np.iinfo(np.int64).max // cvocab) // 2)
    r = np.random.default_rng(SEED + 10007 * layer_id).integers(0, half, MAX_NGRAM, dtype=np.int64)
    return r * 2 + 1


def window_ids(compressed, attention_mask, pad):
    """ids[t, k]: compressed id k back from t; pad from the first dead position
    (attention_mask 0, as a Hugging Face tokenizer pads) on."""
    T = len(compressed)
    out = np.full((T, MAX_NGRAM), pad, dtype=np.int64)
    for t in range(T):
        for k in range(MAX_NGRAM):
            p = t - k
            if p < 0 or attention_mask[p] == 0:
                break
            out[t, k] = compressed[p]
    return out


def rows_for(ids, primes, mults):
    cols = []
    mix = ids[:, 0] * mults[0]
    offset = 0
    for k in range(1, MAX_NGRAM):
        mix = np.bitwise_xor(mix, ids[:, k] * mults[k])
        for h in range(N_HEADS):
            p = primes[(k - 1) * N_HEADS + h]
            cols.append(mix % p + offset)
            offset += p
    return np.stack(cols, axis=1)


def main():
    tok = load_tokenizer()
    lut, cvocab = token_map(tok)
    pad = int(lut[PAD_TOKEN])
    tokens = tok.encode(TEXT, add_special_tokens=False).ids
    compressed = lut[np.array(tokens)]
    T = len(tokens)
    # A Hugging Face attention_mask: 1 for a real token, 0 for padding.
    attention_mask = [0 if t in (0, 1, 40, 41, 150, 151, 152) or t % 37 == 5 else 1 for t in range(T)]
    cases = []
    for scale in SCALES:
        primes = primes_per_table(ENGRAM_VOCAB // scale)
        mults = [multipliers(cvocab, L) for L in LAYER_IDS]
        layout = {
            "scale": scale,
            "rows": [sum(p) for p in primes],
            "primes": primes,
            "multipliers": [[int(v) for v in m] for m in mults],
        }
        for masked in (False, True):
            keep = attention_mask if masked else [1] * T
            ids = window_ids(compressed, keep, pad)
            per_table = [rows_for(ids, p, m) for p, m in zip(primes, mults)]
            rows = [[[int(v) for v in tab[t]] for tab in per_table] for t in range(T)]
            cases.append({"layout": layout, "masked": masked, "token_rows": rows})
    doc = {
        "text": TEXT,
        "tokens": tokens,
        "vocab_size": len(lut),
        "compressed_vocab_size": cvocab,
        "token_map_fnv1a64": str(fnv1a64(lut)),
        "pad_compressed_id": pad,
        "attention_mask": attention_mask,
        "cases": cases,
    }
    json.dump(doc, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
