"""Arrays from other libraries are checked before any C call (no GPU needed).

A foreign array's description (``__cuda_array_interface__`` or a DLPack capsule) reaches C as
sizes, strides and pointers, so every field is checked at import: the refusals here happen
before the driver is asked anything.  The driver entry points of the import are replaced by
stand-ins: ones that fail the test if reached (a refusal must come first), or a fake device
where an import must get through, so these tests run the same with or without a GPU.
"""

from __future__ import annotations

import ctypes
import importlib

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import dtypes
from cudalibs.driver import _dlpack as D
from cudalibs.driver import interop
from cudalibs.driver.array import DeviceArray, check_writable, may_self_overlap

# ``cudalibs.runtime.operand`` the module (the package exports the function under that name).
operand_mod = importlib.import_module("cudalibs.runtime.operand")
operand, operands = operand_mod.operand, operand_mod.operands

F32 = dtypes.lookup(np.float32)
PTR = 1 << 32


class FakeDevice:
    """Stands for the device of an imported array; nothing here asks the driver about it."""

    ordinal = 0

    def __repr__(self):
        return "<FakeDevice 0>"


DEV = FakeDevice()


def _no_driver(*args, **kwargs):
    raise AssertionError("the driver was asked before the producer's description was checked")


@pytest.fixture()
def no_driver(monkeypatch):
    """Any driver call of the import fails the test."""
    for name in ("_pointer_device", "as_device", "as_stream", "Device"):
        monkeypatch.setattr(interop, name, _no_driver)


@pytest.fixture()
def fake_device(monkeypatch):
    """Imports that pass the checks land on a fake device (no driver call)."""
    monkeypatch.setattr(interop, "_pointer_device", lambda ptr, stream=None: DEV)
    monkeypatch.setattr(interop, "as_device", lambda device=None: DEV)
    monkeypatch.setattr(interop, "Device", lambda ordinal=0: DEV)


class Producer:
    """A torch/CuPy-like object that only describes itself."""

    def __init__(self, **fields):
        self.__cuda_array_interface__ = fields


def cai(shape=(4,), typestr="<f4", data=(PTR, False), strides=None, version=2, **extra):
    return Producer(shape=shape, typestr=typestr, data=data, strides=strides, version=version,
                    **extra)


