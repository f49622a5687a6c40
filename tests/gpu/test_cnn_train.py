"""The residual CNN of examples/cnn_train.py, trained through cudalibs, against the same
network in PyTorch (same initial weights, same batches, float32 without TF32), and its
graph-replayed training step against the eager one.  torch appears only here, never in the
example.
"""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import cudalibs as cl
from cudalibs import testing as T

from ._sizes import gpu_settings

ROOT = Path(__file__).resolve().parents[2]
BATCH, STEPS = 32, 5
LR, MOMENTUM, WD = 0.05, 0.9, 5e-4
#: Relative agreement of each step's loss and of the parameters with PyTorch (float32).
RTOL = 1e-4

FEW = gpu_settings(3)


def _load_example():
    spec = importlib.util.spec_from_file_location("cnn_train",
                                                  ROOT / "examples" / "cnn_train.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


E = _load_example()


def _batches(seed, steps=STEPS):
    rng = np.random.default_rng(seed)
    return [(T.random_array((BATCH, 1, 8, 8), np.float32, rng=rng, low=-2, high=2),
             rng.integers(0, 10, BATCH).astype(np.int32)) for _ in range(steps)]


def _cudalibs_run(seed, data, *, graph=False):
    model = E.build(seed, batch=BATCH, lr=LR, momentum=MOMENTUM, weight_decay=WD)
    s = model.stream
    step = E.GraphedStep(model, (BATCH, 1, 8, 8)) if graph else model.step
    losses = []
    for x, y in data:
        step(cl.to_device(x, stream=s), cl.to_device(y, stream=s))
        losses.append(float(model.loss.get(stream=s)))
    return model, step, np.array(losses)


def _torch_run(torch, seed, data):
    import torch.nn.functional as F
    from torch import nn

    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    params = E.init_params(seed)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            for i, (cin, cout) in enumerate([(1, 16), (16, 16), (16, 16), (16, 32)], 1):
                setattr(self, f"conv{i}", nn.Conv2d(cin, cout, 3, padding=1, bias=False))
                setattr(self, f"bn{i}", nn.BatchNorm2d(cout))
            self.fc = nn.Linear(32, 10)

        def forward(self, x):
            r1 = F.relu(self.bn1(self.conv1(x)))
            r2 = F.relu(self.bn2(self.conv2(r1)))
            r3 = F.relu(self.bn3(self.conv3(r2)) + r1)
            r4 = F.relu(self.bn4(self.conv4(F.max_pool2d(r3, 2))))
            return self.fc(r4.mean(dim=(2, 3)))

    net = Net().cuda()
    tensors = _torch_params(net)
    with torch.no_grad():
        for name, t in tensors.items():
            t.copy_(torch.from_numpy(params[name]))
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WD)
    losses = []
    for x, y in data:
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(torch.from_numpy(x).cuda()), torch.from_numpy(y).long().cuda())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return net, np.array(losses)


def _torch_params(net) -> dict:
    """Our parameter names -> the torch tensors."""
    out = {}
    for name in E.param_shapes():
        layer, kind = name.split(".")
        module = getattr(net, layer)
        out[name] = module.weight if kind in ("w", "g") else module.bias
    return out


@FEW
@given(seed=st.integers(0, 2**31))
def test_first_steps_match_torch(device, seed):
    torch = pytest.importorskip("torch")
    data = _batches(seed)
    model, _, ours = _cudalibs_run(seed, data)
    net, theirs = _torch_run(torch, seed, data)
    print("losses", ours, theirs)
    for i, (a, b) in enumerate(zip(ours, theirs)):
        assert abs(a - b) <= RTOL * abs(b), f"step {i + 1}: loss {a} vs torch {b}"
    got = model.host_params()
    for name, t in _torch_params(net).items():
        T.assert_close(got[name], t.detach().cpu().numpy().astype(np.float64), rtol=RTOL,
                       msg=f"{name} after {STEPS} steps")
    for i, (mean, var) in model.host_running().items():
        bn = getattr(net, f"bn{i}")
        T.assert_close(mean, bn.running_mean.cpu().numpy().astype(np.float64), rtol=RTOL,
                       msg=f"bn{i} running mean")
        T.assert_close(var, bn.running_var.cpu().numpy().astype(np.float64), rtol=RTOL,
                       msg=f"bn{i} running var")


@FEW
@given(seed=st.integers(0, 2**31))
def test_graph_replayed_steps_match_eager(device, seed):
    data = _batches(seed)
    eager, _, eager_losses = _cudalibs_run(seed, data)
    graphed, step, graph_losses = _cudalibs_run(seed, data, graph=True)
    assert step.graph is not None and step.nodes > 0
    diff = np.abs(graph_losses - eager_losses) / np.abs(eager_losses)
    print("eager", eager_losses, "graph", graph_losses, "bitwise equal:",
          np.array_equal(graph_losses, eager_losses), "max rel diff", diff.max())
    assert diff.max() <= 1e-6, (eager_losses, graph_losses)
    a, b = eager.host_params(), graphed.host_params()
    for name in a:
        T.assert_close(b[name], a[name].astype(np.float64), rtol=1e-5, msg=name)
    # the replays trained: the losses are those of steps after the first, not repeats of it
    assert len(set(graph_losses.tolist())) == len(graph_losses)


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_example_reaches_its_accuracy(device, graph, tmp_path, capsys):
    png = tmp_path / "loss.png"
    argv = ["--plot", str(png)] + (["--graph"] if graph else [])
    status = E.main(argv)
    out = capsys.readouterr().out
    print(out)
    assert status == 0, out
    epochs = [line for line in out.splitlines() if line.startswith("epoch ")]
    assert len(epochs) == 12 and "steps/s" in epochs[0]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "matplotlib is not installed" in out
    else:
        assert png.stat().st_size > 0
