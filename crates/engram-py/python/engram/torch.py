"""engram.torch: an engine's rows delivered into PyTorch tensors, on a CUDA
GPU or the CPU, without races.

``DeviceRows`` owns, per table, two pinned host buffers (a wait writes one
while the GPU copies out of the other), a device buffer behind each, the
side stream the host-to-device copies run on, and the events that order the
three: *copied* (the host may rewrite a pinned buffer), *consumed* (the copy
stream may rewrite a device buffer) and the consumer stream's point at each
device buffer's allocation (the caching allocator may hand out memory that
kernels queued before it still use). ``decode`` turns raw rows into values
on the device. The whole host side of an Engram layer::

    import engram, engram.torch

    engine = engram.open("model.gguf", format="raw")    # stored rows: the GPU decodes
    rows = engram.torch.DeviceRows(engine, "cuda")      # buffers, copy stream, events
    seq = engine.sequence()
    with rows.prefill(seq, prompt) as pf:               # reads start now
        for hi in chunk_ends:                           # a chunk, at table t's Engram layer:
            x = rows.decode(t, pf.wait(t, hi))          # tokens [previous hi, hi) on the GPU
            h = engram_block(h, x); rows.consumed(t)    # its readers queued: buffer reusable
    seq.step_begin(token)                               # decode: reads start now
    x = rows.decode(t, rows.step(seq, t))               # at table t's layer: (1, rows_per_token,
    h = engram_block(h, x); rows.consumed(t)            # row_dim) values

A delivered tensor is ordered on the stream that was current when it was
delivered (that stream waits for its copy; nothing blocks the host but the
engine's wait) and stays valid until the next delivery but one of its table
(two buffers alternate). ``consumed(t)`` says the kernels that read table
``t``'s last delivery are queued, so the copy into that buffer two
deliveries later waits only for them; without it that copy waits for
everything queued on the consumer stream before it (correct, but it may
idle the copy while the host runs ahead). On the CPU the engine writes
straight into the buffer returned: no copy, no stream.

PyTorch is imported by this module only (``import engram`` does not import
it).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Union

import numpy as np

try:
    import torch
except ImportError as err:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "engram.torch needs PyTorch, which is not installed: `pip install torch` "
        "(engram itself works without it)"
    ) from err

import engram

__all__ = ["DeviceRows", "PrefillRows", "RowDecoder"]

Fill = Callable[[np.ndarray], Optional[int]]
"""Writes a delivery's rows into the host buffer it is given (a numpy view
of the pinned buffer, exactly the rows' size) and returns the bytes written,
or None."""

DeviceLike = Union[str, "torch.device", None]

# Raw encodings whose values are one little-endian float each: the rows are
# the values, and their decode is a view.
_DENSE = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}
# The E4M3 + E8M0 encodings: `row_dim` E4M3FN codes, then one E8M0 scale
# byte per group of 32 values (e4m3_e8m0_32_row264 for 256-value rows).
_E4M3_E8M0_PREFIX = "e4m3_e8m0_32_"
_SCALE_GROUP = 32


def _e8m0_scales(device: torch.device) -> torch.Tensor:
    """2^(s - 127) for every E8M0 byte s, exact in float32 (s = 0 is the
    subnormal 2^-127). 255, which the engine's own decode rejects as
    corrupt, comes out inf: a host that decodes raw rows owns that check."""
    with np.errstate(over="ignore"):  # 2^128 is inf in float32
        exact = np.ldexp(np.float64(1.0), np.arange(256) - 127).astype(np.float32)
    return torch.from_numpy(exact).to(device)


class RowDecoder:
    """Turns one table's delivered rows into values on their device: a
    callable from a ``(tokens, rows_per_token, row_width)`` tensor to
    ``(tokens, rows_per_token, row_dim)`` values.

    - f32 rows (an engine opened with ``format="f32"``): passed through.
    - raw ``bf16`` / ``f16`` / ``f32`` rows: a view of the bytes as those
      values (no kernel).
    - raw ``e4m3_e8m0_32_*`` rows: the codes as ``torch.float8_e4m3fn``
      times 2^(scale - 127) per 32 values (exact in float32), rounded to
      bfloat16 (to nearest even): the engine's f32 decode, bit for bit,
      as bfloat16. The engine checks for corrupt rows (an E4M3 NaN code,
      scale byte 255) only when it decodes them itself; here they come
      out NaN or inf.

    Any other raw encoding raises ``ValueError`` at construction (open the
    engine with ``format="f32"`` and the readers decode it). Make it before
    capturing a CUDA graph that calls it: it copies its scale table to the
    device once, at construction.
    """

    def __init__(self, encoding: str, row_dim: int, row_bytes: int,
                 device: DeviceLike = None, *, raw: bool = True):
        self.encoding, self.row_dim, self.row_bytes = encoding, row_dim, row_bytes
        self.raw = raw
        self.scales: Optional[torch.Tensor] = None
        self.dense: Optional[torch.dtype] = None
        if not raw:
            return
        if encoding in _DENSE:
            self.dense = _DENSE[encoding]
            size = torch.empty((), dtype=self.dense).element_size()
            if row_bytes != row_dim * size:
                raise ValueError(f"{encoding} rows of {row_dim} values take {row_dim * size} "
                                 f"bytes; the engine says {row_bytes}")
        elif encoding.startswith(_E4M3_E8M0_PREFIX):
            groups, rest = divmod(row_dim, _SCALE_GROUP)
            if rest or row_bytes != row_dim + groups:
                raise ValueError(f"{encoding}: rows of {row_dim} values in groups of "
                                 f"{_SCALE_GROUP} take {row_dim + groups} bytes; the engine "
                                 f"says {row_bytes} bytes of {row_dim} values")
            self.scales = _e8m0_scales(torch.device(device or "cpu"))
        else:
            raise ValueError(f"engram.torch does not decode {encoding} rows on the device "
                             f"(it decodes {', '.join(sorted(_DENSE))} and "
                             f"{_E4M3_E8M0_PREFIX}*): open the engine with format=\"f32\"")

    @classmethod
    def for_table(cls, info: Any, table: int, device: DeviceLike = None) -> "RowDecoder":
        """The decoder of `table`'s rows as an engine with this ``Info``
        delivers them (its ``format`` and the table's encoding)."""
        return cls(info.encodings[table], info.row_dim, info.stored_row_bytes[table], device,
                   raw=info.format == "raw")

    def __call__(self, rows: torch.Tensor) -> torch.Tensor:
        if not self.raw:
            return rows
        if rows.dtype != torch.uint8 or rows.shape[-1] != self.row_bytes:
            raise ValueError(f"{self.encoding} rows are uint8 of {self.row_bytes} bytes in "
                             f"the last dimension; got {rows.dtype} of shape "
                             f"{tuple(rows.shape)}")
        if self.dense is not None:
            return rows.view(self.dense)
        d = self.row_dim
        values = rows[..., :d].view(torch.float8_e4m3fn).float()
        group = self.scales[rows[..., d:].long()]
        values = values.unflatten(-1, (d // _SCALE_GROUP, _SCALE_GROUP)) * group.unsqueeze(-1)
        return values.flatten(-2).to(torch.bfloat16)


class _Reformatted:
    """An engine's Info with another row format (`DeviceRows(format=)`)."""

    def __init__(self, info: Any, format: str):
        self._info, self.format = info, format

    def __getattr__(self, name: str) -> Any:
        return getattr(self._info, name)


class _Target:
    """A device tensor the copies write, and the event after which the
    kernels that read its last contents are done (`marked` once the
    consumer said so, else recorded at the next copy's launch)."""

    __slots__ = ("tensor", "consumed", "marked")

    def __init__(self, tensor: torch.Tensor, consumer: Optional[torch.cuda.Stream]):
        self.tensor = tensor
        self.consumed = torch.cuda.Event() if consumer is not None else None
        self.marked = False
        if consumer is not None:
            # Memory from the caching allocator may still be read or written
            # by kernels queued on the consumer stream before this point: the
            # first copy into it waits for them (the race a fresh buffer hid).
            self.consumed.record(consumer)
            self.marked = True


class _Slot:
    """One half of a table's double buffer: a host buffer (pinned on CUDA),
    its numpy view for the engine's waits, the event of the last copy out
    of it, and the device buffer behind it."""

    __slots__ = ("host", "host_np", "copied", "target")

    def __init__(self):
        self.host: Optional[torch.Tensor] = None
        self.host_np: Optional[np.ndarray] = None
        self.copied: Optional[torch.cuda.Event] = None
        self.target: Optional[_Target] = None


class _Table:
    __slots__ = ("shape", "dtype", "slots", "next", "last", "out")

    def __init__(self, shape: tuple, dtype: torch.dtype):
        self.shape, self.dtype = shape, dtype  # one token's rows
        self.slots = [_Slot(), _Slot()]
        self.next = 0
        self.last: Optional[_Target] = None  # where the last delivery went
        self.out: Optional[_Target] = None  # the caller's tensor of `out=`


class DeviceRows:
    """Per-table double buffers, the copy stream and its events: rows of
    an engine (or of any ``fill``) delivered into tensors on `device`.

    `source` is an ``engram.Engine`` or its ``Info``: the tables, rows per
    token, row width (``row_dim`` floats for ``format="f32"``, each table's
    ``stored_row_bytes`` bytes for ``"raw"``) and encodings all come from
    it. `device` defaults to CUDA where available, else the CPU. `tokens`
    is the capacity each buffer starts with (1 suits decode); a wider
    delivery grows its buffer (a pinned allocation, milliseconds), so pass
    the prefill's chunk size to make them once, here. With
    `side_stream=False` the copies run on the consumer stream itself. The
    copy stream may be given (`copy_stream`), else one is made. `format`
    ("f32" or "raw") overrides the Info's, for an Info read from an engine
    opened with the other format.

    Not thread-safe: one thread delivers (typically the forward thread, or
    one host thread beside it per sequence). The waits release the GIL.
    """

    def __init__(self, source: Any, device: DeviceLike = None, *, tokens: int = 1,
                 side_stream: bool = True, copy_stream: Optional[torch.cuda.Stream] = None,
                 format: Optional[str] = None):
        info = getattr(source, "info", source)
        if format is not None:
            if format not in ("f32", "raw"):
                raise ValueError(f"format: \"f32\" or \"raw\", got {format!r}")
            info = _Reformatted(info, format)
        self.info = info
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.cuda = self.device.type == "cuda"
        if tokens < 1:
            raise ValueError(f"tokens: a buffer holds at least one token's rows, got {tokens}")
        self.raw = info.format == "raw"
        self.rows_per_token = info.rows_per_token
        self._tables = []
        for t in range(info.tables):
            width = info.stored_row_bytes[t] if self.raw else info.row_dim
            dtype = torch.uint8 if self.raw else torch.float32
            self._tables.append(_Table((info.rows_per_token, width), dtype))
        self.copy_stream: Optional[torch.cuda.Stream] = None
        if self.cuda and side_stream:
            self.copy_stream = copy_stream or torch.cuda.Stream(device=self.device)
        self._decoders: dict = {}
        for table in self._tables:
            for slot in table.slots:
                self._reserve(table, slot, tokens)

    # --- delivery ----------------------------------------------------
    def deliver(self, table: int, tokens: int, fill: Fill,
                out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Rows of `table` for `tokens` tokens that `fill` writes into the
        next host buffer, delivered to the device: the returned tensor, of
        shape ``(tokens, rows_per_token, row_width)``, or `out` (a device
        tensor of that shape and dtype, e.g. the fixed input of a CUDA
        graph), ordered after the copy on the current stream. The engine's
        waits (``prefill``, ``step``) are fills; any other source of rows
        (a memory copy, a test) can be too."""
        tb = self._table(table)
        slot = tb.slots[tb.next]
        if slot.copied is not None:
            slot.copied.synchronize()  # the last copy out of this host buffer is done
        if tokens > slot.host.shape[0]:
            self._reserve(tb, slot, tokens)
        host, host_np = slot.host[:tokens], slot.host_np[:tokens]
        written = fill(host_np)
        want = host_np.nbytes
        if written is not None and written != want:
            raise RuntimeError(f"table {table}: the fill wrote {written} bytes for {tokens} "
                               f"tokens of {want // max(tokens, 1)} bytes")
        # Only a delivery that happened takes its turn: after a failed fill
        # the one before it stays valid as long as promised.
        tb.next ^= 1
        if out is None and not self.cuda and self.device.type == "cpu":
            tb.last = None
            return host  # the engine wrote the rows where they are used
        target = slot.target if out is None else self._out_target(tb, table, tokens, out)
        dst = target.tensor[:tokens] if out is None else out
        if not self.cuda:
            dst.copy_(host)
            tb.last = None
            return dst
        consumer = torch.cuda.current_stream(self.device)
        if self.copy_stream is None:
            # Stream order keeps the device buffer until its readers are done.
            dst.copy_(host, non_blocking=True)
            slot.copied.record(consumer)
        else:
            if not target.marked:
                target.consumed.record(consumer)  # its readers are all queued before now
            with torch.cuda.stream(self.copy_stream):
                self.copy_stream.wait_event(target.consumed)
                dst.copy_(host, non_blocking=True)
                slot.copied.record(self.copy_stream)
            consumer.wait_event(slot.copied)
        target.marked = False
        tb.last = target
        return dst

    def prefill(self, seq: Any, tokens: Any, mask: Any = None) -> "PrefillRows":
        """Starts ``seq.prefill(tokens, mask)`` and returns its waits
        delivering here (a context manager that ends the prefill)."""
        return PrefillRows(self, seq.prefill(tokens, mask))

    def step(self, seq: Any, table: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The current decode step's rows of `table` (after
        ``seq.step_begin``), ``(1, rows_per_token, row_width)`` on the
        device, or into `out`."""
        return self.deliver(table, 1, lambda buf: seq.step_wait_into(table, buf), out)

    def consumed(self, table: int, stream: Optional[torch.cuda.Stream] = None) -> None:
        """The kernels that read `table`'s last delivery are queued on
        `stream` (default: the current one): the copy that next writes that
        buffer waits for this point of it only. A no-op off CUDA."""
        tb = self._table(table)
        target = tb.last
        if target is None or target.consumed is None:
            return
        target.consumed.record(stream or torch.cuda.current_stream(self.device))
        target.marked = True

    def empty(self, table: int, tokens: int = 1) -> torch.Tensor:
        """A device tensor shaped as `table`'s delivery of `tokens` tokens
        (for ``out=``: a CUDA graph's fixed input)."""
        tb = self._table(table)
        return torch.empty((tokens,) + tb.shape, dtype=tb.dtype, device=self.device)

    # --- values ------------------------------------------------------
    def decoder(self, table: int) -> RowDecoder:
        """`table`'s ``RowDecoder`` on this device (made once; make it
        before capturing a graph that calls it)."""
        self._table(table)
        if table not in self._decoders:
            self._decoders[table] = RowDecoder.for_table(self.info, table, self.device)
        return self._decoders[table]

    def decode(self, table: int, rows: torch.Tensor) -> torch.Tensor:
        """`rows` of `table` as values: f32 rows as they are, raw rows
        decoded on their device (see ``RowDecoder``)."""
        return self.decoder(table)(rows)

    # --- internals ---------------------------------------------------
    def _table(self, table: int) -> _Table:
        if not 0 <= table < len(self._tables):
            raise engram.InvalidArgumentError(
                f"table {table} out of range (the model has {len(self._tables)})")
        return self._tables[table]

    def _reserve(self, tb: _Table, slot: _Slot, tokens: int) -> None:
        """(Re)makes `slot`'s buffers for `tokens` tokens. The caller has
        synchronized its last copy; the device buffer it drops may still be
        read by queued kernels, which the allocator's stream order keeps
        it for."""
        shape = (tokens,) + tb.shape
        slot.host = torch.empty(shape, dtype=tb.dtype, pin_memory=self.cuda)
        slot.host_np = slot.host.numpy()
        if self.device.type == "cpu":
            return
        consumer = torch.cuda.current_stream(self.device) if self.cuda else None
        dev = torch.empty(shape, dtype=tb.dtype, device=self.device)
        if self.copy_stream is not None:
            # Written on the copy stream: freeing it waits for those copies too.
            dev.record_stream(self.copy_stream)
        slot.target = _Target(dev, consumer if self.copy_stream is not None else None)
        if self.cuda and slot.copied is None:
            slot.copied = torch.cuda.Event()
            if self.copy_stream is not None:
                # Made (torch makes the CUDA event at its first record) once,
                # off the path from a wait to its copy, on a stream with
                # nothing queued yet, so the first wait waits for nothing.
                # Without a side stream it is made at the first copy: an
                # event never recorded is passed at once.
                slot.copied.record(self.copy_stream)

    def _out_target(self, tb: _Table, table: int, tokens: int, out: torch.Tensor) -> _Target:
        want = (tokens,) + tb.shape
        if (tuple(out.shape) != want or out.dtype != tb.dtype or out.device != self.device
                or not out.is_contiguous()):
            raise ValueError(f"out: table {table}'s rows are a contiguous {tb.dtype} tensor "
                             f"of shape {want} on {self.device}; got {out.dtype} "
                             f"{tuple(out.shape)} on {out.device}")
        if tb.out is None or tb.out.tensor.data_ptr() != out.data_ptr():
            consumer = (torch.cuda.current_stream(self.device)
                        if self.copy_stream is not None else None)
            # Unknown readers: the first copy waits for all queued work.
            tb.out = _Target(out, consumer)
            tb.out.marked = False
        return tb.out


class PrefillRows:
    """A prefill's waits delivered through a ``DeviceRows``: each table's
    waits advance, and ``wait(t, upto)`` delivers the rows of prompt tokens
    [previous upto, upto). A context manager that ends the prefill;
    ``prefill`` is the engine's ``Prefill`` (``ready_tokens``,
    ``max_wait_tokens``, ...)."""

    def __init__(self, rows: DeviceRows, prefill: Any):
        self.rows, self.prefill = rows, prefill
        self._upto = [0] * len(rows._tables)

    def wait(self, table: int, upto: int, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Rows of tokens [previous upto of `table`, `upto`) on the device:
        ``(upto - previous, rows_per_token, row_width)``, or into `out`."""
        self.rows._table(table)
        lo = self._upto[table]
        tokens = upto - lo
        pf = self.prefill
        if tokens < 1 or tokens > pf.max_wait_tokens or upto > pf.tokens:
            # Not a wait the engine serves: let it say why (it checks the
            # range before the buffer, so an empty one gets that error).
            pf.wait_into(table, upto, np.empty(0, dtype=np.uint8))
            if tokens != 0:
                raise engram.InvalidArgumentError(
                    f"wait(table {table}, upto {upto}): after {lo}, the engine took "
                    f"a wait of {tokens} tokens")
            tb = self.rows._tables[table]
            return torch.empty((0,) + tb.shape, dtype=tb.dtype, device=self.rows.device)
        rows = self.rows.deliver(table, tokens, lambda buf: pf.wait_into(table, upto, buf), out)
        self._upto[table] = upto
        return rows

    def end(self) -> None:
        self.prefill.end()

    def __enter__(self) -> "PrefillRows":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.end()
        return False