# -- __cuda_array_interface__: refused before any C call ---------------------------------------
@pytest.mark.parametrize("producer, error, words", [
    # shapes
    (cai(shape=(-4,)), ValueError, r"\['shape'\]\[0\] is -4: a dimension cannot be negative"),
    (cai(shape=(3, -1)), ValueError, r"\['shape'\]\[1\] is -1"),
    (cai(shape=(2**62 + 1,)), ValueError, r"holds 18446744073709551620 bytes, beyond 2\*\*63"),
    (cai(shape=(2**32, 2**32)), ValueError, "beyond 2\\*\\*63 - 1"),
    (cai(shape=(0, 2**64)), ValueError, r"\['shape'\]\[1\] is 18446744073709551616, beyond"),
    (cai(shape=(2.0,)), TypeError, r"\['shape'\]\[0\] is 2.0 \(float\), not an integer"),
    (cai(shape=(True, 2)), TypeError, r"\['shape'\]\[0\] is True \(bool\), not an integer"),
    (cai(shape=("3",)), TypeError, r"\['shape'\]\[0\] is '3' \(str\)"),
    (cai(shape=(None,)), TypeError, r"\['shape'\]\[0\] is None"),
    (cai(shape=4), TypeError, r"\['shape'\] is 4, not a tuple of integers"),
    (cai(shape=(1,) * 65), ValueError, "65 entries; an array has at most 64 dimensions"),
    # strides
    (cai(shape=(4,), strides=(6,)), ValueError,
     r"\['strides'\]\[0\] is 6 bytes, not a multiple of the item size 4"),
    (cai(shape=(4,), strides=(4.0,)), TypeError, r"\['strides'\]\[0\] is 4.0 \(float\)"),
    (cai(shape=(4,), strides=(False,)), TypeError, r"\['strides'\]\[0\] is False \(bool\)"),
    (cai(shape=(4, 4), strides=(16,)), TypeError,
     r"\['strides'\] \(16,\) do not match __cuda_array_interface__\['shape'\] \(4, 4\)"),
    (cai(shape=(4,), strides=(1 << 64,)), ValueError, "spans 18446744073709551616 bytes"),
    (cai(shape=(2**40,), strides=(2**40,)), ValueError, "spans 1208925819613529663078404 "
                                                         "bytes, beyond 2\\*\\*63 - 1"),
    (cai(shape=(3,), strides=(2**62,)), ValueError, "spans 9223372036854775812 bytes"),
    # an extent that runs below address 0 (reversed axis) or past 2**64
    (cai(shape=(4096,), strides=(-4,), data=(0x1000, False)), ValueError,
     "outside the 64-bit address space"),
    (cai(shape=(8,), data=(2**64 - 16, False)), ValueError, "outside the 64-bit address space"),
    # pointers
    (cai(shape=(4,), data=(0, False)), ValueError,
     r"\['data'\]\[0\] is a null pointer, but the array has 4 elements"),
    (cai(shape=(), data=(None, False)), ValueError, "null pointer, but the array has 1 element "),
    (cai(data=(-PTR, False)), ValueError, "gives address -4294967296, outside 0 to 2\\*\\*64"),
    (cai(data=(1 << 64, False)), ValueError, "outside 0 to 2\\*\\*64 - 1"),
    (cai(data=(float(PTR), False)), TypeError, r"\['data'\]\[0\] is 4294967296.0, not an int"),
    (cai(data=(PTR,)), TypeError, r"\['data'\] is \(4294967296,\), not a \(pointer, read-only\)"),
    (cai(data=(PTR, "no")), TypeError, r"\['data'\]\[1\] is 'no', not a bool"),
    # typestr and the rest
    (cai(typestr="<f"), ValueError, r"'<f' does not end in its item size \(float32 is 4 bytes\)"),
    (cai(typestr="<f8x"), TypeError, r"\['typestr'\] '<f8x'"),
    (cai(typestr=np.float32), TypeError, r"\['typestr'\] is .*, not a string"),
    (cai(typestr="<V4"), TypeError, r"\['typestr'\] '<V4': dtype \|V4 is not supported"),
    (cai(version="3"), TypeError, r"\['version'\] is '3', not a version number"),
    (cai(version=-1), TypeError, r"\['version'\] is -1"),
    (cai(version=3, stream=0), ValueError, "stream 0 is invalid"),
    (cai(version=3, stream=1.5), TypeError, r"\['stream'\] is 1.5, not a stream handle"),
])
def test_a_bad_cuda_array_interface_is_refused_before_any_c_call(no_driver, producer, error,
                                                                 words):
    with pytest.raises(error, match=words) as info:
        cl.asarray(producer)
    assert str(info.value).startswith("asarray: obj: ")
    # The one operand path gives the same words under the operand's name.
    with pytest.raises(error, match=words) as info:
        operand(producer, "a", "gemm")
    assert str(info.value).startswith("gemm: a: ")


def test_sizes_that_wrap_around_in_c_are_refused(no_driver):
    # (-4,): fill() would hand cuMemsetD32Async a count of 2**64 - 4.
    with pytest.raises(ValueError, match="-4"):
        cl.asarray(cai(shape=(-4,)))
    # float32 (2**62 + 1,): 2**64 + 4 bytes, which a 64-bit size_t holds as 4.
    with pytest.raises(ValueError, match=str(4 * (2**62 + 1))):
        cl.asarray(cai(shape=(2**62 + 1,)))


