"""Attention for serving: paged key/value caches, packed (ragged) batches, single-token decode.

Options of :func:`~cudalibs.cudnn.attention.sdpa` and its plans (and, for packed batches, of
the backward), lowered into the same operation graphs (:mod:`cudalibs.cudnn.attention.lower`):

*Paged caches* (``page_table_k=``, ``page_table_v=``; the forward only)
    ``k`` and ``v`` are page pools, ``[num_pages, h_kv, page_size, d]`` (and ``d_v``), and
    sequence ``n``'s key ``j`` lives in page ``page_table[n, j // page_size]`` at row
    ``j % page_size``.  A page table is an int32 device array ``[b, pages_per_seq]`` or, as
    cuDNN names it, ``[b, 1, pages_per_seq, 1]`` (any strides); ``page_table_v`` None reads
    ``v`` through ``k``'s table.  The longest key sequence is ``s_kv = pages_per_seq *
    page_size``; ``seq_lens_kv`` (with ``seq_lens_q``: the padding mask) says how many keys
    each sequence has; the table entries past a sequence's last page do not enter its result,
    but every entry must be a page number in ``[0, num_pages)``.  The page numbers are read
    when the kernel runs -- keeping them in range is the caller's part -- so a captured CUDA
    graph replays with whatever the table holds then.  In the graph each pool feeds a
    ``PAGED_CACHE_LOAD`` operation whose virtual output is the contiguous ``K^T`` or ``V``
    the matmuls read (cuDNN's SDPA operation takes the tables itself).  There is no
    backward: cuDNN differentiates nothing through a page table, and training keeps ``k``
    and ``v`` contiguous.

*Packed (ragged) batches* (``ragged=``; forward and backward)
    The sequences of a batch lie one after another with no padding: ``q`` is
    ``[total_q, h_q, d]`` (rows are tokens), ``k`` and ``v`` ``[total_kv, h_kv, d]`` (and
    ``d_v``), and the outputs and gradients take the same packed shapes.  cuDNN sees the
    logical ``[b, h, max_seq_len, d]`` tensors, sequence ``n`` starting ``offsets[n]``
    *elements* past the pointer (``CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC``) and running for
    ``seq_lens[n]`` tokens.  A :class:`Ragged` carries the two offset arrays (int32 or int64,
    ``b + 1`` each: ``offsets[n] = tokens before n * token stride``) and the longest
    sequences the plan takes; :func:`ragged_batch` builds one from host lengths.  Every
    packed tensor of one side -- ``q``, ``o``, ``dO``, ``dq``; ``k``, ``v``, ``dk``, ``dv`` --
    is read through one offset array, so all of a side have one token stride (new outputs
    are laid out so).  Only the sequences' rows are written: spare rows after the last
    sequence keep what the memory held (in a new output, anything), so results are the
    first ``sum(seq_lens)`` rows.  Either side may stay dense (its offsets None), and packed
    queries go with a paged cache (chunked prefill).  The softmax statistics stay dense,
    ``[b, h_q, max_seq_len_q, 1]``.

*Decode*
    ``s_q = 1`` needs nothing special: one query row per sequence, against a long
    contiguous or paged cache, with grouped-query heads; no alignment rule involves the
    sequence lengths.  Its query sees every cached key: no causal mask, or
    ``causal="bottom_right"`` (a top-left one would show it key 0 only).

What a plan needs from these options (its problem, what each call binds, the scratch
operands autotuning runs on) is here, beside the graph pieces; the plans call into it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ...driver.array import DeviceArray, to_device
from ...errors import CudaLibsError
from ...runtime.operand import operand as _operand
from .. import _lib as T
from .. import backend as _g
from .._base import version

__all__ = ["Ragged", "ragged_batch", "PagedLayout", "RaggedLayout", "UIDS", "KEY_FIELDS",
           "PAGED_VERSION", "PAGED_RAGGED_VERSION", "UNIFIED_SERVING_VERSION", "Layout",
           "prepare", "coerce", "key_fields", "physical", "bind", "scratch", "problem_opts",
           "unified_reason", "ragged_offset", "paged_keys", "paged_values", "kv_dims",
           "unified_paged_attrs"]

#: Unique ids of the tensors these options bind (beside :data:`lower.UIDS`).
UIDS = {"page_table_k": 70, "page_table_v": 71, "ragged_q": 72, "ragged_kv": 73}
#: The names of the options in the one-shots' cache keys.
KEY_FIELDS = ("paged", "ragged")
#: The first cuDNN with paged caches in the composite graph, with packed queries beside a
#: paged cache, and with either in the single SDPA operation.
PAGED_VERSION = (9, 5, 0)
PAGED_RAGGED_VERSION = (9, 7, 0)
UNIFIED_SERVING_VERSION = (9, 15, 0)
# Packed batches before Hopper: cuDNN 9.18.1 and later.
_RAGGED_PRE_HOPPER = (9, 18, 1)

_I32 = np.dtype(np.int32)
_OFFSET_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
_ALIGN = 16
# The slots each side's offsets serve, and the side of each parameter name.
_SIDE = {"q": "q", "o": "q", "out": "q", "do": "q", "dq": "q",
         "k": "kv", "v": "kv", "dk": "kv", "dv": "kv"}


class Ragged(NamedTuple):
    """A packed batch: where each sequence starts in the packed tensors of each side.

    Attributes
    ----------
    offsets_q : DeviceArray or None
        int32 or int64, ``b + 1`` elements: sequence ``n`` of ``q`` (and ``o``, ``dO``,
        ``dq``) starts ``offsets_q[n]`` elements from the pointer, that is the tokens before
        it times the token stride (``q.strides[0] // q.itemsize``).  None: the queries are
        dense ``[b, h_q, s_q, d]``.
    offsets_kv : DeviceArray or None
        The same for ``k``, ``v`` (``dk``, ``dv``); None: dense (or paged) keys and values.
    max_seq_len_q, max_seq_len_kv : int or None
        The longest sequence of each packed side the plan takes (cuDNN's logical ``s``);
        None for a dense side.  A plan made for a bound runs any batch within it.
    """

    offsets_q: DeviceArray | None = None
    offsets_kv: DeviceArray | None = None
    max_seq_len_q: int | None = None
    max_seq_len_kv: int | None = None


class PagedLayout(NamedTuple):
    """What a plan knows of its paged cache: pool sizes, page size, the tables' layouts."""

    pages_k: int
    pages_v: int
    page_size: int
    pages_per_seq: int
    table_k: tuple              # element strides of k's [b, 1, pages_per_seq, 1] table
    table_v: tuple


class RaggedLayout(NamedTuple):
    """What a plan knows of its packed sides: the offsets' types (None: a dense side) and
    the packed tensors' rows."""

    q: np.dtype | None
    kv: np.dtype | None
    tokens_q: int
    tokens_kv: int


# -- building a packed batch ----------------------------------------------------------------------
def _bound(lengths, given, name) -> int:
    if given is not None:
        n = int(given)
        if n < max(lengths):
            raise ValueError(f"ragged_batch: {name} = {n} is below the longest sequence "
                             f"({max(lengths)})")
        return n
    return 1 << (max(lengths) - 1).bit_length()


def _offsets(lengths, rows, name, dtype, out, stream):
    host = np.asarray(lengths)
    if host.ndim != 1 or host.size == 0 or host.dtype.kind not in "iu" or host.min() < 1:
        raise ValueError(f"ragged_batch: seq_lens_{name} must be a non-empty sequence of "
                         f"positive integers, got {lengths!r}")
    if rows.ndim != 3:
        raise ValueError(f"ragged_batch: {'q' if name == 'q' else 'k'} must be the packed "
                         f"[total_tokens, h, d] tensor, got shape {rows.shape}")
    total = int(host.sum())
    if total > rows.shape[0]:
        raise ValueError(f"ragged_batch: seq_lens_{name} add up to {total} tokens; the packed "
                         f"tensor has {rows.shape[0]}")
    offs = np.concatenate(([0], np.cumsum(host, dtype=np.int64))) * (rows.strides[0]
                                                                       // rows.itemsize)
    if offs[-1] > np.iinfo(dtype).max:
        raise ValueError(f"ragged_batch: offsets up to {int(offs[-1])} elements do not fit "
                         f"{dtype}; pass dtype=numpy.int64")
    offs = offs.astype(dtype)
    if out is None:
        return to_device(offs, device=rows.device, stream=stream)
    if out.dtype != dtype or out.size != offs.size:
        raise ValueError(f"ragged_batch: out's offsets_{name} is {out.dtype} {out.shape}; "
                         f"this batch needs {dtype} ({offs.size},)")
    return out.copy_(offs.reshape(out.shape), stream)


def ragged_batch(seq_lens_q=None, seq_lens_kv=None, *, q=None, k=None, max_seq_len_q=None,
                 max_seq_len_kv=None, dtype=np.int32, out=None, stream=None) -> Ragged:
    """The :class:`Ragged` description of sequences packed one after another.

    Parameters
    ----------
    seq_lens_q, seq_lens_kv : sequence of int, optional
        The host lengths of the packed query and key/value sequences (None: that side is
        dense).  Pass the same lengths as ``seq_lens_q`` / ``seq_lens_kv`` to the call.
    q, k : DeviceArray or CUDA array
        The packed ``[total_tokens, h, d]`` tensors, required with their lengths: their token
        strides scale the offsets, and their rows bound the lengths' sum.
    max_seq_len_q, max_seq_len_kv : int, optional
        The longest sequence a plan made from this batch takes.  By default the longest
        length rounded up to a power of two, so that batches of similar lengths share one
        plan (the one-shots' cache key holds it); give a fixed bound (a scheduler's limit)
        to plan once for every batch, as a captured graph needs.
    dtype : numpy.int32 or numpy.int64
        The offsets' type (int64 when a side holds more than 2**31 elements).
    out : Ragged, optional
        Arrays to write the offsets into (those a plan or a captured graph already binds);
        the result then holds them.
    stream : Stream, optional
        The copies' stream.

    Returns
    -------
    Ragged

    Examples
    --------
    >>> lens = [5, 1, 12]                                   # doctest: +SKIP
    >>> q = cl.empty((18, 32, 128), bf16); k = cl.empty((18, 8, 128), bf16)
    >>> r = ragged_batch(lens, lens, q=q, k=k)
    >>> o = sdpa(q, k, k, ragged=r, seq_lens_q=lens, seq_lens_kv=lens, causal=True)
    """
    dt = np.dtype(dtype)
    if dt not in _OFFSET_DTYPES:
        raise TypeError(f"ragged_batch: dtype must be int32 or int64, not {dt}")
    if seq_lens_q is None and seq_lens_kv is None:
        raise ValueError("ragged_batch: give seq_lens_q, seq_lens_kv or both")
    if out is not None and not isinstance(out, Ragged):
        raise TypeError(f"ragged_batch: out must be a Ragged, not {type(out).__name__}")
    if seq_lens_q is not None and seq_lens_kv is not None and \
            len(np.asarray(seq_lens_q)) != len(np.asarray(seq_lens_kv)):
        raise ValueError("ragged_batch: seq_lens_q and seq_lens_kv must have one length per "
                         "sequence each")
    got = []
    for lens, arr, name, bound in ((seq_lens_q, q, "q", max_seq_len_q),
                                   (seq_lens_kv, k, "kv", max_seq_len_kv)):
        if lens is None:
            got += [None, None]
            continue
        if arr is None:
            raise TypeError(f"ragged_batch: seq_lens_{name} needs "
                            f"{'q' if name == 'q' else 'k'}= (the packed tensor)")
        arr = _operand(arr, "q" if name == "q" else "k", "ragged_batch", stream=stream)
        dst = None if out is None else getattr(out, f"offsets_{name}")
        if out is not None and dst is None:
            raise ValueError(f"ragged_batch: out has no offsets_{name} to write")
        got += [_offsets(lens, arr, name, dt, dst, stream),
                _bound([int(x) for x in np.asarray(lens)], bound, f"max_seq_len_{name}")]
    return Ragged(got[0], got[2], got[1], got[3])


# -- a plan's problem -----------------------------------------------------------------------------
class _Logical:
    """An operand as cuDNN sees it: a ``[b, h, s, d]`` shape and byte strides over the
    memory of the array it describes (a packed tensor or a page pool; never dereferenced)."""

    __slots__ = ("shape", "strides", "dtype")
    ndim = 4

    def __init__(self, shape, strides, dtype):
        self.shape, self.strides, self.dtype = tuple(shape), tuple(strides), dtype

    @property
    def size(self) -> int:
        return math.prod(self.shape)


def _version_text() -> str:
    return ".".join(map(str, version()))


def _need(op, want, what) -> None:
    if version() < want:
        raise CudaLibsError(f"{op}: {what} need cuDNN {'.'.join(map(str, want))} or later "
                            f"(loaded: {_version_text()})")


def _table(op, x, name, dev) -> DeviceArray:
    """A page table as cuDNN's ``[b, 1, pages_per_seq, 1]`` (a ``[b, pages]`` one viewed)."""
    t = _operand(x, name, op, device=dev, dtypes=(_I32,), ndim=(2, 4))
    if t.ndim == 4:
        if t.shape[1] != 1 or t.shape[3] != 1:
            raise ValueError(f"{op}: {name} must be [b, 1, pages_per_seq, 1] (or [b, "
                             f"pages_per_seq]), got shape {t.shape}")
        return t
    return t[:, None, :, None]


def _table_strides(t) -> tuple:
    """Element strides of a ``[b, 1, pages, 1]`` table (each size-1 dimension one past the
    rest, as a packed table has)."""
    st = [x // 4 for x in t.strides]
    if t.shape[0] == 1:
        st[0] = t.shape[2] * max(st[2], 1)
    if t.shape[2] == 1:
        st[2] = 1
    return (st[0], st[0], st[2], 1)


def _offsets_operand(op, x, name, dev, b=None) -> DeviceArray:
    a = _operand(x, f"ragged.{name}", op, device=dev, dtypes=_OFFSET_DTYPES, contiguous=True)
    if a.ndim not in (1, 4) or a.shape[0] < 2 or any(n != 1 for n in a.shape[1:]):
        raise ValueError(f"{op}: ragged.{name} must hold b + 1 offsets ([b + 1] or "
                         f"[b + 1, 1, 1, 1]), got shape {a.shape}")
    if b is not None and a.size != b + 1:
        raise ValueError(f"{op}: ragged.{name} has {a.size} offsets; the plan's batch of {b} "
                         f"needs {b + 1}")
    return _aligned(op, a, f"ragged.{name}")


def _aligned(op, a, name) -> DeviceArray:
    """``a``, whose address must have the alignment the graph's tensors declare."""
    if a.address % _ALIGN:
        raise ValueError(f"{op}: {name} must be {_ALIGN}-byte aligned (address "
                         f"{a.address:#x})")
    return a


class Layout:
    """The serving options of one plan, checked: the batch and sequence bounds they imply,
    what the :class:`~cudalibs.cudnn.attention.lower.Spec` records of them, and the logical
    ``[b, h, s, d]`` view of each operand (:meth:`view`) for the plans' shape checks."""

    __slots__ = ("op", "paged", "ragged", "b", "s_q", "s_kv", "_rows", "_rule")

    def __init__(self, op, rule):
        self.op = op
        self._rule = rule       # the plans' element-stride rule of every attention operand
        self.paged = self.ragged = None
        self.b = self.s_q = self.s_kv = None
        self._rows = {}     # side -> (tokens, token stride in bytes, name) of its first tensor

    def view(self, arr, name):
        """``arr`` (named ``name``) as cuDNN's logical ``[b, h, s, d]`` operand: a packed or
        paged one described, any other as it is (None stays None)."""
        if arr is None:
            return None
        side = _SIDE.get(name)
        r = self.ragged
        if r is not None and side is not None and getattr(r, side) is not None:
            return self._packed(arr, name, side)
        if self.paged is not None and name in ("k", "v"):
            return self._pool(arr, name)
        return arr

    def _packed(self, arr, name, side):
        op = self.op
        if arr.ndim != 3:
            raise ValueError(f"{op}: with ragged offsets for {side}, {name} is the packed "
                             f"[total_tokens, h, d] tensor, got shape {arr.shape}")
        tokens, ts = arr.shape[0], arr.strides[0]
        first = self._rows.setdefault(side, (tokens, ts, name))
        if tokens != first[0]:
            raise ValueError(f"{op}: {name} has {tokens} tokens, {first[2]} {first[0]}: the "
                             "packed tensors of one side hold the same tokens")
        if tokens > 1 and ts != first[1]:
            raise ValueError(
                f"{op}: {name}'s tokens are {ts} bytes apart, {first[2]}'s {first[1]}: the "
                f"packed tensors of one side are read through one offset array, so they need "
                f"one token stride (give {name} as a view of rows that far apart)")
        s = self.s_q if side == "q" else self.s_kv
        return _Logical((self.b, arr.shape[1], s, arr.shape[2]),
                        (s * ts, arr.strides[1], ts, arr.strides[2]), arr.dtype)

    def _pool(self, arr, name):
        if arr.ndim != 4:
            raise ValueError(f"{self.op}: with page tables, {name} is the page pool "
                             f"[num_pages, h_kv, page_size, d], got shape {arr.shape}")
        est = self._rule(arr, name, self.op)
        it = arr.dtype.itemsize
        return _Logical((self.b, arr.shape[1], self.s_kv, arr.shape[3]),
                        tuple(x * it for x in est), arr.dtype)

    def out_strides(self, qs, shape, d):
        """Element strides of a new ``o`` of logical ``shape`` when the queries (head dim
        ``d``, element strides ``qs``) are packed: one token stride with ``q``; else None (the
        plan's own default)."""
        if self.ragged is None or self.ragged.q is None:
            return None
        d_v = shape[3]
        if d_v == d:
            return tuple(qs)
        ts = qs[2]
        if shape[1] * d_v > ts:
            raise ValueError(f"{self.op}: o's heads ({shape[1]} x {d_v} elements) do not fit "
                             f"in q's token stride ({ts} elements), which packed outputs share; "
                             "give out= with that token stride")
        return (shape[2] * ts, d_v, ts, 1)

    def same_as_inputs(self, grads, outs, ins):
        """Gradient strides with each new gradient of a packed side laid out exactly as its
        input (one token stride with it)."""
        r = self.ragged
        if r is None:
            return grads
        out = list(grads)
        for i, (g, side) in enumerate(zip(outs, ("q", "kv", "kv"))):
            if g is None and getattr(r, side) is not None:
                out[i] = tuple(ins[i])
        return out


def prepare(op, dev, q, k, v, *, strides, page_table_k=None, page_table_v=None, ragged=None,
            padding=False, backward=False) -> Layout:
    """Check the serving options of a plan over ``q, k, v`` (as given: packed, pooled or
    dense) before any library call, and return their :class:`Layout`; ``strides`` is the
    plans' rule for an operand's element strides (``plan.elem_strides``), which a page
    pool's follow."""
    lay = Layout(op, strides)
    paged = page_table_k is not None or page_table_v is not None
    if paged and backward:
        raise ValueError(f"{op}: paged key/value caches are for the forward (inference) "
                         "only: cuDNN has no backward through page tables; train with "
                         "contiguous k and v")
    if ragged is not None and not isinstance(ragged, Ragged):
        raise TypeError(f"{op}: ragged must be a Ragged (see ragged_batch), not "
                        f"{type(ragged).__name__}")
    if ragged is not None and ragged.offsets_q is None and ragged.offsets_kv is None:
        ragged = None
    if (paged or ragged is not None) and not padding:
        raise ValueError(f"{op}: {'page tables' if paged else 'ragged offsets'} need "
                         "seq_lens_q and seq_lens_kv (the padding mask: how many tokens each "
                         "sequence has)")
    sources = []           # (what, batch) of every operand that says how many sequences
    if ragged is not None:
        cc = tuple(dev.compute_capability)
        if cc < (9, 0):
            _need(op, _RAGGED_PRE_HOPPER, "packed (ragged) batches before Hopper")
        offs = {}
        for side, arr, bound in (("q", ragged.offsets_q, ragged.max_seq_len_q),
                                 ("kv", ragged.offsets_kv, ragged.max_seq_len_kv)):
            if arr is None:
                if bound is not None:
                    raise ValueError(f"{op}: ragged.max_seq_len_{side} is for packed "
                                     f"{side}; offsets_{side} is None")
                continue
            a = offs[side] = _offsets_operand(op, arr, f"offsets_{side}", dev)
            sources.append((f"ragged.offsets_{side}", a.size - 1))
            if isinstance(bound, bool) or not isinstance(bound, (int, np.integer)) or \
                    bound < 1:
                raise ValueError(f"{op}: ragged.max_seq_len_{side} must be a positive int "
                                 f"(the longest packed sequence), got {bound!r}")
        lay.ragged = RaggedLayout(offs["q"].dtype if "q" in offs else None,
                                  offs["kv"].dtype if "kv" in offs else None,
                                  int(q.shape[0]) if "q" in offs else 0,
                                  int(k.shape[0]) if "kv" in offs else 0)
        lay.s_q = None if "q" not in offs else int(ragged.max_seq_len_q)
        lay.s_kv = None if "kv" not in offs else int(ragged.max_seq_len_kv)
        if "kv" in offs and paged:
            raise ValueError(f"{op}: a paged cache is not packed: give ragged.offsets_kv=None "
                             "with page tables")
    if paged:
        _need(op, PAGED_VERSION, "paged key/value caches")
        if lay.ragged is not None:
            _need(op, PAGED_RAGGED_VERSION, "packed queries with a paged cache")
        if page_table_k is None:
            raise ValueError(f"{op}: give page_table_k (page_table_v alone is not taken; None "
                             "reads v through k's table)")
        tk = _table(op, page_table_k, "page_table_k", dev)
        tv = tk if page_table_v is None else _table(op, page_table_v, "page_table_v", dev)
        for a, n in ((k, "k"), (v, "v")):
            if a.ndim != 4:
                raise ValueError(f"{op}: with page tables, {n} is the page pool [num_pages, "
                                 f"h_kv, page_size, d], got shape {a.shape}")
        if k.shape[2] != v.shape[2]:
            raise ValueError(f"{op}: k's pages hold {k.shape[2]} tokens, v's {v.shape[2]}: "
                             "one page size for both pools")
        if tv.shape[2] != tk.shape[2]:
            raise ValueError(f"{op}: page_table_k has {tk.shape[2]} pages per sequence, "
                             f"page_table_v {tv.shape[2]}: both tables span one length")
        sources += [("page_table_k", tk.shape[0]), ("page_table_v", tv.shape[0])]
        lay.paged = PagedLayout(int(k.shape[0]), int(v.shape[0]), int(k.shape[2]),
                                int(tk.shape[2]), _table_strides(tk), _table_strides(tv))
        lay.s_kv = lay.paged.pages_per_seq * lay.paged.page_size
    if lay.ragged is None and lay.paged is None:
        return lay
    if lay.ragged is None or lay.ragged.q is None:
        if q.ndim == 4:
            sources.append(("q", q.shape[0]))
            lay.s_q = int(q.shape[2])
    if lay.paged is None and (lay.ragged is None or lay.ragged.kv is None):
        if k.ndim == 4:
            sources.append(("k", k.shape[0]))
            lay.s_kv = int(k.shape[2])
    what, b = sources[0]
    for w, n in sources[1:]:
        if n != b:
            raise ValueError(f"{op}: {what} says the batch has {b} sequences, {w} {n}")
    lay.b = int(b)
    if lay.ragged is not None:
        for side, tokens in (("q", lay.ragged.tokens_q), ("kv", lay.ragged.tokens_kv)):
            if getattr(lay.ragged, side) is not None and tokens < lay.b:
                raise ValueError(f"{op}: the packed {side} holds {tokens} tokens, fewer than "
                                 f"its {lay.b} sequences")
    return lay


def coerce(op, page_table_k, page_table_v, ragged, stream=None) -> tuple:
    """``(page_table_k, page_table_v, ragged)`` with every array a DeviceArray (foreign arrays
    borrowed once, for the one-shots' cache key and their call alike)."""
    tk, tv = (None if t is None else _operand(t, n, op, stream=stream)
              for t, n in ((page_table_k, "page_table_k"), (page_table_v, "page_table_v")))
    if ragged is not None and not isinstance(ragged, Ragged):
        raise TypeError(f"{op}: ragged must be a Ragged (see ragged_batch), not "
                        f"{type(ragged).__name__}")
    if ragged is not None and ragged.offsets_q is None and ragged.offsets_kv is None:
        ragged = None           # nothing packed: the dense problem, as the plans take it
    if ragged is not None:
        ragged = ragged._replace(**{
            f: _operand(a, f"ragged.{f}", op, stream=stream)
            for f, a in (("offsets_q", ragged.offsets_q), ("offsets_kv", ragged.offsets_kv))
            if a is not None})
    return tk, tv, ragged


def key_fields(page_table_k, page_table_v, ragged) -> tuple:
    """The one-shots' cache-key values of these options (:data:`KEY_FIELDS`), from what
    :func:`coerce` gives: the tables' shapes and strides; the offsets' types and the bounds."""
    paged = None
    if page_table_k is not None or page_table_v is not None:
        paged = tuple(None if t is None else (t.shape, t.strides, t.dtype)
                      for t in (page_table_k, page_table_v))
    rag = None
    if ragged is not None:
        rag = tuple(None if a is None else a.dtype
                    for a in (ragged.offsets_q, ragged.offsets_kv)) + \
            (ragged.max_seq_len_q, ragged.max_seq_len_kv)
    return paged, rag


# -- what a plan binds and runs on ----------------------------------------------------------------
def physical(spec, specs) -> list:
    """``[(slot, shape, element strides)]`` of the arrays a call passes, from the logical
    ``specs`` of the same slots: packed tensors ``[tokens, h, d]``, page pools as they are."""
    r, p = spec.ragged, spec.paged
    if r is None and p is None:
        return specs
    out = []
    for slot, shape, est in specs:
        side = _SIDE.get(slot)
        if r is not None and side is not None and getattr(r, side) is not None:
            tokens = r.tokens_q if side == "q" else r.tokens_kv
            out.append((slot, (tokens, shape[1], shape[3]), (est[2], est[1], est[3])))
        elif p is not None and slot in ("k", "v"):
            pages = p.pages_k if slot == "k" else p.pages_v
            out.append((slot, (pages, shape[1], p.page_size, shape[3]), est))
        else:
            out.append((slot, shape, est))
    return out


def bind(plan, op, vals, page_table_k, page_table_v, ragged, dev) -> list:
    """A call's page tables and offsets into ``vals`` (checked against the plan); returns
    what must stay alive until the call is queued."""
    s = plan.spec
    keep = []
    paged = page_table_k is not None or page_table_v is not None
    if paged != (s.paged is not None):
        raise ValueError(f"{op}: the plan was made {'with' if s.paged else 'without'} page "
                         "tables")
    if paged:
        p = s.paged
        for slot, x, est in (("page_table_k", page_table_k, p.table_k),
                             ("page_table_v", page_table_v, p.table_v)):
            if x is None:       # v read through k's table
                if p.table_v != p.table_k:
                    raise ValueError(f"{op}: the plan was made with a page_table_v of its own "
                                     f"layout {p.table_v}; pass page_table_v")
                vals[slot] = vals["page_table_k"]
                continue
            t = _table(op, x, slot, dev)
            if t.shape != (s.b, 1, p.pages_per_seq, 1):
                raise ValueError(f"{op}: {slot} is {t.shape}; the plan was made for "
                                 f"{(s.b, 1, p.pages_per_seq, 1)} (or [b, pages_per_seq])")
            if _table_strides(t) != est:
                raise ValueError(f"{op}: {slot} has byte strides {t.strides}; the plan was "
                                 f"made for element strides {est}")
            vals[slot] = _aligned(op, t, slot).address
            keep.append(t)
    r = s.ragged
    if (ragged is not None) != (r is not None):
        raise ValueError(f"{op}: the plan was made {'with' if r else 'without'} ragged "
                         "offsets")
    if r is not None:
        if not isinstance(ragged, Ragged):
            raise TypeError(f"{op}: ragged must be a Ragged, not {type(ragged).__name__}")
        for side, want, arr, bound, plan_bound in (
                ("q", r.q, ragged.offsets_q, ragged.max_seq_len_q, s.s_q),
                ("kv", r.kv, ragged.offsets_kv, ragged.max_seq_len_kv, s.s_kv)):
            if (arr is None) != (want is None):
                raise ValueError(f"{op}: the plan was made with "
                                 f"{'packed' if want is not None else 'dense'} {side}; "
                                 f"ragged.offsets_{side} must be "
                                 f"{'given' if want is not None else 'None'}")
            if arr is None:
                continue
            a = _offsets_operand(op, arr, f"offsets_{side}", dev, s.b)
            if a.dtype != want:
                raise ValueError(f"{op}: ragged.offsets_{side} is {a.dtype}; the plan was made "
                                 f"for {want}")
            if bound is not None and bound > plan_bound:
                raise ValueError(f"{op}: ragged.max_seq_len_{side} = {bound} exceeds the "
                                 f"plan's {plan_bound}")
            vals[f"ragged_{side}"] = a.address
            keep.append(a)
    return keep


def scratch(spec, dev, stream) -> dict:
    """Timing operands of these options (``{slot: DeviceArray}``): valid page tables, and for
    a packed side offsets and lengths that fit its tokens (they replace the full lengths)."""
    s = spec
    out = {}
    if s.paged is not None:
        p = s.paged
        for slot, est, pages in (("page_table_k", p.table_k, p.pages_k),
                                 ("page_table_v", p.table_v, p.pages_v)):
            shape = (s.b, 1, p.pages_per_seq, 1)
            count = 1 + sum((n - 1) * st for n, st in zip(shape, est))
            flat = to_device((np.arange(count) % pages).astype(np.int32), device=dev,
                             stream=stream)
            out[slot] = DeviceArray.from_buffer(flat.base, shape, np.int32,
                                                tuple(x * 4 for x in est))
    r = s.ragged
    if r is not None:
        for side, dt, tokens, bound, ts in (("q", r.q, r.tokens_q, s.s_q, s.q_strides[2]),
                                            ("kv", r.kv, r.tokens_kv, s.s_kv, s.k_strides[2])):
            if dt is None:
                continue
            n = max(1, min(bound, tokens // s.b))
            out[f"ragged_{side}"] = to_device((np.arange(s.b + 1) * (n * ts)).astype(dt),
                                              device=dev, stream=stream)
            out["seq_q" if side == "q" else "seq_kv"] = to_device(
                np.full(s.b, n, np.int32), device=dev, stream=stream)
    return out


def problem_opts(spec) -> list:
    """The words these options add to a plan's problem text."""
    out = []
    p, r = spec.paged, spec.ragged
    if p is not None:
        out.append(f"paged {p.pages_per_seq}x{p.page_size} of {p.pages_k} pages")
    if r is not None:
        sides = [n for n, dt in (("q", r.q), ("kv", r.kv)) if dt is not None]
        out.append(f"packed {' and '.join(sides)} ({' / '.join(str(getattr(r, n)) for n in sides)}"
                   " offsets)")
    return out


def unified_reason(spec) -> str | None:
    """Why cuDNN's single SDPA operation cannot take these options (None when it can)."""
    if (spec.paged is not None or spec.ragged is not None) and \
            version() < UNIFIED_SERVING_VERSION:
        return (f"the SDPA operation takes page tables and packed batches from cuDNN "
                f"{'.'.join(map(str, UNIFIED_SERVING_VERSION))} (loaded: {_version_text()})")
    if spec.ragged is not None and spec.stats:
        # cuDNN's frontend gives the operation packed statistics with packed queries; the
        # plans keep them dense, a layout only the composite graph is known to write and read
        return "packed queries with dense statistics (training) take the composite graph"
    return None


# -- graph pieces ---------------------------------------------------------------------------------
def ragged_offset(B, slot):
    """The offsets tensor that ``slot``'s side is read through in builder ``B``'s graph (bound
    once per side), or None for a dense side."""
    r = B.spec.ragged
    side = _SIDE.get(slot)
    if r is None or side is None or getattr(r, side) is None:
        return None
    name = f"ragged_{side}"
    t = B.bound.get(name)
    if t is None:
        t = B.bound[name] = _g.tensor(UIDS[name], getattr(r, side), (B.spec.b + 1, 1, 1, 1),
                                      (1, 1, 1, 1), alignment=_ALIGN)
    return t


def kv_dims(spec, slot) -> tuple:
    """The dimensions of the ``k`` or ``v`` tensor a graph binds: the page pool's when the
    cache is paged, else the logical ``[b, h_kv, s_kv, d]``."""
    s = spec
    d = s.d if slot == "k" else s.d_v
    p = s.paged
    if p is None:
        return (s.b, s.h_kv, s.s_kv, d)
    return (p.pages_k if slot == "k" else p.pages_v, s.h_kv, p.page_size, d)


def _tables(B, slot):
    s, p = B.spec, B.spec.paged
    return B.io(f"page_table_{slot}", _I32, (s.b, 1, p.pages_per_seq, 1),
                p.table_k if slot == "k" else p.table_v)


def _load(B, slot, dims, strides):
    """``PAGED_CACHE_LOAD``: pool ``slot`` read through its page table into a virtual
    tensor of ``dims`` and ``strides`` (``seq_lens_kv`` tokens of each sequence)."""
    s = B.spec
    pool = B.io(slot, s.dtype, kv_dims(s, slot), s.k_strides if slot == "k" else s.v_strides)
    _, seq_kv = B.seq_lens()
    y = B.virt(dims, strides, s.dtype)
    D = T.CUDNN_TYPE_BACKEND_DESCRIPTOR
    B.ops.append(_g.make(T.CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR,
                         (T.CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC, D, pool),
                         (T.CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC, D,
                          _tables(B, slot)),
                         (T.CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC, D, seq_kv),
                         (T.CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, D, y)))
    return y


def paged_keys(B):
    """``K^T`` ``[b, h_kv, d, s_kv]`` gathered from the key pages."""
    s = B.spec
    return _load(B, "k", (s.b, s.h_kv, s.d, s.s_kv),
                 (s.d * s.s_kv * s.h_kv, s.d * s.s_kv, 1, s.d))


def paged_values(B):
    """``V`` ``[b, h_kv, s_kv, d_v]`` gathered from the value pages."""
    s = B.spec
    return _load(B, "v", (s.b, s.h_kv, s.s_kv, s.d_v),
                 (s.d_v * s.s_kv * s.h_kv, s.d_v * s.s_kv, s.d_v, 1))


def unified_paged_attrs(B) -> list:
    """The SDPA forward operation's page-table attributes (none without a paged cache)."""
    if B.spec.paged is None:
        return []
    D = T.CUDNN_TYPE_BACKEND_DESCRIPTOR
    return [(T.CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_KDESC, D, _tables(B, "k")),
            (T.CUDNN_ATTR_OPERATION_SDPA_FWD_PAGE_TABLE_VDESC, D, _tables(B, "v"))]
