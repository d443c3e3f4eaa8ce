"""Type stub of the compiled module engram._engram (re-exported by engram)."""

import os
import pathlib
from types import TracebackType
from typing import (
    Any,
    Literal,
    Optional,
    Sequence as Seq,
    TypeVar,
    Union,
    type_check_only,
)

import numpy as np
import numpy.typing as npt

ROW_DIM: int
"""Values in a decoded row of the DeepSeek encodings (256); a model's own width is Info.row_dim."""

Format = Literal["f32", "float32", "raw"]
Backend = Literal["auto", "psync", "uring", "io_uring", "mmap"]
Phase = Literal["prefill", "decode"]
TokensLike = Union[Seq[int], npt.NDArray[np.integer[Any]], Any]
"""A list or tuple of ints, a 1-D integer numpy array, or a CPU tensor."""
MaskLike = Union[Seq[int], Seq[bool], npt.NDArray[Any], Any]
"""An attention mask: nonzero / True a real token, 0 / False padding."""
Buffer = Union[npt.NDArray[Any], bytearray, memoryview, Any]
"""A writable C-contiguous buffer: numpy array, CPU torch.Tensor, bytearray, memoryview."""

class Error(Exception):
    """Base of every error raised by engram."""

class IoError(Error):
    """An operating-system I/O error on a file."""
    path: Optional[str]
    errno: Optional[int]

class FormatError(Error):
    """A malformed model file, layout or tokenizer."""
    path: Optional[str]
    field: Optional[str]

class RowReadError(IoError):
    """A row read that failed at the device."""
    table: Optional[int]
    row: Optional[int]
    offset: Optional[int]

class CorruptRowError(Error):
    """A row whose bytes do not decode to finite values."""
    table: Optional[int]
    row: Optional[int]

class CancelledError(Error):
    """The prefill, sequence or engine was ended while (or before) the call waited."""

class InvalidArgumentError(Error, ValueError):
    """A value outside what the call accepts."""

class ArgumentTypeError(Error, TypeError):
    """An argument of a type the call does not take."""

class StateError(Error, RuntimeError):
    """A call not allowed in the object's current state."""

class InternalError(Error):
    """A bug in the engine: a reader task panicked; the prefill or sequence it hit answers this error from then on."""

class Info:
    """Facts about an engine."""
    @property
    def tables(self) -> int: ...
    @property
    def rows_per_token(self) -> int: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def row_dim(self) -> int: ...
    @property
    def layer_ids(self) -> list[int]: ...
    @property
    def table_rows(self) -> list[int]: ...
    @property
    def stored_row_bytes(self) -> list[int]: ...
    @property
    def encodings(self) -> list[str]:
        """Each table's row encoding, by its model-file name (e.g. "e4m3_e8m0_32_row264"):
        what a host that decodes raw rows itself needs."""
    @property
    def table_files(self) -> list[pathlib.Path]:
        """The file holding each table's rows."""
    @property
    def table_offsets(self) -> list[int]: ...
    @property
    def table_split(self) -> list[bool]: ...
    @property
    def format(self) -> Literal["f32", "raw"]: ...
    @property
    def backend(self) -> Literal["psync", "uring", "mmap"]: ...
    @property
    def backend_note(self) -> Optional[str]: ...
    @property
    def max_wait_tokens(self) -> int: ...
    @property
    def cached(self) -> bool: ...

def open(
    path: Union[str, os.PathLike[str]],
    *,
    env: bool = False,
    inject_latency_us: int = 0,
    backend: Optional[Backend] = "auto",
    io_depth: Optional[int] = 64,
    direct_io: Optional[bool] = False,
    advise_random: Optional[bool] = True,
    max_batch_bytes: Optional[int] = 16777216,
    max_read_bytes: Optional[int] = 131072,
    read_order: Optional[Literal["sorted", "spread"]] = "sorted",
    format: Optional[Format] = "raw",
    chunk_tokens: Optional[int] = 1024,
    ring_chunks: Optional[int] = 2,
    first_chunk_tokens: Optional[int] = 128,
    read_batch_tokens: Optional[int] = 256,
    prefill_batches_in_flight: Optional[int] = 2,
    prefill_order: Optional[Literal["auto", "chunk"]] = "auto",
    reuse_bytes: Optional[int] = 16777216,
    warm_page_cache: Optional[bool] = True,
    overlap_threshold: Optional[int] = 1024,
    prefetch: Optional[bool] = True,
    pipeline: Optional[bool] = True,
    batch: Optional[bool] = True,
    workers: Optional[int] = 4,
    decode_workers: Optional[int] = 2,
    readers: Optional[Literal["normal", "batch", "raised", "realtime"]] = "normal",
    lookup_hints: Optional[bool] = False,
    lookup_max_ngram: Optional[int] = 3,
    lookup_tokens: Optional[int] = 2,
    max_queued_hints: Optional[int] = 64,
    cache_bytes: Optional[int] = 0,
    hot_path: Optional[Union[str, os.PathLike[str]]] = None,
    hot_mlock: Optional[bool] = False,
) -> Engine:
    """Opens a model (ds4 .gguf or Hugging Face checkpoint directory) and starts an engine.

    Every keyword after inject_latency_us is an engine option of the core's
    one table (engram.options() lists each with its default and meaning;
    docs/tuning.md says when to change it): the same name and default as
    the Rust EngineBuilder::set and the C engram_options field. None leaves
    the default. A value that does not parse is an InvalidArgumentError
    naming the option and the value; an unknown keyword a TypeError.

    env=True applies the ENGRAM_* environment variables first (a value that
    does not parse is an InvalidArgumentError naming the variable); the
    keywords then override them. By default no variable is read.

    inject_latency_us is a test knob: every read first sleeps this long
    (a wheel built with the `testing` feature only; elsewhere a value
    above 0 raises Error).
    """

