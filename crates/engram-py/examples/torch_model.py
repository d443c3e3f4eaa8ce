"""The decoder torch_host.py drives: attention + SwiGLU layers, Engram blocks
at the model's Engram layers, and a decode path a CUDA graph can capture.
The rows' width and their decode (raw rows to values, on the device) come
from the engine through engram.torch; nothing here assumes a row format.

A runtime's decode step is GPU-bound when its kernels are launched from
captured graphs (or compiled code); launched one by one from Python, a layer
of ~40 small ops costs the host ~1 ms, and then the host thread, not the
GPU, sets the pace (the first H200 runs measured 902-1,485 us per layer for
that reason, whatever the layer's size). So on CUDA each run of layers
between two Engram blocks is one graph: the rows of the block that starts a
run are the only input that changes besides the hidden state and the
position, and they reach a fixed device buffer before the graph's replay.
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

# Layer sizes. `mac`: d_model 8192, 64 heads, one weight set shared by every
# layer (the per-layer time is what matters, and no layer's weights stay in
# L2), the MLP width chosen at start (`calibrate_ffn`) so one decode layer
# takes the stand-in's `m4-max-ds4` 870 us on the GPU it runs on. `flash`:
# DeepSeek V4.1-Flash's active path made dense: d_model 4096, attention
# 32 x 128, a SwiGLU MLP of 14,336 (6 routed + 1 shared expert of 2,048),
# distinct weights per layer (~10.5 B parameters). `tiny`: CPU tests.
PROFILES = {
    "mac": dict(dim=8192, heads=64, ffn=None, shared=True, layer_us=870.0),
    "flash": dict(dim=4096, heads=32, ffn=14336, shared=False),
    "tiny": dict(dim=64, heads=4, ffn=128, shared=False),
}
CONV_TAPS = 4


def same(rows: torch.Tensor) -> torch.Tensor:
    """The decode of rows that are values already (the engine's f32 rows)."""
    return rows


def rmsnorm(x: torch.Tensor) -> torch.Tensor:
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


class Weights:
    """Random weights drawn from a seeded generator on the target device."""

    def __init__(self, device: torch.device, dtype: torch.dtype, seed: int):
        self.device, self.dtype = device, dtype
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)

    def matrix(self, rows: int, cols: int) -> torch.Tensor:
        w = torch.randn(rows, cols, generator=self.gen, device=self.device, dtype=torch.float32)
        return (w * (1.0 / math.sqrt(cols))).to(self.dtype)


def core_weights(w: Weights, dim: int, ffn: int) -> dict:
    return {"wqkv": w.matrix(3 * dim, dim), "wo": w.matrix(dim, dim),
            "w13": w.matrix(2 * ffn, dim), "w2": w.matrix(dim, ffn)}