# -- __cuda_array_interface__: accepted --------------------------------------------------------
def test_a_null_pointer_is_accepted_for_an_empty_array(fake_device):
    for data in ((0, False), (None, False)):
        a = cl.asarray(cai(shape=(0, 3), data=data))
        assert (a.shape, a.size, a.address, a.readonly) == ((0, 3), 0, 0, False)


def test_numpy_integers_and_lists_are_integers(fake_device):
    a = cl.asarray(cai(shape=[np.int64(2), np.uint32(3)], strides=[np.int64(12), 4],
                       data=(np.uint64(PTR), np.bool_(False))))
    assert a.shape == (2, 3) and a.strides == (12, 4) and a.address == PTR
    assert all(type(v) is int for v in a.shape + a.strides + (a.address,))


def test_strides_none_means_c_contiguous(fake_device):
    a = cl.asarray(cai(shape=(2, 3, 4), typestr="<f8"))
    assert a.strides == (96, 32, 8) and a.is_c_contiguous


def test_negative_strides_are_read_with_the_extent_below_the_pointer(fake_device):
    # numpy semantics: a reversed axis runs below the first element's address.
    a = cl.asarray(cai(shape=(4,), strides=(-4,), data=(PTR + 12, False)))
    assert a.strides == (-4,) and not a.readonly
    check_writable(a, "a reversed view")      # reversed is not overlapping: writable
    # The same layout from one element too low an address reaches below 0.
    with pytest.raises(ValueError, match="address space"):
        cl.asarray(cai(shape=(4,), strides=(-4,), data=(8, False)))


def test_the_read_only_flag_is_carried_to_the_array_and_its_views(fake_device):
    ro = cl.asarray(cai(shape=(4, 6), data=(PTR, True)))
    assert ro.readonly is True
    rw = cl.asarray(cai(shape=(4, 6), data=(PTR, False)))
    assert rw.readonly is False
    views = (ro[1:], ro[1], ro[..., None], ro.T, ro.transpose(1, 0), ro.reshape(6, 4),
             ro.ravel(), ro.view(np.int32), ro.view(np.float16), ro[::2, ::-1])
    assert all(v.readonly for v in views)
    assert not any(v.readonly for v in (rw[1:], rw.T, rw.reshape(24)))
    with pytest.raises(AttributeError, match="read-only"):
        ro.readonly = False


def test_a_read_only_array_refuses_every_write_before_any_c_call(fake_device, monkeypatch):
    monkeypatch.setattr(interop, "as_stream", _no_driver)
    ro = cl.asarray(cai(shape=(4, 6), data=(PTR, True)))
    writes = {
        "fill": lambda: ro.fill(1.0),
        "fill of a view": lambda: ro[1:].fill(0),
        "copy_ from host": lambda: ro.copy_(np.zeros((4, 6), np.float32)),
        "copy_ of a view": lambda: ro.T.copy_(np.zeros((6, 4), np.float32)),
        "item assignment": lambda: ro.__setitem__(0, 1.0),
        "slice assignment": lambda: ro.__setitem__(slice(None), np.ones((4, 6), np.float32)),
        "out": lambda: operand(ro, "out", "gemm"),
        "out[i]": lambda: operand(ro, "out[1]", "layer_norm"),
        "written=True": lambda: operand(ro, "dx", "conv_backward_data", written=True),
        "operands, out": lambda: operands("conv_forward", (rw, "x"), (ro, "out")),
        "operands, written=": lambda: operands("sdpa_backward", (rw, "q"), (ro, "dq"),
                                               written=("dq",)),
    }
    rw = cl.asarray(cai(shape=(4, 6), data=(PTR, False)))
    for what, write in writes.items():
        with pytest.raises(ValueError, match="read-only") as info:
            write()
        assert "write into a copy" in str(info.value), what
    # Reading it is fine: as an input, or an operand said not to be written.
    assert operand(ro, "a", "gemm") is ro
    assert operand(ro, "out", "gemm", written=False) is ro
    assert operands("conv_forward", (ro, "x"), (rw, "out"))[:2] == (ro, rw)


