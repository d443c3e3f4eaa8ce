"""engram.transformers: a transformers Qwen4-Exp model whose PLE n-gram
tables are read by an engram engine instead of held in memory.

``attach(model, engine)`` hooks a ``Qwen4ExpForCausalLM`` or
``Qwen4ExpForConditionalGeneration`` (transformers >= 5.23)::

    import engram, engram.transformers
    from transformers import AutoTokenizer

    engine = engram.open(path, format="raw", cache_bytes=1 << 30)   # the checkpoint directory
    model = engram.transformers.from_pretrained(path, dtype=torch.bfloat16).to("cuda")
    with engram.transformers.attach(model, engine):
        out = model.generate(**tok(prompts, return_tensors="pt", padding=True).to("cuda"),
                             max_new_tokens=200)

What it does, per forward:

- A forward pre-hook on the text model's ``layers[0]`` receives the final
  ids (``ple_input_ids``: padding already replaced by the PLE's EOS) and
  the cache. It reads the n-gram history the model keeps in the cache
  (``past_key_values.get_conv_state(layer, state_idx=2)``, the last
  ``ngram_size - 1`` ids of each row; ``None`` before the first update,
  read as EOS) and starts the engine's reads for every row of the batch:
  a prefill for a multi-token forward, a decode step for one token. Layer
  0 runs while they are read.
- Each ``Qwen4ExpTextNGramEmbedding`` keeps its own forward (it computes
  its row ids and writes the history back into the cache, so beam
  reorder, ``crop`` and ``reset`` keep it, exactly as without the
  engine); only its ``ngram_embedding`` lookup is replaced: it waits for
  the engine's rows of this forward and returns them on the ids' device
  in the table's dtype, ``[B, T, heads, row_dim]`` (the module flattens
  them to ``[B, T, ple_embed_dim]``). On CUDA the rows go through
  ``engram.torch.DeviceRows`` (pinned double buffers, side-stream copies).

Each batch row has an engine sequence. A row continues its sequence while
the cache's history equals the sequence's last ids; otherwise (a new
request, a beam switched by beam search, a cropped cache) the row gets a
new sequence, whose first read also covers the ``ngram_size - 1``
history ids (their rows are read and dropped), so the ids after them hash
with the cache's history.

Loading without the table: ``from_pretrained(path, **kwargs)`` is
transformers' ``from_pretrained`` on a subclass of the model class whose
n-gram modules hold no table parameter: the table's shards in the
checkpoint match no parameter, so transformers neither reads nor
allocates them (the released BF16 table is 95.4 GiB); everything else
loads as usual, and the model runs once an engine is attached (before, a
forward raises ``RuntimeError``). A model loaded with its table (plain
``from_pretrained``) can be attached too; ``detach()`` gives it back
unchanged.

``torch.compile``: the hook and the lookup are excluded from compilation
(``torch.compiler.disable``): a compiled model runs them eagerly, between
graphs split around them (the stock model already splits its graphs at
each MoE block's data-dependent ``nonzero``).

Not thread-safe: one forward at a time per attached model.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

try:
    import torch
    from torch import nn
except ImportError as err:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "engram.transformers needs PyTorch and transformers, and PyTorch is not installed: "
        "`pip install torch 'transformers>=5.23'` (engram itself works without them)"
    ) from err

try:
    from transformers.models.qwen4_exp import modeling_qwen4_exp as _qwen
except ImportError as err:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "engram.transformers needs transformers >= 5.23 (the release that ships Qwen4-Exp): "
        "`pip install 'transformers>=5.23'`"
    ) from err

import engram
import engram.torch as _et

__all__ = ["Attachment", "attach", "from_pretrained"]

# The cache's conv state the n-gram module keeps its history in (slot 0 is
# the GatedDeltaNet conv, 1 the PLE conv).
NGRAM_STATE = 2

_NGram = _qwen.Qwen4ExpTextNGramEmbedding


class _Unloaded(nn.Module):
    """The lookup of a table that was not loaded: shape and dtype only."""

    def __init__(self, rows: int, dim: int, dtype: torch.dtype):
        super().__init__()
        self.num_embeddings, self.embedding_dim = rows, dim
        # A plain attribute, not a parameter or buffer: no state_dict entry.
        # On the meta device, so the n-gram module leaves its ids where they are.
        self.weight = torch.empty((rows, dim), dtype=dtype, device="meta")

    def forward(self, ngram_ids: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(
            "this Qwen4-Exp model was loaded without its PLE table "
            "(engram.transformers.from_pretrained): attach an engine first "
            "(engram.transformers.attach(model, engine))")

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, not loaded"


class _Lookup(_Unloaded):
    """The table lookup of an attached n-gram module: the engine's rows of
    the current forward, waited for here."""

    def __init__(self, owner: "Attachment", table: int, rows: int, dim: int, dtype: torch.dtype):
        super().__init__(rows, dim, dtype)
        self._owner, self._table = owner, table

    def forward(self, ngram_ids: torch.Tensor) -> torch.Tensor:
        return self._owner._rows(self._table, ngram_ids)

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}, engram table {self._table}"


class _Row:
    """One batch row's engine sequence and the ids it ends with."""

    __slots__ = ("seq", "tail")

    def __init__(self, seq: Any, tail: Tuple[int, ...]):
        self.seq, self.tail = seq, tail


