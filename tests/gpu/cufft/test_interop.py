"""The FFTs as frameworks drive them: the interop harness's combinations of PyTorch and CuPy
streams, threads and memory (three calls per shape, bitwise against the same calls on a
cudalibs stream), ``torch.fft`` as the peer, and capture inside ``torch.cuda.graph``.

cuFFT relaunches nothing recorded: every call queues the library's own kernels on the stream
it was given, reading and writing the framework's arrays in place."""

import numpy as np
import pytest

import cudalibs as cl
from cudalibs import cufft
from cudalibs import testing as T

from ..interop._harness import bitwise_diff, each_combo, host, run, torch_tensor
from ._util import fft_rtol

torch = pytest.importorskip("torch")
pytest.importorskip("cupy")

F32, C64 = np.dtype(np.float32), np.dtype(np.complex64)


#: op -> (input shape, input dtype, keyword arguments, output shape, output dtype): a real
#: transform with a norm (the scale kernel), zero-padding (a stage from cudalibs' pool on the
#: framework's stream) and a 2-D complex-to-real transform (its input copied: cuFFT
#: overwrites it).
ONE_SHOTS = {
    "rfft": ((16, 200), F32, dict(norm="ortho"), (16, 101), C64),
    "fftn": ((4, 30, 20), C64, dict(s=(32, 24), axes=(1, 2)), (4, 32, 24), C64),
    "irfft2": ((3, 24, 21), C64, dict(s=(24, 40)), (3, 24, 40), F32),
}


@pytest.mark.parametrize("op", list(ONE_SHOTS))
@each_combo
def test_one_shot(device, rng, combo, op):
    shape, dtype, kw, out_shape, out_dtype = ONE_SHOTS[op]
    fn = getattr(cufft, op)

    def call(d, s):
        return (fn(d["x"], out=d.get("out"), stream=s, **kw),)

    run(combo, rng, inputs=lambda r: {"x": T.random_array(shape, dtype, rng=r)}, call=call,
        dtype=str(np.dtype(dtype)), outs={"out": (out_shape, out_dtype)}, relaunch=False,
        name=f"cufft.{op}")


@each_combo
def test_held_plan(device, rng, combo):
    def execute(d, s):
        return (d["plan"].execute(d["x"], d.get("out"), stream=s),)

    run(combo, rng, inputs=lambda r: {"x": T.random_array((8, 96), C64, rng=r)},
        call=execute, dtype="complex64", outs={"out": ((8, 96), C64)},
        plan=lambda d: cufft.FFTPlan(d["x"], d.get("out"), axes=(1,)), relaunch=False,
        name="FFTPlan.execute")


@pytest.mark.parametrize("op, shape, dtype, kw", [
    ("fft", (8, 1000), C64, dict(dim=-1)),
    ("rfft", (8, 1000), F32, dict(dim=0)),
    ("fft2", (4, 64, 48), C64, {}),
    ("irfftn", (4, 16, 9), C64, dict(s=(16, 16))),
    ("ifftn", (3, 20, 30, 8), C64, dict(dim=(1, 2, 3), norm="ortho")),
])
def test_matches_torch_fft(device, rng, op, shape, dtype, kw):
    if op == "irfftn":      # a real signal's spectrum: what both libraries agree on
        host_x = np.fft.rfftn(T.random_array((4, 16, 16), np.float64, rng=rng),
                              axes=(1, 2)).astype(dtype)
    else:
        host_x = T.random_array(shape, dtype, rng=rng)
    x = torch_tensor(host_x)
    want = getattr(torch.fft, op)(x, **kw)
    ours = dict(kw)
    if "dim" in ours:
        ours["axis" if op in ("fft", "rfft") else "axes"] = ours.pop("dim")
    got = getattr(cufft, op)(x, stream=torch.cuda.current_stream(), **ours)
    torch.cuda.synchronize()
    lengths = want.shape if op == "irfftn" else shape
    T.assert_close(host(got), want.cpu().numpy().astype(np.complex128 if want.is_complex()
                                                       else np.float64),
                   rtol=2 * fft_rtol(dtype, lengths[-3:]), msg=f"{op} vs torch.fft")


def test_captured_by_torch_cuda_graph(device, rng):
    side = torch.cuda.Stream()
    x = torch_tensor(T.random_array((8, 300), F32, rng=rng))
    spectrum = torch.empty((8, 151), dtype=torch.complex64, device="cuda")
    back = torch.empty((8, 300), dtype=torch.float32, device="cuda")

    def step():
        s = torch.cuda.current_stream()
        cufft.rfft(x, norm="forward", out=spectrum, stream=s)
        cufft.irfft(spectrum, n=300, norm="forward", out=back, stream=s)

    torch.cuda.synchronize()
    with torch.cuda.stream(side):      # warm-up: plans, modules, the stream's pool blocks
        for _ in range(3):
            step()
    side.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=side):
        step()
    h = T.random_array((8, 300), F32, rng=rng)
    x.copy_(torch_tensor(h))
    g.replay()
    torch.cuda.synchronize()
    got_spec, got_back = host(spectrum), host(back)
    rs = cl.Stream()
    ref = cufft.rfft(cl.to_device(h, stream=rs), norm="forward", stream=rs)
    want_spec = ref.get(stream=rs)
    rs.close()
    assert bitwise_diff(got_spec, want_spec) is None, bitwise_diff(got_spec, want_spec)
    T.assert_close(got_back, h.astype(np.float64), rtol=2 * fft_rtol(F32, (300,)))