def test_a_read_only_array_exports_read_only(fake_device):
    ro = cl.asarray(cai(shape=(2, 3), data=(PTR, True)))
    capsule = ro.__dlpack__(stream=-1, max_version=(1, 0))
    imp = D.consume(capsule, interop.MAX_NDIM)
    assert imp.read_only and imp.shape == (2, 3) and imp.ptr == PTR
    imp.release()
    # The legacy capsule has no read-only flag: a consumer of it would write.
    with pytest.raises(BufferError, match="read-only"):
        ro.__dlpack__(stream=-1)


# -- writes into overlapping layouts -----------------------------------------------------------
@pytest.mark.parametrize("shape, strides, overlaps", [
    ((3, 4), (16, 4), False),           # C-contiguous
    ((3, 4), (4, 12), False),           # Fortran order
    ((4,), (-4,), False),               # reversed
    ((3, 4), (32, 8), False),           # every other element
    ((3, 1), (4, 123), False),          # a length-1 axis' stride is never used
    ((0, 4), (0, 0), False),            # empty
    ((3, 4), (0, 4), True),             # a broadcast row
    ((3, 3), (4, 4), True),             # the same address from (0, 1) and (1, 0)
    ((2, 3), (12, 8), True),            # interleaved: disjoint, but not provably so cheaply
    ((4,), (2,), True),                 # elements that share bytes
])
def test_may_self_overlap(shape, strides, overlaps):
    assert may_self_overlap(shape, strides, 4) is overlaps


def test_an_overlapping_import_is_read_but_never_written(fake_device, monkeypatch):
    monkeypatch.setattr(interop, "as_stream", _no_driver)
    for strides in ((0, 4), (4, 4)):            # a broadcast; strides that interleave
        a = cl.asarray(cai(shape=(3, 3), strides=strides))
        assert not a.readonly
        assert operand(a, "a", "gemm") is a     # read: fine
        for write in (lambda: a.fill(0), lambda: a.copy_(np.zeros((3, 3), np.float32)),
                      lambda: a.__setitem__(slice(None), np.zeros((3, 3), np.float32)),
                      lambda: operand(a, "out", "gemm")):
            with pytest.raises(ValueError, match="overlapping elements"):
                write()


# -- DLPack capsules ---------------------------------------------------------------------------
def _capsule(shape, strides=None, *, ptr=PTR, dtype=(2, 32), versioned=True, read_only=False,
             device_type=D.kDLCUDA):
    strides = strides if strides is not None else (1,) * len(shape)
    return D.export(ptr, shape, strides, dtype, device_type, 0, object(), versioned, read_only)


def _tensor_of(capsule) -> D.DLTensor:
    name = ctypes.pythonapi.PyCapsule_GetName
    name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    versioned = name(capsule) == D.NAME_V
    addr = D._PyCapsule_GetPointer_obj(capsule, D.NAME_V if versioned else D.NAME)
    kind = D.DLManagedTensorVersioned if versioned else D.DLManagedTensor
    return kind.from_address(addr).dl_tensor


@pytest.mark.parametrize("make, error, words", [
    (lambda: _capsule((-4,)), ValueError, r"DLTensor.shape\[0\] is -4"),
    (lambda: _capsule((2**62, 4)), ValueError, "beyond 2\\*\\*63 - 1"),
    (lambda: _capsule((3,), (2**61,)), ValueError, r"DLTensor.strides\[0\] spans"),
    (lambda: _capsule((2**31, 3), (2**31, 1)), ValueError, r"strides \(8589934592, 4\) "
                                                            r"\(bytes\) spans"),
    (lambda: _capsule((8,), (-1,), ptr=16), ValueError, "64-bit address space"),
    (lambda: _capsule((4,), ptr=0), ValueError, "DLTensor.data is a null pointer, but the "
                                                "array has 4 elements"),
    (lambda: _capsule((4,), dtype=(2, 12)), TypeError, "code=2 bits=12 has no numpy"),
    (lambda: _capsule((4,), device_type=D.kDLCPU), TypeError, "device type 1, not CUDA"),
])
def test_a_bad_dlpack_tensor_is_refused_and_released(no_driver, make, error, words):
    base = D.exports_alive()
    with pytest.raises(error, match=words) as info:
        cl.from_dlpack(make())
    assert str(info.value).startswith("from_dlpack: ")
    # The capsule was consumed, and the producer's deleter ran at once.
    assert D.exports_alive() == base


