"""The asynchronous path from PyTorch (CUDA only; skipped without a GPU):
a fresh SparseTensor, its submanifold map, a conv forward and backward only
queue work (the host returns while the GPU is still held by a long kernel);
the same captured with torch.cuda.graph replays the eager results bit for
bit; maps built on the side stream give the same bits as maps built in line
(VOXCONV_MAP_STREAM=0)."""

import gc
import time

import pytest
import torch

import voxconv
from voxconv import nn as vnn

import ref

# The tensor-core family needs no pair counts on the host (voxconv.h) and
# is deterministic: bitwise comparisons hold.
ALGO = "[mask_gemm, mask_gemm_wgmma]"


def _layer(cuda, c=64):
    torch.manual_seed(3)
    return vnn.SparseConv3d(c, c, 3, bias=False, fwd_algo=ALGO, bwd_algo=ALGO,
                            deterministic=True).to(cuda).half()


def _data(cuda, c=64):
    coords = ref.rand_coords(40000, 48, 2).to(cuda)
    feats = torch.randn(len(coords), c, device=cuda, dtype=torch.float16)
    gout = torch.randn(len(coords), c, device=cuda, dtype=torch.float16)
    return coords, feats, gout


def _step(layer, coords, feats, gout):
    x = voxconv.SparseTensor(feats, coords)
    y = layer(x)
    y.feats.backward(gout)
    return y.feats


def test_host_does_not_wait(cuda):
    layer = _layer(cuda)
    coords, feats, gout = _data(cuda)
    feats.requires_grad_()
    for _ in range(2):  # tunes, then runs from the tuning cache
        _step(layer, coords, feats, gout)
    feats.grad = None
    torch.cuda.synchronize()
    want = (_step(layer, coords, feats, gout).clone(), feats.grad.clone())
    feats.grad = None
    layer.weight.grad = None
    torch.cuda.synchronize()
    torch.cuda._sleep(int(2e9))  # holds the stream for ~1 s
    t0 = time.perf_counter()
    y = _step(layer, coords, feats, gout)
    host = time.perf_counter() - t0
    busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    assert busy, "the GPU finished before the host returned: cannot tell"
    assert host < 0.3, f"map build + forward + backward took {host * 1e3:.0f} ms of host time"
    assert torch.equal(y, want[0]) and torch.equal(feats.grad, want[1])


def test_cuda_graph_replays_eager_bits(cuda):
    """Everything on one side stream (torch's recipe): the warm-up (the
    autotuner measures there), the eager reference and the capture, so the
    parameters' gradient accumulators live on the capture stream."""
    layer = _layer(cuda)
    coords, feats, gout = _data(cuda)
    static_feats = feats.clone().requires_grad_()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            static_feats.grad = None
            layer.weight.grad = None
            eager_y = _step(layer, coords, static_feats, gout).clone()
        eager_gx, eager_gw = static_feats.grad.clone(), layer.weight.grad.clone()
        static_feats.grad = None
        layer.weight.grad = None
    side.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        y = _step(layer, coords, static_feats, gout)
    for _ in range(2):
        with torch.cuda.stream(side):
            static_feats.grad.fill_(float("nan"))
            layer.weight.grad.fill_(float("nan"))
            y.fill_(float("nan"))
        side.synchronize()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(y, eager_y)
        assert torch.equal(static_feats.grad, eager_gx)
        assert torch.equal(layer.weight.grad, eager_gw)


def _pool_net(cuda):
    torch.manual_seed(5)
    return torch.nn.Sequential(
        vnn.SparseConv3d(16, 32, 3, fwd_algo=ALGO, bwd_algo=ALGO, deterministic=True),
        vnn.SparseMaxPool3d(2, 2),
        vnn.SparseConv3d(32, 32, 3, fwd_algo=ALGO, bwd_algo=ALGO, deterministic=True),
        vnn.SparseConvTranspose3d(32, 16, 2, stride=2, deterministic=True)).to(cuda).half()


def test_side_stream_maps_match_inline_maps(cuda, monkeypatch):
    coords = ref.rand_coords(30000, 64, 2).to(cuda)
    feats = torch.randn(len(coords), 16, device=cuda, dtype=torch.float16)
    results = []
    for side in ("1", "0"):
        monkeypatch.setenv("VOXCONV_MAP_STREAM", side)
        net = _pool_net(cuda)
        x = feats.clone().requires_grad_()
        for _ in range(2):
            x.grad = None
            net.zero_grad()
            y = net(voxconv.SparseTensor(x, coords))
            y.feats.float().square().sum().backward()
        torch.cuda.synchronize()
        results.append((y.coords.clone(), y.feats.clone(), x.grad.clone(),
                        [p.grad.clone() for p in net.parameters()]))
    a, b = results
    assert torch.equal(a[0], b[0])
    assert torch.equal(a[1], b[1])
    assert torch.equal(a[2], b[2])
    for ga, gb in zip(a[3], b[3]):
        assert torch.equal(ga, gb)


def test_bad_coordinates_reported_by_a_later_op(cuda):
    """A submanifold map's build does not wait for the GPU: duplicated
    coordinates are reported by the first op after the GPU has checked
    them, with the CPU builder's words."""
    coords = ref.rand_coords(500, 10).to(cuda)
    coords = torch.cat([coords, coords[3:4]])  # a duplicate of row 3
    x = voxconv.SparseTensor(torch.randn(len(coords), 8, device=cuda), coords)
    layer = vnn.SparseConv3d(8, 8, 3).to(cuda)
    with pytest.raises(voxconv.DuplicateCoordsError, match="are both"):
        y = layer(x)
        torch.cuda.synchronize()
        layer(y)



def test_block_cache_reuses_and_empties(cuda, monkeypatch, torch_allocator_calls):
    """The library keeps the blocks it frees (voxconv_allocator_t): once
    warm, a step asks torch's allocator for nothing (counted through the
    callbacks of a handle made for this test), gives the first step's bits,
    and voxconv.empty_cache() hands the idle blocks back."""
    calls = torch_allocator_calls
    monkeypatch.setenv("VOXCONV_MAP_STREAM", "0")  # maps on this stream's handle
    layer = _layer(cuda)
    coords, feats, gout = _data(cuda)
    # detached copies: a copy with a grad_fn would keep each step's graph,
    # and with it the step's maps and their blocks, alive
    with torch.cuda.stream(torch.cuda.Stream(cuda)):  # a new handle, made now
        first = _step(layer, coords, feats, gout).detach().clone()
        cold = dict(calls)
        again = _step(layer, coords, feats, gout).detach().clone()
        torch.cuda.current_stream().synchronize()
        # A coordinate manager and its sets refer to each other: their maps
        # (and the blocks the cache would reuse) go at a collection.
        gc.collect()
        before = dict(calls)
        warm = _step(layer, coords, feats, gout).detach().clone()
        torch.cuda.current_stream().synchronize()
        assert cold["alloc"] > 0, "the new handle never called torch: the test proves nothing"
        assert calls == before, f"a warm step called torch's allocator: {before} -> {calls}"
        assert torch.equal(first, again) and torch.equal(first, warm)
        held = torch.cuda.memory_allocated(cuda)
        voxconv.empty_cache()
        assert calls["free"] > before["free"]
        assert torch.cuda.memory_allocated(cuda) < held
        assert torch.equal(_step(layer, coords, feats, gout), first)
        torch.cuda.current_stream().synchronize()