def options() -> dict[str, tuple[str, str, str]]:
    """Every engine option: name -> (default as text, what it sets, what a
    value looks like), in the order docs/tuning.md lists them."""

def synth(
    out: Union[str, os.PathLike[str]],
    *,
    preset: str = "deepseek-v4.1-flash",
    scale: int = 65536,
    encoding: Optional[str] = None,
    format: Literal["gguf", "hf", "mlx"] = "gguf",
    seed: int = 0,
) -> pathlib.Path:
    """Writes a small synthetic model of a DeepSeek or Qwen4-Exp preset;
    returns the path open() takes. encoding None takes the format's default
    (e4m3_e8m0_32_row264; Qwen4-Exp: bf16, mlx4 for format "mlx").
    Only in a wheel built with the `testing` feature (the model writers
    stay out of the shipped one); elsewhere it raises Error."""

_Self = TypeVar("_Self")

@type_check_only
class _Closing:
    """The context-manager protocol of Engine, Sequence and Prefill (a
    stub-only name, absent at runtime): leaving the `with` block closes the
    object (ends a prefill) and lets any exception through."""
    def __enter__(self: _Self) -> _Self: ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class Engine(_Closing):
    """An open model and its prefetch engine; usable from any number of threads."""
    @property
    def info(self) -> Info: ...
    @property
    def options(self) -> dict[str, str]:
        """The options it was opened with: name -> value as text (the names
        of engram.options())."""
    def rows(
        self, table: int, ids: TokensLike, format: Optional[Format] = None
    ) -> npt.NDArray[Any]:
        """Rows read synchronously: (n, row_dim) float32 or (n, row_bytes) uint8."""
    def stats(self) -> dict[str, Any]: ...
    def sequence(self) -> Sequence: ...
    def close(self) -> None: ...

class Sequence(_Closing):
    """One sequence of tokens: a prefill, then decode steps."""
    def row_ids(
        self, tokens: TokensLike, mask: Optional[MaskLike] = None
    ) -> npt.NDArray[np.uint32]:
        """(len(tokens), tables, rows_per_token) row ids, without appending."""
    def prefill(self, tokens: TokensLike, mask: Optional[MaskLike] = None) -> Prefill: ...
    def step_begin(self, token: int) -> None: ...
    def step_wait(self, table: int) -> npt.NDArray[Any]:
        """(1, rows_per_token, row_dim) float32 or (1, rows_per_token, row_bytes) uint8."""
    def step_wait_into(self, table: int, out: Buffer) -> int: ...
    def hint(
        self,
        tokens: Optional[TokensLike] = None,
        *,
        draft_probs: Optional[Union[Seq[float], npt.NDArray[np.floating[Any]]]] = None,
        alternatives: Optional[TokensLike] = None,
        alternative_probs: Optional[Union[Seq[float], npt.NDArray[np.floating[Any]]]] = None,
    ) -> None:
        """Rows of guessed next tokens into the row cache, likeliest first.

        `tokens` is a draft chain (`tokens[i]` guesses the token i + 1
        positions ahead, hashed after `tokens[:i]`; at most 16), each right
        with `draft_probs[i]` given the chain before it (default 1).
        `alternatives` are other guesses of the next token (at most 32),
        with `alternative_probs` (one each). Probabilities are in [0, 1]; a
        bad one, or counts that do not match, raise InvalidArgumentError
        naming the argument. A step that begins drops the hints it makes
        stale; `stats()["hint_use"]` counts each kind's rows read, used and
        dropped.
        """
    def rollback(self, n: int) -> None: ...
    def stats(self) -> dict[str, Any]: ...
    def stall(self, phase: Phase) -> dict[str, Any]: ...
    def close(self) -> None: ...
    def __len__(self) -> int: ...

class Prefill(_Closing):
    """A prefill in progress; a context manager that ends it."""
    @property
    def tokens(self) -> int: ...
    @property
    def max_wait_tokens(self) -> int: ...
    def wait(self, table: int, upto: int) -> npt.NDArray[Any]:
        """(tokens, rows_per_token, row_dim) float32 or (tokens, rows_per_token, row_bytes) uint8."""
    def wait_into(self, table: int, upto: int, out: Buffer) -> int: ...
    def ready_tokens(self, table: int) -> int: ...
    def end(self) -> None: ...
