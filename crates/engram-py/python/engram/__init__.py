"""engram: stream Engram embedding rows from SSD for LLM runtimes.

The compiled module ``engram._engram`` holds everything; this package only
re-exports it. See docs/python.md for the flow, lifetimes, threading and
errors.
"""

from ._engram import (
    ROW_DIM,
    ArgumentTypeError,
    CancelledError,
    CorruptRowError,
    Engine,
    Error,
    FormatError,
    Info,
    InternalError,
    InvalidArgumentError,
    IoError,
    Prefill,
    RowReadError,
    Sequence,
    StateError,
    open,
    options,
    synth,
)

__all__ = [
    "ROW_DIM",
    "ArgumentTypeError",
    "CancelledError",
    "CorruptRowError",
    "Engine",
    "Error",
    "FormatError",
    "Info",
    "InternalError",
    "InvalidArgumentError",
    "IoError",
    "Prefill",
    "RowReadError",
    "Sequence",
    "StateError",
    "open",
    "options",
    "synth",
]
