"""The ``--moe`` mode of examples/transformer_train.py, without a GPU: its configuration, its
parameters and their gradient order, its command line, the kernels it compiles (NVRTC), and
the float64 reference its GPU tests compare with (tests/gpu/_transformer_ref.py) against
finite differences.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from cudalibs.driver import nvrtc  # noqa: E402
from tests.gpu import _transformer_ref as R  # noqa: E402


E = R.load_example()
TINY = replace(E.Config(), vocab=16, seq=8, d_model=32, heads=2, layers=2, ffn=96, batch=2)


@pytest.mark.parametrize("moe", [False, True])
def test_parameters_and_their_gradient_order(moe):
    cfg = replace(E.Config(), moe=moe)
    shapes = E.param_shapes(cfg)
    order = E.grad_order(cfg)
    assert len(order) == len(set(order)) and set(order) == set(shapes)
    params = E.init_params(cfg, 3)
    assert {k: v.shape for k, v in params.items()} == shapes
    assert all(v.dtype == np.float32 for v in params.values())
    mlp = {k.split(".", 1)[1] for k in shapes if k.startswith("h0.") and ".ln" not in k
           and "qkv" not in k and "proj" not in k}
    if moe:
        c, h, e = cfg.d_model, cfg.expert_ffn, cfg.experts
        assert h == cfg.ffn // cfg.topk == 256
        assert mlp == {"router.w", "experts.fc1.w", "experts.fc2.w"}
        assert shapes["h1.router.w"] == (e, c)
        assert shapes["h1.experts.fc1.w"] == (e, c, h)
        assert shapes["h1.experts.fc2.w"] == (e, h, c)
        # Matrices all: weight decay, the matrices' AdamW group; fc2 scaled as the dense one.
        assert all(E.decays(k) for k in shapes if k.startswith("h0.") and k.split(".", 1)[1]
                   in mlp)
        std = params["h0.experts.fc2.w"].std() / params["h0.experts.fc1.w"].std()
        assert std == pytest.approx(1 / np.sqrt(2 * cfg.layers), rel=0.05)
        # Every parameter before the first block's MLP is drawn as in the dense model.
        dense = E.init_params(replace(cfg, moe=False), 3)
        for k in ("tok_emb", "pos_emb", "h0.qkv.w", "h0.ln2.b"):
            np.testing.assert_array_equal(params[k], dense[k])
    else:
        assert mlp == {"fc1.w", "fc1.b", "fc2.w", "fc2.b"}


@pytest.mark.parametrize("change, match", [
    ({"topk": 0}, "topk must be 1 .. experts"),
    ({"topk": 9}, "topk must be 1 .. experts"),
    ({"topk": 3}, "whole multiple of 8"),           # 512 / 3
    ({"ffn": 520, "topk": 4}, "whole multiple of 8"),   # 130
    ({"moe_aux": -0.1}, "moe_aux must be >= 0"),
    ({"moe_aux": float("nan")}, "moe_aux must be >= 0"),
    ({"fp8": True}, "fp8 and moe do not combine"),
])
def test_config_refuses(change, match):
    with pytest.raises(ValueError, match=match):
        replace(E.Config(), moe=True, **change).check()


def test_config_accepts():
    for topk, experts in ((1, 1), (1, 8), (2, 8), (4, 4), (8, 64)):
        cfg = replace(E.Config(), moe=True, topk=topk, experts=experts).check()
        assert cfg.expert_ffn * topk == cfg.ffn
    # The MoE fields mean nothing to the dense model.
    replace(E.Config(), topk=3, experts=2).check()


def test_command_line():
    opts = vars(E.arg_parser().parse_args(["--moe", "--experts", "16", "--topk", "4",
                                           "--moe-aux", "0", "--d-model", "64"]))
    cfg = E._config(opts)
    assert (cfg.moe, cfg.experts, cfg.topk, cfg.moe_aux) == (True, 16, 4, 0.0)
    assert (cfg.ffn, cfg.expert_ffn) == (256, 64)
    cfg = E._config(vars(E.arg_parser().parse_args([])))
    assert not cfg.moe and (cfg.experts, cfg.topk, cfg.moe_aux) == (8, 2, 0.01)


@pytest.mark.parametrize("argv, match", [
    (["--moe", "--gpus", "2"], "--moe trains on one GPU"),
    (["--compare"], "give --fp8 or --moe"),
    (["--moe", "--topk", "9"], "topk must be 1 .. experts"),
    (["--moe", "--fp8"], "fp8 and moe do not combine"),
])
def test_command_line_refuses(capsys, argv, match):
    with pytest.raises(SystemExit) as exc:
        E.main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err, err


def test_data_parallel_refuses_moe():
    with pytest.raises(ValueError, match="moe is not implemented for data-parallel"):
        E.dp_replica(None, replace(E.Config(), moe=True))


def test_moe_kernels_compile():
    """:data:`MOE_SOURCE` compiles (NVRTC, no header) for the oldest GPU the grouped GEMM
    runs on, with the signatures :class:`MoeState` launches."""
    built = nvrtc.build(E.MOE_SOURCE, arch="sm_80", name="transformer_moe.cu", cache=False,
                        driver_cuda=nvrtc.version(), target="ptx")
    ptx = built.image.decode()
    params = {}
    for entry in ("moe_gelu", "moe_gelu_backward", "moe_to_bf16", "moe_counts"):
        head = ptx.split(f".entry {entry}(", 1)[1].split(")", 1)[0]
        params[entry] = [line.split()[1] for line in head.strip().splitlines()]
    assert params == {"moe_gelu": [".u64"] * 3, "moe_gelu_backward": [".u64"] * 4,
                      "moe_to_bf16": [".u64"] * 3, "moe_counts": [".u64", ".u64", ".u32"]}


def _directional_errors(cfg, seed, router_scale=10.0):
    """``{name: relative error}`` of the reference's gradient of the loss plus the
    load-balancing losses along a random direction, against a central difference."""
    host = E.init_params(cfg, seed)
    w = {k: v.astype(np.float64) * (router_scale if k.endswith("router.w") else 1.0)
         for k, v in host.items()}
    ids, tg = E.make_batch(np.random.default_rng(seed), cfg)
    base = R.step(cfg, w, ids, tg)
    rng = np.random.default_rng(seed + 1)

    def objective(ww):
        # The routing held (no step crosses a tie of router logits), the counts with it.
        r = R.step(cfg, ww, ids, tg, routing=base.topk if cfg.moe else None)
        return r.loss + sum(r.aux)

    out = {}
    for k, v in w.items():
        d = rng.standard_normal(v.shape)
        h = 1e-5 * max(1.0, float(np.abs(v).max()))
        fd = (objective({**w, k: v + h * d}) - objective({**w, k: v - h * d})) / (2 * h)
        an = float((base.grads[k] * d).sum())
        out[k] = abs(fd - an) / max(abs(fd), abs(an), 1e-300)
    return out


@pytest.mark.parametrize("moe, topk, aux", [(False, 2, 0.0), (True, 1, 0.01),
                                            (True, 2, 0.01), (True, 3, 0.5)])
def test_reference_gradients_are_derivatives(moe, topk, aux):
    """The float64 reference's gradients, the load-balancing loss's included, are the
    derivatives of its loss (central differences along a random direction per parameter)."""
    cfg = replace(TINY, moe=moe, experts=8, topk=topk, moe_aux=aux)
    errors = _directional_errors(cfg, seed=4)
    worst = max(errors.values())
    assert worst < 1e-5, sorted(errors.items(), key=lambda kv: -kv[1])[:4]


def test_reference_routing():
    """Top-k softmax routing of the reference on a hand-made case: renormalised for k > 1,
    the probability for k = 1, ties to the lower expert, the margins; forced routing used
    as given."""
    logits = np.array([[0.0, 2.0, 1.0, 2.0], [3.0, 0.0, 0.0, 1.0]])
    ids, margins = R.top_k(logits, 2)
    np.testing.assert_array_equal(ids, [[1, 3], [0, 3]])
    np.testing.assert_allclose(margins, [1.0, 1.0])
    cfg = replace(TINY, moe=True, topk=2)
    w, got, probs, gap = R._route(cfg, logits)
    np.testing.assert_array_equal(got, ids)
    np.testing.assert_allclose(w[0], [0.5, 0.5])
    np.testing.assert_allclose(w[1], [np.e ** 2 / (np.e ** 2 + 1), 1 / (np.e ** 2 + 1)])
    np.testing.assert_allclose(probs.sum(axis=1), 1.0)
    w1, got1, probs1, _ = R._route(replace(cfg, topk=1), logits)
    np.testing.assert_allclose(w1[:, 0], probs1[np.arange(2), got1[:, 0]])
    forced = np.array([[2, 0], [1, 2]])
    np.testing.assert_array_equal(R._route(cfg, logits, forced)[1], forced)