class Layer:
    """Attention + SwiGLU MLP, with an Engram block in front where the model
    has one. Keeps its own KV cache and convolution history, both updated in
    place (a captured graph keeps the addresses)."""

    def __init__(self, core: dict, engram_table: int | None, rows_per_token: int,
                 row_dim: int, w: Weights, dim: int, heads: int, max_len: int,
                 decode=same):
        self.core, self.table, self.heads, self.dim = core, engram_table, heads, dim
        head_dim = dim // heads
        self.k_cache = torch.zeros(heads, max_len, head_dim, device=w.device, dtype=w.dtype)
        self.v_cache = torch.zeros_like(self.k_cache)
        self.positions = torch.arange(max_len, device=w.device)
        self.length = 0
        if engram_table is not None:
            cols = rows_per_token * row_dim
            self.wk, self.wv = w.matrix(dim, cols), w.matrix(dim, cols)
            self.taps = w.matrix(CONV_TAPS, dim) * math.sqrt(dim / CONV_TAPS)
            self.history = torch.zeros(CONV_TAPS - 1, dim, device=w.device, dtype=w.dtype)
            # Made before any graph is captured (a capture may not copy in):
            # an engram.torch.RowDecoder holds its tables already.
            self.decode = decode

    def reset(self):
        self.k_cache.zero_()
        self.v_cache.zero_()
        self.length = 0
        if self.table is not None:
            self.history.zero_()

    def engram(self, h: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """rows: (T, rows_per_token, row width) as delivered, on the device:
        float32 values, or raw rows that `decode` turns into values."""
        flat = self.decode(rows).reshape(rows.shape[0], -1).to(h.dtype)
        key, value = flat @ self.wk.T, flat @ self.wv.T
        gate = torch.sigmoid((rmsnorm(h).float() * rmsnorm(key).float()).sum(-1, keepdim=True)
                             / math.sqrt(self.dim)).to(h.dtype)
        gated = torch.cat([self.history, gate * value])
        t = h.shape[0]
        out = sum(self.taps[j] * gated[CONV_TAPS - 1 - j: CONV_TAPS - 1 - j + t]
                  for j in range(CONV_TAPS))
        self.history.copy_(gated[-(CONV_TAPS - 1):])
        return h + out

    def mlp(self, h: torch.Tensor, att: torch.Tensor) -> torch.Tensor:
        c = self.core
        h = h + att.transpose(0, 1).reshape(h.shape[0], self.dim) @ c["wo"].T
        gate, up = (rmsnorm(h) @ c["w13"].T).chunk(2, dim=-1)
        return h + (F.silu(gate) * up) @ c["w2"].T

    def qkv(self, h: torch.Tensor):
        q, k, v = (rmsnorm(h) @ self.core["wqkv"].T).split(self.dim, dim=-1)
        shape = (h.shape[0], self.heads, self.dim // self.heads)
        return (x.reshape(shape).transpose(0, 1) for x in (q, k, v))

    def forward(self, h: torch.Tensor, rows: torch.Tensor | None) -> torch.Tensor:
        """A prefill chunk of T tokens at the next positions."""
        if self.table is not None:
            h = self.engram(h, rows)
        t, start = h.shape[0], self.length
        q, k, v = self.qkv(h)
        self.k_cache[:, start:start + t] = k
        self.v_cache[:, start:start + t] = v
        self.length = end = start + t
        pos = self.positions[start:end]
        mask = self.positions[None, :end] <= pos[:, None]
        att = F.scaled_dot_product_attention(q, self.k_cache[:, :end], self.v_cache[:, :end],
                                             attn_mask=mask)
        return self.mlp(h, att)

    def step(self, h: torch.Tensor, rows: torch.Tensor | None, pos: torch.Tensor) -> torch.Tensor:
        """One decode token at position `pos` (a 1-element device tensor):
        fixed shapes only (the whole cache, masked), so a graph can hold it."""
        if self.table is not None:
            h = self.engram(h, rows)
        q, k, v = self.qkv(h)
        self.k_cache.index_copy_(1, pos, k)
        self.v_cache.index_copy_(1, pos, v)
        # Two batched matrix products over the whole cache, not SDPA with a
        # mask: for one query its kernels run a head per thread block and
        # walk the 8K keys serially (measured 1,653 us per mac layer against
        # 869 us at 1K), where a batched product splits the keys over the GPU.
        scores = (q @ self.k_cache.transpose(1, 2)).float() / math.sqrt(q.shape[-1])
        scores = scores.masked_fill((self.positions > pos)[None, None, :], float("-inf"))
        att = torch.softmax(scores, dim=-1).to(q.dtype) @ self.v_cache
        return self.mlp(h, att)


class Segment:
    """Layers [first, last) of a decode step: the first may be an Engram
    layer (its rows come in `rows`); on CUDA replayed from one graph."""

    def __init__(self, layers: list, first: int, last: int, h_in: torch.Tensor,
                 rows: torch.Tensor | None, pos: torch.Tensor):
        self.layers, self.table = layers[first:last], layers[first].table
        self.h_in, self.rows, self.pos = h_in, rows, pos
        self.graph = None
        self.h_out = None

    def run_eager(self) -> torch.Tensor:
        h = self.h_in
        for layer in self.layers:
            h = layer.step(h, self.rows if layer.table is not None else None, self.pos)
        return h

    def capture(self):
        """Captures the segment (after warm-up runs on a side stream, which
        write only the scratch position the caller set)."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                self.run_eager()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.h_out = self.run_eager()

    def run(self) -> torch.Tensor:
        if self.graph is None:
            self.h_out = self.run_eager()
        else:
            self.graph.replay()
        return self.h_out


class Decoder:
    """`decoders[table]` turns that table's delivered rows into values
    (default: they are values); `row_input(table)` makes the fixed device
    tensor a decode graph reads that table's rows from (default: float32
    rows of `row_dim`)."""

    def __init__(self, profile: dict, layers: int, engram_layers: dict[int, int],
                 rows_per_token: int, row_dim: int, device: torch.device, max_len: int,
                 seed: int = 7, graphs: bool = False, decoders: dict | None = None,
                 row_input=None):
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        w = Weights(device, dtype, seed)
        dim, heads, ffn = profile["dim"], profile["heads"], profile["ffn"]
        # One slot past the run: the scratch position graph warm-ups write.
        max_len += 1
        shared = core_weights(w, dim, ffn) if profile["shared"] else None
        decoders = decoders or {}
        self.layers = [Layer(shared or core_weights(w, dim, ffn), engram_layers.get(i),
                             rows_per_token, row_dim, w, dim, heads, max_len,
                             decoders.get(engram_layers.get(i), same))
                       for i in range(layers)]
        self.embed = w.matrix(4096, dim)
        self.head = w.matrix(1024, dim)
        self.device, self.dtype, self.dim = device, dtype, dim
        if row_input is None:
            def row_input(table):
                return torch.zeros(1, rows_per_token, row_dim, device=device)
        self.segments = self._segments(max_len, graphs, row_input)

    def _segments(self, max_len: int, graphs: bool, row_input) -> list:
        starts = [0] + [i for i, l in enumerate(self.layers) if l.table is not None and i > 0]
        self.pos = torch.full((1,), max_len - 1, dtype=torch.long, device=self.device)
        h = torch.zeros(1, self.dim, device=self.device, dtype=self.dtype)
        segments = []
        for first, last in zip(starts, starts[1:] + [len(self.layers)]):
            table = self.layers[first].table
            rows = None
            if table is not None:
                # Zeros: the warm-up runs before the capture decode them.
                rows = row_input(table).zero_()
            seg = Segment(self.layers, first, last, h, rows, self.pos)
            if graphs:
                seg.capture()
                h = seg.h_out
            segments.append(seg)
        if graphs:
            for layer in self.layers:
                layer.reset()
        return segments

    def embed_tokens(self, tokens: np.ndarray) -> torch.Tensor:
        idx = torch.from_numpy(tokens.astype(np.int64) % self.embed.shape[0]).to(self.device)
        return self.embed[idx]

    def embed_at(self, tokens: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        """`embed_tokens` of the token at `pos` (a 1-element device tensor)
        of `tokens` (a device tensor): kernels only, no host value, so it
        can be queued before the host knows the token."""
        return self.embed.index_select(0, tokens.index_select(0, pos) % self.embed.shape[0])


def decode_layer_us(dim: int, heads: int, ffn: int, max_len: int, device: torch.device,
                    replays: int = 60) -> float:
    """GPU time of one captured decode layer (no Engram block), in us."""
    w = Weights(device, torch.bfloat16, 11)
    layer = Layer(core_weights(w, dim, ffn), None, 0, 0, w, dim, heads, max_len + 1)
    pos = torch.full((1,), max_len, dtype=torch.long, device=device)
    seg = Segment([layer], 0, 1, torch.zeros(1, dim, device=device, dtype=torch.bfloat16),
                  None, pos)
    seg.capture()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    seg.run()
    start.record()
    for _ in range(replays):
        seg.run()
    end.record()
    torch.cuda.synchronize()
    us = 1e3 * start.elapsed_time(end) / replays
    del seg, layer
    torch.cuda.empty_cache()
    return us


def calibrate_ffn(profile: dict, max_len: int, device: torch.device) -> tuple[int, float]:
    """The MLP width (a multiple of 512) at which one captured decode layer
    of `profile` takes its `layer_us` on this GPU, and the time measured at
    that width. Decode reads every weight once per token, so the time is
    close to linear in the width: two measured points, then the width
    between them, measured again."""
    target = profile["layer_us"]
    lo, hi = 4096, 65536
    t_lo = decode_layer_us(profile["dim"], profile["heads"], lo, max_len, device)
    t_hi = decode_layer_us(profile["dim"], profile["heads"], hi, max_len, device)
    slope = (t_hi - t_lo) / (hi - lo)
    if slope <= 0:
        raise RuntimeError(f"decode layer time did not grow with the MLP width "
                           f"({t_lo:.0f} us at {lo}, {t_hi:.0f} us at {hi})")
    ffn = lo + (target - t_lo) / slope
    ffn = int(min(max(round(ffn / 512) * 512, 512), 4 * hi))
    return ffn, decode_layer_us(profile["dim"], profile["heads"], ffn, max_len, device)