class _Read:
    """A batch row's reads of the current forward: a decode step or a
    prefill whose first `lead` tokens are history (read, then dropped)."""

    __slots__ = ("seq", "prefill", "lead", "ids")

    def __init__(self, seq: Any, prefill: Any, lead: int, ids: Optional[np.ndarray]):
        self.seq, self.prefill, self.lead, self.ids = seq, prefill, lead, ids


class _Forward:
    """What the pre-hook started for one forward."""

    __slots__ = ("batch", "tokens", "reads", "served")

    def __init__(self, batch: int, tokens: int, reads: List[_Read]):
        self.batch, self.tokens, self.reads = batch, tokens, reads
        self.served = 0  # tables delivered


def _text_model(model: nn.Module) -> nn.Module:
    found = [m for m in model.modules() if isinstance(m, _qwen.Qwen4ExpTextModel)]
    if len(found) != 1:
        raise TypeError(
            f"engram.transformers.attach takes a transformers Qwen4-Exp model "
            f"(Qwen4ExpForCausalLM, Qwen4ExpForConditionalGeneration or Qwen4ExpTextModel); "
            f"{type(model).__name__} holds {len(found)} Qwen4ExpTextModel modules")
    return found[0]


def _eos(config: Any) -> int:
    eos = config.eos_token_id
    return int(eos[0] if isinstance(eos, (list, tuple)) else eos)


