"""Type stub of engram.transformers (see transformers.py for the docs)."""

from typing import Any, Optional, Type

from torch import nn

from ._engram import Engine

NGRAM_STATE: int

class Attachment:
    """An engine serving a Qwen4-Exp model's PLE tables; a context manager."""

    model: nn.Module
    engine: Engine
    check: bool
    def __init__(self, model: nn.Module, engine: Engine, *, check: bool = False) -> None: ...
    def detach(self) -> None:
        """Puts the model back as it was (idempotent); the engine stays open."""
    def __enter__(self) -> "Attachment": ...
    def __exit__(self, *exc: Any) -> bool: ...

def attach(model: nn.Module, engine: Engine, *, check: bool = False) -> Attachment:
    """Serves `model`'s PLE tables from `engine` until ``detach()``."""

def from_pretrained(path: Any, model_class: Optional[Type[nn.Module]] = None,
                    **kwargs: Any) -> nn.Module:
    """transformers' from_pretrained of a Qwen4-Exp checkpoint without its PLE tables."""