def test_a_byte_offset_past_the_address_space_is_refused(no_driver):
    capsule = _capsule((4,))
    _tensor_of(capsule).byte_offset = 2**64 - 8
    with pytest.raises(ValueError, match="gives address .*, outside 0 to 2\\*\\*64 - 1"):
        cl.from_dlpack(capsule)


@pytest.mark.parametrize("ndim, words", [(65, "ndim is 65"), (-1, "ndim is -1")])
def test_a_dlpack_ndim_out_of_range_is_refused_before_its_shape_is_read(no_driver, ndim,
                                                                       words):
    capsule = _capsule((1,) * 65 if ndim > 0 else (2,))
    t = _tensor_of(capsule)
    t.ndim = ndim
    if ndim < 0:
        t.shape = None          # nothing may read it
    with pytest.raises(ValueError, match=words):
        cl.from_dlpack(capsule)
    # Left unconsumed: the producer's own capsule destructor frees it.
    assert D._PyCapsule_GetName_obj(capsule) == D.NAME_V


def test_a_dlpack_null_shape_is_refused(no_driver):
    capsule = _capsule((2, 2))
    _tensor_of(capsule).shape = None
    with pytest.raises(ValueError, match="DLTensor.shape is NULL for a 2-d tensor"):
        cl.from_dlpack(capsule)


def test_dlpack_null_data_is_accepted_for_an_empty_tensor(fake_device):
    a = cl.from_dlpack(_capsule((0, 5), ptr=0))
    assert a.shape == (0, 5) and a.size == 0 and a.address == 0


def test_the_dlpack_read_only_flag_is_carried(fake_device):
    ro = cl.from_dlpack(_capsule((2, 3), (3, 1), read_only=True))
    assert ro.readonly and ro[1].readonly and ro.T.readonly
    with pytest.raises(ValueError, match="read-only"):
        ro.fill(0)
    with pytest.raises(ValueError, match="read-only"):
        operand(ro, "out", "matmul")
    # Unflagged, and the legacy capsule (which cannot say read-only), give writable arrays.
    assert not cl.from_dlpack(_capsule((2, 3), (3, 1))).readonly
    assert not cl.from_dlpack(_capsule((2, 3), (3, 1), versioned=False)).readonly


def test_dlpack_element_strides_become_byte_strides(fake_device):
    a = cl.from_dlpack(_capsule((2, 3), (1, -2), ptr=PTR + 16, dtype=(2, 64)))
    assert a.strides == (8, -16) and a.address == PTR + 16


class DLPackProducer:
    """A producer speaking DLPack only, as JAX does."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack_device__(self):
        return (D.kDLCUDA, 0)

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        return self.capsule


class FakeStream:
    _handle = 0


def test_the_one_operand_path_checks_a_dlpack_producer(fake_device, monkeypatch):
    monkeypatch.setattr(interop, "as_stream", lambda stream=None, device=None: FakeStream())
    with pytest.raises(ValueError, match=r"conv_forward: x: DLPack DLTensor.shape\[1\] is -3"):
        operand(DLPackProducer(_capsule((2, -3))), "x", "conv_forward")
    ro = DLPackProducer(_capsule((4,), read_only=True))
    with pytest.raises(ValueError, match="gemm: out is read-only"):
        operand(ro, "out", "gemm")
    a = operand(DLPackProducer(_capsule((4,))), "x", "conv_forward")
    assert type(a) is DeviceArray and a.shape == (4,)
