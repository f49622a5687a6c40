"""The element types frameworks exchange beyond numpy's -- float8 (e4m3fn, e5m2), bfloat16 --
and complex64/128, through DLPack and the CUDA array interface, both ways.

In: a PyTorch tensor or a CuPy array through :func:`cudalibs.asarray` is the same memory
(same address) with the right dtype and the same bits; a producer that cannot describe a
dtype makes ``asarray`` raise :class:`TypeError` naming it (never a ``KeyError`` from the
producer's own tables).  Out: ``torch.from_dlpack`` / ``cupy.from_dlpack`` of a cudalibs
array is the same memory with the right dtype, or the consumer refuses the dtype by raising
(and the cudalibs array is untouched)."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import testing as T

from ._harness import torch_tensor

torch = pytest.importorskip("torch")
cupy = pytest.importorskip("cupy")

# An exception swallowed in a DLPack callback (a capsule destructor, a deleter) is reported
# as "unraisable": here it fails the test that caused it.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")

DTYPES = ("float8_e4m3fn", "float8_e5m2", "bfloat16", "complex64", "complex128")
ML = ("float8_e4m3fn", "float8_e5m2", "bfloat16")
SHAPE = (3, 5)


def _np(name):
    return cl.dtypes.lookup(name).numpy


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


def _host(name, seed):
    return T.random_array(SHAPE, _np(name), rng=seed)


def _check_in(arr, producer_ptr, name, h):
    assert arr.address == producer_ptr, f"{name}: cl.asarray copied (or moved) the data"
    assert arr.dtype == _np(name) and arr.shape == SHAPE, (arr.dtype, arr.shape)
    np.testing.assert_array_equal(_bits(arr.get()), _bits(h))


def _refused_naming(exc: BaseException, name: str) -> None:
    assert not isinstance(exc, KeyError), f"{name}: a KeyError escaped: {exc!r}"
    assert isinstance(exc, TypeError) and name in str(exc), \
        f"{name}: refused with {type(exc).__name__}: {exc}"


@pytest.mark.parametrize("name", DTYPES)
def test_torch_tensor_comes_in(device, name):
    h = _host(name, 1)
    t = torch_tensor(h)
    assert t.dtype == getattr(torch, name)
    try:
        a = cl.asarray(t)
    except Exception as exc:   # noqa: BLE001 - checked: only a TypeError naming the dtype
        _refused_naming(exc, name)
        # Only a dtype PyTorch itself cannot export may be refused; bfloat16 and the complex
        # types it exports through both protocols.
        assert name not in ("bfloat16", "complex64", "complex128"), exc
        return
    _check_in(a, t.data_ptr(), name, h)
    # Written on our side, read on PyTorch's: one memory.
    a[0].copy_(a[1])
    torch.cuda.synchronize()
    np.testing.assert_array_equal(_bits(_torch_to_host(t)[0]), _bits(h[1]))


def _torch_to_host(t) -> np.ndarray:
    name = str(t.dtype).removeprefix("torch.")
    if name in ML:
        raw = t.view(torch.int16 if t.element_size() == 2 else torch.int8).cpu().numpy()
        return raw.view(_np(name))
    return t.cpu().numpy()


@pytest.mark.parametrize("name", DTYPES)
def test_cudalibs_array_goes_out_to_torch(device, name):
    h = _host(name, 2)
    a = cl.to_device(h)
    try:
        t = torch.from_dlpack(a)
    except Exception as exc:   # noqa: BLE001 - the consumer's refusal: checked below
        assert not isinstance(exc, KeyError), f"{name}: a KeyError escaped: {exc!r}"
        assert name not in ("bfloat16", "complex64", "complex128"), exc
        np.testing.assert_array_equal(_bits(a.get()), _bits(h))
        return
    assert t.data_ptr() == a.address and t.dtype == getattr(torch, name)
    assert tuple(t.shape) == SHAPE
    np.testing.assert_array_equal(_bits(_torch_to_host(t)), _bits(h))


@pytest.mark.parametrize("name", DTYPES)
def test_cupy_array_comes_in(device, name):
    h = _host(name, 3)
    try:
        c = cupy.asarray(h)
    except Exception as exc:   # noqa: BLE001 - CuPy has no arrays of this dtype
        assert name in ML, f"CuPy refused {name}: {exc!r}"
        # Its pool still serves the memory: raw integers, seen as the dtype by cudalibs.
        raw = cupy.asarray(h.view(np.uint16 if h.dtype.itemsize == 2 else np.uint8))
        a = cl.asarray(raw).view(h.dtype)
        _check_in(a, raw.data.ptr, name, h)
        return
    assert c.dtype == h.dtype
    _check_in(cl.asarray(c), c.data.ptr, name, h)


@pytest.mark.parametrize("name", DTYPES)
def test_cudalibs_array_goes_out_to_cupy(device, name):
    h = _host(name, 4)
    a = cl.to_device(h)
    try:
        c = cupy.from_dlpack(a)
    except Exception as exc:   # noqa: BLE001 - the consumer's refusal: checked below
        assert name in ML, f"CuPy refused {name}: {exc!r}"
        # CuPy's own refusal reaches the caller as CuPy raised it (a TypeError for a dtype
        # code it lacks, NotImplementedError for bfloat16 before CuPy 14): the export's
        # callbacks must neither swallow it nor turn it into another error.
        said = str(exc)
        assert type(exc) in (TypeError, NotImplementedError) and (
            "dtype" in said or "bfloat16" in said), \
            f"{name}: CuPy's refusal arrived as {type(exc).__name__}: {said}"
        # The refused export left the array whole and usable.
        np.testing.assert_array_equal(_bits(a.get()), _bits(h))
        return
    assert c.data.ptr == a.address and c.dtype == h.dtype and c.shape == SHAPE
    np.testing.assert_array_equal(_bits(c.get()), _bits(h))


class _Undescribable:
    """A producer whose protocols cannot carry its dtype: its ``__cuda_array_interface__``
    raises KeyError (PyTorch's for float8) and its ``__dlpack__`` refuses to export."""

    def __init__(self, t):
        self.t = t
        self.dtype = t.dtype

    @property
    def __cuda_array_interface__(self):
        return self.t.__cuda_array_interface__

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, **kwargs):
        raise BufferError(f"{self.t.dtype} cannot be exported")


@pytest.mark.parametrize("name", ("float8_e4m3fn", "float8_e5m2"))
def test_a_dtype_no_protocol_carries_is_a_type_error_naming_it(device, name):
    t = torch_tensor(_host(name, 6))
    with pytest.raises(KeyError):
        t.__cuda_array_interface__       # what the producer itself raises
    with pytest.raises(TypeError, match=name) as info:
        cl.asarray(_Undescribable(t))
    assert "asarray" in str(info.value)


@pytest.mark.parametrize("name", ("complex64", "complex128"))
def test_complex_through_the_cuda_array_interface(device, name):
    # Both directions through __cuda_array_interface__ alone (CuPy's asarray reads it).
    h = _host(name, 5)
    a = cl.to_device(h)
    c = cupy.asarray(a)
    assert c.data.ptr == a.address and c.dtype == h.dtype
    np.testing.assert_array_equal(c.get(), h)
    t = torch_tensor(h)
    b = cl.asarray(t)
    assert b.address == t.data_ptr() and b.dtype == h.dtype
    np.testing.assert_array_equal(b.get(), h)