class Attachment:
    """An engine serving a model's PLE tables (``attach`` makes it).

    ``detach()`` (or leaving its ``with`` block) removes the hook, puts
    each n-gram module's own lookup back and closes the engine sequences
    it opened; the engine stays open. ``check=True`` compares, at every
    forward, the row ids the model computes with those the engine read
    (a host copy per forward: for tests)."""

    def __init__(self, model: nn.Module, engine: Any, *, check: bool = False):
        text = _text_model(model)
        config = text.config
        self.model, self.engine, self.check = model, engine, check
        self.info = info = engine.info
        self.eos = _eos(config)
        self.context = config.ngram_size - 1
        modules = [(i, layer.ple) for i, layer in enumerate(text.layers) if layer.ple is not None]
        if not modules:
            raise ValueError("the model has no PLE layer (text_config.ple_layer_ids is empty): "
                             "there is nothing for an engine to serve")
        self._modules = modules
        self._check_engine(text, config)
        self._first = modules[0][0]
        self._devices: Dict[torch.device, _et.DeviceRows] = {}
        self._rows_of: List[_Row] = []
        self._forward: Optional[_Forward] = None
        self._originals = []
        self._check_row_ids()
        try:
            for table, (_, ple) in enumerate(modules):
                ngram = ple.ple_embedding
                original = ngram.ngram_embedding
                self._originals.append((ngram, original))
                ngram.ngram_embedding = _Lookup(self, table, original.num_embeddings,
                                                original.embedding_dim, self._dtype(ple, original))
            self._hook = text.layers[0].register_forward_pre_hook(self._start, with_kwargs=True)
        except BaseException:
            self._restore()
            raise

    # --- checks ------------------------------------------------------
    def _check_engine(self, text: nn.Module, config: Any) -> None:
        info = self.info
        layers = [i for i, _ in self._modules]
        first = self._modules[0][1].ple_embedding
        wants = [
            ("tables", info.tables, len(layers)),
            ("layer_ids", list(info.layer_ids), layers),
            ("rows_per_token", info.rows_per_token, first.ngram_heads),
            ("row_dim", info.row_dim, first.ngram_embedding.embedding_dim),
            ("vocab_size", info.vocab_size, config.vocab_size),
            ("table_rows", list(info.table_rows),
             [ple.ple_embedding.ngram_embedding.num_embeddings for _, ple in self._modules]),
        ]
        for name, got, want in wants:
            if got != want:
                raise ValueError(f"the engine's model does not match this model: engine.info.{name} "
                                 f"is {got}, the model's config gives {want}")

    def _check_row_ids(self) -> None:
        """The engine's row ids of a probe sequence equal the ones each
        n-gram module computes (its own forward, with a lookup that
        returns the ids it is given)."""
        v = self.info.vocab_size
        probe = [self.eos, 0, 1, v - 1, v - 2, 5, self.eos, self.eos, 3, 3, 3, self.eos]
        probe += [(i * 7919 + 13) % v for i in range(52)]
        with self.engine.sequence() as seq:
            engine_ids = seq.row_ids(np.array(probe, dtype=np.int64))
        for table, (layer, ple) in enumerate(self._modules):
            ngram = ple.ple_embedding
            device = ngram.layer_multipliers.device
            original = ngram.ngram_embedding
            ngram.ngram_embedding = _Ids()
            try:
                with torch.no_grad():
                    ids = ngram(torch.tensor([probe], device=device), None)
            finally:
                ngram.ngram_embedding = original
            ids = ids[0].cpu().numpy()
            if not np.array_equal(ids, engine_ids[:, table, :]):
                at = np.argwhere(ids != engine_ids[:, table, :])[0]
                raise ValueError(
                    f"the engine hashes differently from layer {layer}'s n-gram module: token "
                    f"{at[0]} of a probe sequence, head {at[1]}: row {int(engine_ids[at[0], table, at[1]])} "
                    f"vs the model's {int(ids[at[0], at[1]])} (a config field the engine read differs: "
                    f"seed, eos_token_id, ngram_vocab_size_base, ...)")

    @staticmethod
    def _dtype(ple: nn.Module, original: nn.Module) -> torch.dtype:
        weight = getattr(original, "weight", None)
        if isinstance(weight, nn.Parameter):
            return weight.dtype
        return ple.key_proj.weight.dtype  # the rows' consumer

    # --- the forward -------------------------------------------------
    @torch.compiler.disable
    def _start(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("ple_input_ids")
        if ids is None:
            raise RuntimeError("the decoder layer 0 got no ple_input_ids: engram.transformers needs "
                               "the Qwen4-Exp text model's own forward")
        if self._forward is not None:
            self._abandon()  # the last forward stopped before its PLE layers
        cache = kwargs.get("past_key_values")
        history = None
        if cache is not None:
            history = cache.get_conv_state(self._first, state_idx=NGRAM_STATE)
        batch, tokens = ids.shape
        both = ids if history is None else torch.cat([history[:, -self.context:].to(ids.device), ids], 1)
        host = both.to("cpu", torch.int64).numpy()
        lead_of = 0 if history is None else self.context
        reads = []
        try:
            for b in range(batch):
                reads.append(self._begin(b, None if history is None else tuple(host[b, :lead_of]),
                                         host[b, lead_of:]))
            for row in self._rows_of[batch:]:
                row.seq.close()
            del self._rows_of[batch:]
        except BaseException:
            self._abandon(reads)
            raise
        self._forward = _Forward(batch, tokens, reads)

    def _begin(self, b: int, history: Optional[Tuple[int, ...]], tokens: np.ndarray) -> _Read:
        fresh = (self.eos,) * self.context
        row = self._rows_of[b] if b < len(self._rows_of) else None
        lead: Tuple[int, ...] = ()
        if row is None or history is None or row.tail != history:
            if row is not None:
                row.seq.close()
            row = _Row(self.engine.sequence(), fresh)
            if b < len(self._rows_of):
                self._rows_of[b] = row
            else:
                self._rows_of.append(row)
            if history is not None and history != fresh:
                lead = history
        seq = row.seq
        feed = np.concatenate([np.array(lead, dtype=np.int64), tokens]) if lead else tokens
        ids = seq.row_ids(feed)[len(lead):] if self.check else None
        prefill = None
        if len(feed) == 1:
            seq.step_begin(int(feed[0]))
        else:
            prefill = seq.prefill(feed)
        row.tail = tuple(int(t) for t in (row.tail + tuple(feed))[-self.context:])
        return _Read(seq, prefill, len(lead), ids)

    @torch.compiler.disable
    def _rows(self, table: int, ngram_ids: torch.Tensor) -> torch.Tensor:
        fw = self._forward
        if fw is None:
            raise RuntimeError("a PLE lookup without a forward of the text model: engram.transformers "
                               "starts the reads in a pre-hook of layers[0]")
        batch, tokens = fw.batch, fw.tokens
        if tuple(ngram_ids.shape[:2]) != (batch, tokens):
            self._abandon()
            raise RuntimeError(f"the PLE layer got ids of shape {tuple(ngram_ids.shape)}; the reads "
                               f"started at layer 0 are for {batch} x {tokens} tokens")
        if self.check:
            self._compare(table, ngram_ids)
        rows = self._device_rows(ngram_ids.device, batch * tokens)
        lookup = self._originals[table][0].ngram_embedding
        try:
            got = rows.deliver(table, batch * tokens, lambda buf: self._fill(table, fw, buf))
        except BaseException:
            self._abandon()
            raise
        values = rows.decode(table, got).view(batch, tokens, self.info.rows_per_token, -1)
        fw.served += 1
        if fw.served == len(self._modules):
            self._end(fw)
        return values.to(lookup.weight.dtype)

    def _fill(self, table: int, fw: _Forward, buf: np.ndarray) -> None:
        n = fw.tokens
        for b, read in enumerate(fw.reads):
            out = buf[b * n:(b + 1) * n]
            if read.prefill is None:
                read.seq.step_wait_into(table, out)
                continue
            pf = read.prefill
            if read.lead:
                pf.wait(table, read.lead)  # the history's own rows: dropped
            done, widest = 0, pf.max_wait_tokens
            while done < n:
                upto = min(n, done + widest)
                pf.wait_into(table, read.lead + upto, out[done:upto])
                done = upto

    def _compare(self, table: int, ngram_ids: torch.Tensor) -> None:
        model_ids = ngram_ids.to("cpu").numpy()
        for b, read in enumerate(self._forward.reads):
            want = read.ids[:, table, :]
            if not np.array_equal(model_ids[b], want):
                at = np.argwhere(model_ids[b] != want)[0]
                raise AssertionError(
                    f"table {table}, batch row {b}, token {at[0]}, head {at[1]}: the model computes "
                    f"row {int(model_ids[b][at[0], at[1]])}, the engine read row {int(want[at[0], at[1]])}")

    def _device_rows(self, device: torch.device, tokens: int) -> _et.DeviceRows:
        rows = self._devices.get(device)
        if rows is None:
            # On the model's own stream: the copy is needed right after the
            # kernels queued before it, so a side stream would order it the
            # same way, for five more stream and event calls a lookup.
            rows = _et.DeviceRows(self.engine, device, tokens=tokens, side_stream=False)
            self._devices[device] = rows
        return rows

    def _end(self, fw: _Forward) -> None:
        self._forward = None
        for read in fw.reads:
            if read.prefill is not None:
                read.prefill.end()

    def _abandon(self, reads: Optional[List[_Read]] = None) -> None:
        """Drops a forward's reads (ended early or failed): its rows'
        sequences are closed, so the next forward starts them anew."""
        fw, self._forward = self._forward, None
        for read in (reads if reads is not None else fw.reads if fw is not None else []):
            if read.prefill is not None:
                read.prefill.end()
        for row in self._rows_of:
            row.seq.close()
        self._rows_of.clear()

    # --- lifetime ----------------------------------------------------
    def _restore(self) -> None:
        for ngram, original in self._originals:
            ngram.ngram_embedding = original
        self._originals = []

    def detach(self) -> None:
        """Puts the model back as it was (idempotent); the engine stays open."""
        hook = getattr(self, "_hook", None)
        if hook is not None:
            hook.remove()
            self._hook = None
        self._restore()
        self._abandon()

    def __enter__(self) -> "Attachment":
        return self

    def __exit__(self, *exc: Any) -> bool:
        self.detach()
        return False


class _Ids(nn.Module):
    """A lookup that returns the row ids it is given ([B, T, heads, 1])."""

    def __init__(self):
        super().__init__()
        self.weight = torch.empty(0, device="meta")  # leaves the ids where they are

    def forward(self, ngram_ids: torch.Tensor) -> torch.Tensor:
        return ngram_ids.unsqueeze(-1)


def attach(model: nn.Module, engine: Any, *, check: bool = False) -> Attachment:
    """Serves `model`'s PLE tables from `engine` until ``detach()``.

    `model` is a transformers Qwen4-Exp model (``Qwen4ExpForCausalLM``,
    ``Qwen4ExpForConditionalGeneration`` or its ``Qwen4ExpTextModel``),
    loaded with or without its tables (``from_pretrained``). `engine` is
    an ``engram.Engine`` opened on the same model's files, with
    ``format="raw"`` (BF16/F16/F32 rows go to the device as stored) or
    ``"f32"`` (rows decoded by the readers, cast to the table's dtype).
    The engine's tables, layers, rows per token, row width, vocabulary
    and table rows must match the model's config, and its row ids of a
    probe sequence must equal the model's own: else ``ValueError`` naming
    what differs. Returns the ``Attachment`` (a context manager)."""
    return Attachment(model, engine, check=check)


_WITHOUT_TABLES: Dict[type, type] = {}


def _without_tables(model_class: type) -> type:
    made = _WITHOUT_TABLES.get(model_class)
    if made is not None:
        return made

    def __init__(self, config, *args, **kwargs):
        model_class.__init__(self, config, *args, **kwargs)
        for module in self.modules():
            if isinstance(module, _NGram) and isinstance(module.ngram_embedding, nn.Embedding):
                table = module.ngram_embedding
                module.ngram_embedding = _Unloaded(table.num_embeddings, table.embedding_dim,
                                                   table.weight.dtype)

    ignore = list(getattr(model_class, "_keys_to_ignore_on_load_unexpected", None) or [])
    made = type(model_class.__name__, (model_class,), {
        "__init__": __init__,
        "__module__": model_class.__module__,
        "__qualname__": model_class.__qualname__,
        "__doc__": f"{model_class.__name__} without its PLE tables (engram.transformers).",
        # The table's shards in the checkpoint match no parameter: not read.
        "_keys_to_ignore_on_load_unexpected": ignore + [r"\.ple\.ple_embedding\.ngram_embedding\."],
    })
    _WITHOUT_TABLES[model_class] = made
    return made


def from_pretrained(path: Any, model_class: Optional[type] = None, **kwargs: Any) -> nn.Module:
    """transformers' ``from_pretrained(path, **kwargs)`` of a Qwen4-Exp
    checkpoint, without reading or allocating its PLE tables.

    `model_class` defaults to ``Qwen4ExpForConditionalGeneration`` for a
    ``qwen4_exp`` config and ``Qwen4ExpForCausalLM`` for
    ``qwen4_exp_text``. The model is an instance of a subclass of it
    (same name) whose n-gram modules hold a stand-in of the table's shape
    and dtype: every other weight loads as transformers loads it, and the
    model runs once ``attach`` gave it an engine."""
    if model_class is None:
        from transformers import AutoConfig

        config = kwargs.get("config") or AutoConfig.from_pretrained(path)
        kinds = {"qwen4_exp": _qwen.Qwen4ExpForConditionalGeneration,
                 "qwen4_exp_text": _qwen.Qwen4ExpForCausalLM}
        model_class = kinds.get(getattr(config, "model_type", None))
        if model_class is None:
            raise ValueError(f"{path}: config.json model_type is {config.model_type!r}, not "
                             f"qwen4_exp or qwen4_exp_text (pass model_class= for another class)")
    return _without_tables(model_class).from_pretrained(path, **kwargs)
