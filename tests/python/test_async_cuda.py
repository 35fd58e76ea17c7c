"""The asynchronous path from PyTorch (CUDA only; skipped without a GPU):
a fresh SparseTensor, its submanifold map, a conv forward and backward only
queue work (the host returns while the GPU is still held by a long kernel);
the same captured with torch.cuda.graph replays the eager results bit for
bit; maps built on the side stream give the same bits as maps built in line
(VOXCONV_MAP_STREAM=0); a forward's maps are prefetched for the next one
(kmap._MapPlan) and give the same bits as maps built on request."""

import ctypes
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


def test_caller_thread_backward_gives_the_same_bits(cuda):
    """The backward on the calling thread (voxconv.caller_thread_backward)
    runs the same nodes: a conv + pool + conv network's gradients are
    bitwise those of torch's device-thread backward, and the switch is off
    only inside the block."""
    if not hasattr(torch.autograd, "set_multithreading_enabled"):
        pytest.skip("torch < 2.0 has no set_multithreading_enabled")
    torch.manual_seed(5)
    net = vnn.Sequential(
        vnn.SparseConv3d(32, 32, 3, bias=False, fwd_algo=ALGO, bwd_algo=ALGO,
                         deterministic=True),
        vnn.SparseMaxPool3d(2, 2),
        vnn.SparseConv3d(32, 48, 3, bias=False, fwd_algo=ALGO, bwd_algo=ALGO,
                         deterministic=True)).to(cuda).half()
    coords, feats, _ = _data(cuda, 32)
    grads = []
    for caller in (False, True, False):
        leaf = feats.detach().clone().requires_grad_()
        y = net(voxconv.SparseTensor(leaf, coords))
        g = torch.ones_like(y.feats)
        with voxconv.caller_thread_backward(caller):
            assert torch._C._is_multithreading_enabled() is not caller
            y.feats.backward(g)
        assert torch._C._is_multithreading_enabled()
        grads.append([leaf.grad.clone()] + [p.grad.clone() for p in net.parameters()])
        net.zero_grad(set_to_none=True)
    for a, b in zip(grads[0], grads[1]):
        assert torch.equal(a, b)
    for a, b in zip(grads[0], grads[2]):
        assert torch.equal(a, b)


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


def _assert_same_results(a, b):
    """(coords, feats, input grad, parameter grads) of two runs, bit for bit."""
    for x, y in zip(a[:3], b[:3]):
        assert torch.equal(x, y)
    for ga, gb in zip(a[3], b[3]):
        assert torch.equal(ga, gb)


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
    _assert_same_results(*results)


def test_build_worker_matches_inline_builds(cuda, monkeypatch):
    """The map stream's build worker (on by default) issues the prefetched
    and requested submanifold and deferred strided builds off the caller's
    thread, and those maps are ordered through the library: three forward
    + backward passes with it give the bits of the same passes with the
    worker off, and its maps really came from the worker."""
    monkeypatch.setenv("VOXCONV_MAP_STREAM", "1")
    monkeypatch.setenv("VOXCONV_MAP_PREFETCH", "1")
    coords = ref.rand_coords(30000, 64, 2).to(cuda)
    feats = torch.randn(len(coords), 16, device=cuda, dtype=torch.float16)
    results = []
    vk = voxconv.kmap
    try:
        for on in (True, False):
            vk._set_map_worker(cuda, on)
            vk._plan.plans.clear()
            net = _pool_net(cuda)
            for i in range(3):
                pre, t, res = _forward_backward(net, coords, feats)
                if i > 0:
                    assert pre and all(km._lib_order == on for km in pre.values())
            results.append(res)
    finally:
        vk._set_map_worker(cuda, vk._map_worker_enabled())
    _assert_same_results(*results)


def _forward_backward(net, coords, feats):
    x = feats.clone().requires_grad_()
    net.zero_grad()
    t = voxconv.SparseTensor(x, coords)
    pre = {k: v[0] for k, v in t.coordinate_set.prefetched.items()}  # queued at creation
    y = net(t)
    y.feats.float().square().sum().backward()
    torch.cuda.synchronize()
    return pre, t, (y.coords.clone(), y.feats.clone(), x.grad.clone(),
                    [p.grad.clone() for p in net.parameters()])


def test_prepared_maps_match_unprepared_maps(cuda, monkeypatch):
    """The map stream prepares each submanifold map after its build
    (voxconv_kmap_prepare: row orders, and under autograd dgrad's and the
    pair lists; only those maps, requested or prefetched); the convolutions
    on the op stream then use tables another stream made. Forward +
    backward and a no_grad forward give the bits of the same passes with
    VOXCONV_MAP_PREPARE=0 (the convolutions make the tables)."""
    monkeypatch.setenv("VOXCONV_MAP_STREAM", "1")
    coords = ref.rand_coords(30000, 64, 2).to(cuda)
    feats = torch.randn(len(coords), 16, device=cuda, dtype=torch.float16)
    vk = voxconv.kmap
    calls = []
    real = vk.KernelMap.prepare

    def spy(km, handle, what):
        calls.append((km.mode, what))
        return real(km, handle, what)

    monkeypatch.setattr(vk.KernelMap, "prepare", spy)
    train = voxconv._lib.PREPARE_FORWARD | voxconv._lib.PREPARE_DGRAD | \
        voxconv._lib.PREPARE_PAIRS
    results, inference = [], []
    for prepare in ("1", "0"):
        monkeypatch.setenv("VOXCONV_MAP_PREPARE", prepare)
        vk._plan.plans.clear()
        calls.clear()
        net = _pool_net(cuda)
        for _ in range(3):  # the later ones prefetch
            _, _, res = _forward_backward(net, coords, feats)
        results.append(res)
        if prepare == "1":
            # one submanifold map a level and a forward, never another mode
            assert len(calls) == 6 and set(calls) == {(voxconv._lib.KMAP_SUBMANIFOLD, train)}
        else:
            assert calls == []
        calls.clear()
        with torch.no_grad():
            y = net(voxconv.SparseTensor(feats, coords))
        torch.cuda.synchronize()
        inference.append(y.feats.clone())
        if prepare == "1":
            assert calls == [(voxconv._lib.KMAP_SUBMANIFOLD, voxconv._lib.PREPARE_FORWARD)] * 2
    _assert_same_results(*results)
    assert torch.equal(*inference)


def test_prefetched_maps_match_maps_built_on_request(cuda, monkeypatch):
    """From the second forward on, a new input's submanifold and pooling
    maps are queued when the tensor is made (the pooling map deferred: no
    host wait), each level's when the level before it is pooled; every one
    is used, and results are those of maps built on request, bit for bit."""
    coords = ref.rand_coords(30000, 64, 2).to(cuda)
    feats = torch.randn(len(coords), 16, device=cuda, dtype=torch.float16)
    results = []
    for prefetch in ("1", "0"):
        monkeypatch.setenv("VOXCONV_MAP_PREFETCH", prefetch)
        voxconv.kmap._plan.plans.clear()
        net = _pool_net(cuda)
        for i in range(3):
            pre, t, res = _forward_backward(net, coords, feats)
            modes = sorted(km.mode for km in pre.values())
            if prefetch == "1" and i > 0:
                assert modes == [voxconv._lib.KMAP_SUBMANIFOLD, voxconv._lib.KMAP_STRIDED]
                strided = [km for km in pre.values() if km.mode == voxconv._lib.KMAP_STRIDED]
                assert strided[0]._n_out >= 0  # the pooling layer completed it
                # every prefetched map was asked for: none left over
                assert not t.coordinate_set.prefetched
            else:
                assert modes == []
        results.append(res)
    _assert_same_results(*results)


def test_prefetch_queues_what_is_needed_first(cuda, monkeypatch):
    """The order in which a new set's maps are queued on the map stream
    (the order of its `prefetched` dict), as measured best on workload A
    (docs/perf-notes.md item 108): with the build worker, the strided map
    first at every level (the pooling layer waits for its count; queued
    second, it made A's forward ~0.6 ms slower); without the worker, the
    submanifold map first. (The code's comment had said the opposite of
    both since the worker came, 7ba40f3.)"""
    from voxconv import kmap as vkmap
    monkeypatch.setenv("VOXCONV_MAP_PREFETCH", "1")
    ms = vkmap.map_stream(torch.device(cuda))
    was = ms.handle.worker
    torch.manual_seed(3)
    net = torch.nn.Sequential(
        vnn.SparseConv3d(16, 16, 3), vnn.SparseMaxPool3d(2, 2),
        vnn.SparseConv3d(16, 16, 3), vnn.SparseMaxPool3d(2, 2),
        vnn.SparseConv3d(16, 16, 3)).to(cuda).half()
    coords = ref.rand_coords(20000, 64, 2).to(cuda)
    feats = torch.randn(len(coords), 16, device=cuda, dtype=torch.float16)
    queued = []
    orig = vkmap.CoordinateManager._prefetch

    def recorded(self, s):
        orig(self, s)
        if s.prefetched:
            queued.append((s.parent is None, [km.mode for km, _ in s.prefetched.values()]))

    monkeypatch.setattr(vkmap.CoordinateManager, "_prefetch", recorded)
    sub, strided = voxconv._lib.KMAP_SUBMANIFOLD, voxconv._lib.KMAP_STRIDED
    try:
        for worker, want in ((True, [(True, [strided, sub]), (False, [strided, sub])]),
                             (False, [(True, [sub, strided]), (False, [sub, strided])])):
            vkmap._set_map_worker(cuda, worker)
            vkmap._plan.plans.clear()
            with torch.no_grad():
                for _ in range(2):  # the plan learns the maps
                    net(voxconv.SparseTensor(feats, coords))
                queued.clear()
                net(voxconv.SparseTensor(feats, coords))
            # the input set, then level 1 (level 2's set has no strided map)
            assert queued[:2] == want, (worker, queued)
    finally:
        vkmap._set_map_worker(cuda, was)


def test_deferred_strided_map_reads_its_count_when_asked(cuda):
    coords = ref.rand_coords(5000, 32, 2).to(cuda)
    h = voxconv.kmap.map_stream(torch.device(cuda)).handle
    args = (voxconv._lib.KMAP_STRIDED, (2, 2, 2), (2, 2, 2), (1, 1, 1), coords, (1, 1, 1))
    sync = voxconv.kmap.KernelMap(h, *args)
    deferred = voxconv.kmap.KernelMap(h, *args, defer=True)
    assert deferred._n_out == -1 and "pending" in repr(deferred)
    assert deferred.n_out == sync.n_out  # waits for the build
    assert deferred.n_pairs == sync.n_pairs
    assert torch.equal(deferred.out_coords(), sync.out_coords())


def test_map_plan_learns_and_forgets():
    """The plan (pure Python): keys in request order, no duplicates, a cap
    per path and on the number of paths, forgotten keys gone."""
    plan = voxconv.kmap._MapPlan()
    plan.learn(("p",), "a", 1)
    plan.learn(("p",), "b", 2)
    (_, _, sa), (_, _, sb) = plan.get(("p",))
    plan.learn(("p",), "a", 3)  # known: arguments kept, stamp renewed
    assert [(k, a) for k, a, _ in plan.get(("p",))] == [("a", 1), ("b", 2)]
    plan.forget(("p",), [("a", sa)])  # used again since that prefetch: kept
    plan.forget(("p",), [("b", sb)])  # not used since: dropped
    assert [(k, a) for k, a, _ in plan.get(("p",))] == [("a", 1)]
    for i in range(plan.KEYS_MAX + 5):
        plan.learn(("q",), i, i)
    assert len(plan.get(("q",))) == plan.KEYS_MAX
    for i in range(plan.PATHS_MAX + 1):
        plan.learn(("r", i), 0, 0)
    assert len(plan.plans) <= plan.PATHS_MAX
    assert plan.get(("never",)) == ()


def test_unused_prefetched_maps_are_forgotten(cuda):
    """A network whose input is later used differently: the maps prefetched
    for the second use and never asked for leave the plan when the tensor
    goes, so a third input is not given them."""
    voxconv.kmap._plan.plans.clear()
    coords = ref.rand_coords(3000, 24, 1).to(cuda)
    feats = torch.randn(len(coords), 8, device=cuda)
    k3 = vnn.SparseConv3d(8, 8, 3).to(cuda)
    k5 = vnn.SparseConv3d(8, 8, 5).to(cuda)
    k3(voxconv.SparseTensor(feats, coords))  # learns the k3 map
    t = voxconv.SparseTensor(feats, coords)
    assert len(t.coordinate_set.prefetched) == 1  # k3, queued
    k5(t)  # asks for k5 only
    path = t.coordinate_set.path
    before = [k[1] for k, _, _ in voxconv.kmap._plan.get(path)]
    assert before == [(3, 3, 3), (5, 5, 5)], (path, before)
    del t
    gc.collect()
    keys = [k for k, _, _ in voxconv.kmap._plan.get(path)]
    assert [k[1] for k in keys] == [(5, 5, 5)], (path, before, keys)
    t = voxconv.SparseTensor(feats, coords)
    assert [k[1] for k in t.coordinate_set.prefetched] == [(5, 5, 5)]


def test_bad_coordinates_through_prefetched_maps(cuda):
    """An input with duplicate coordinates whose maps were prefetched (the
    plan learned from an earlier forward): the forward raises
    DuplicateCoordsError with the builder's words -- the pooling layer
    waits for its deferred map's verdict -- and never returns garbage."""
    voxconv.kmap._plan.plans.clear()
    net = _pool_net(cuda)
    coords = ref.rand_coords(3000, 24, 2).to(cuda)
    with torch.no_grad():
        net(voxconv.SparseTensor(torch.randn(len(coords), 16, device=cuda,
                                             dtype=torch.float16), coords))
        bad = torch.cat([coords, coords[5:6]])
        t = voxconv.SparseTensor(torch.randn(len(bad), 16, device=cuda, dtype=torch.float16),
                                 bad)
        assert t.coordinate_set.prefetched  # queued from the plan
        with pytest.raises(voxconv.DuplicateCoordsError, match="are both"):
            net(t)


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


def _block_state(ptr):
    """The caching allocator's state of the block starting at `ptr`
    ("active_allocated", "active_pending_free", "inactive"), or None."""
    for seg in torch.cuda.memory_snapshot():
        addr = seg["address"]
        for b in seg["blocks"]:
            if addr == ptr:
                return b["state"]
            addr += b["size"]
    return None


def test_coordinates_outlive_queued_map_builds(cuda, monkeypatch):
    """A set can go while a map of it is still queued on the map stream: its
    coordinates' memory must not be handed out again (and overwritten)
    before the map stream has read them. The map stream is held by a long
    kernel, the map is requested (queued behind it) and every reference to
    the set is dropped. Then the allocator must hold the coordinates' block
    back ("active_pending_free": it waits for the map stream) rather than
    list it free for the caller's stream. Tensors of the same size are then
    made and filled until the block comes back or 64 were made, and the map
    must still be the map of the original coordinates, pair for pair. (The
    state is the reliable check: whether a later allocation picks that
    block depends on the pool.)"""
    monkeypatch.setenv("VOXCONV_MAP_STREAM", "1")
    monkeypatch.setenv("VOXCONV_MAP_PREFETCH", "0")
    coords = ref.rand_coords(20000, 40, 2).to(cuda)
    geo = (voxconv._lib.KMAP_SUBMANIFOLD, (3, 3, 3), (1, 1, 1), (1, 1, 1))
    ref_t = voxconv.SparseTensor(torch.zeros(len(coords), 1, device=cuda), coords.clone())
    want = ref_t.manager.kernel_map(ref_t.coordinate_set, *geo)[0].pairs()
    torch.cuda.synchronize()
    ms = voxconv.kmap.map_stream(torch.device(cuda))
    assert ms is not None
    with torch.cuda.stream(ms.stream):
        torch.cuda._sleep(int(1e9))  # holds the map stream for ~0.5 s
    x = voxconv.SparseTensor(torch.zeros(len(coords), 1, device=cuda), coords.clone())
    km = x.manager.kernel_map(x.coordinate_set, *geo)[0]
    block = x.coordinate_set.coords.data_ptr()
    assert _block_state(block) == "active_allocated"
    del x
    gc.collect()
    state = _block_state(block)
    busy = not ms.stream.query()
    junk = []
    for _ in range(64):
        junk.append(torch.empty(coords.shape, dtype=torch.int32, device=cuda).fill_(7))
        if junk[-1].data_ptr() == block:
            break
    reused = junk[-1].data_ptr() == block
    got = km.pairs()
    print(f"the coordinates' block after the set went: {state} (map stream still busy: "
          f"{busy}); handed out again during the build: {reused}")
    assert busy, "the map stream finished before the check: the test proves nothing"
    # (None: no block starts there any more, it was freed and merged with a
    # free neighbour: what the package before 2eb6b25 gave, s19 call 2.)
    # A build worker's map keeps its input coordinates until it goes (the
    # worker may read them late): then the block is still allocated.
    want_state = "active_allocated" if km._lib_order else "active_pending_free"
    assert state == want_state, \
        f"the coordinates' block went back to the pool while the map stream held it: {state}"
    assert torch.equal(got[0], want[0])
    assert torch.equal(got[1].cpu(), want[1].cpu()) and torch.equal(got[2].cpu(), want[2].cpu())


@pytest.mark.parametrize("rows", ["view", "copy"])
def test_derived_coordinates_are_ordered_for_the_caller(cuda, monkeypatch, rows):
    """A strided map's output coordinates are written on the map stream
    (copied out of the map, or the map's own rows); the caller's stream
    must be ordered after that before the caller can read them
    (y.coords.cpu() read them unwritten before: a flaky transposed-conv
    reference in test_conv, H100, 2026-11-27). The map stream's work is
    delayed here by a ~25 ms spin queued on it where the rows are taken:
    the caller's stream must still be busy right after kernel_map returns,
    and the coordinates read there must be the reference's."""
    from voxconv import kmap as vkmap
    monkeypatch.setattr(vkmap, "_rows_view", rows == "view")
    # Built on request: a prefetched map's build may be issued by the build
    # worker after the spin below, and reading its count then waits for
    # the spin on the host (s30 call 2), which leaves nothing to check.
    monkeypatch.setenv("VOXCONV_MAP_PREFETCH", "0")
    if rows == "copy":
        orig = vkmap.KernelMap.out_coords

        def late_copy(self):
            torch.cuda._sleep(50_000_000)  # on the current (map) stream
            return orig(self)

        monkeypatch.setattr(vkmap.KernelMap, "out_coords", late_copy)
    else:
        orig_rows = vkmap._MapRows.tensor

        def late_rows(km, consumer):
            torch.cuda._sleep(50_000_000)  # on the current (map) stream
            return orig_rows(km, consumer)

        monkeypatch.setattr(vkmap._MapRows, "tensor", late_rows)
    fine = ref.rand_coords(3000, 24, 2)
    x = voxconv.SparseTensor(torch.zeros(len(fine), 1, device=cuda), fine.to(cuda))
    # The copy's allocation on the map stream must come from torch's pool:
    # a first one there (the map stream's first, when pooled rows are
    # views) calls cudaMalloc, which waited for the GPU, spin included
    # (s30 call 1: the copy variant then saw its stream idle).
    with torch.cuda.stream(vkmap.map_stream(torch.device(cuda)).stream):
        torch.empty((len(fine), 4), dtype=torch.int32, device=cuda)
    torch.cuda.synchronize()
    km, coarse = x.manager.kernel_map(x.coordinate_set, voxconv._lib.KMAP_STRIDED,
                                      (2, 2, 2), (2, 2, 2), (1, 1, 1))
    after = torch.cuda.Event()
    after.record()
    assert not after.query(), "the caller's stream does not wait for the coordinates"
    want, _ = ref.kernel_pairs("strided", fine, (2, 2, 2), (2, 2, 2), (1, 1, 1))
    assert torch.equal(coarse.coords.cpu(), want)
    src = ctypes.c_void_p()
    voxconv._lib.call("voxconv_kmap_out_coords", km.ptr, ctypes.byref(src))
    # the view is the map's own rows; the copy is not
    assert (coarse.coords.data_ptr() == src.value) == (rows == "view")


def test_pooled_rows_keep_their_map(cuda, monkeypatch):
    """A pooled level's coordinates are the strided map's own rows (item
    107): the tensor keeps the map (and so its rows) alive after every
    other reference to the map and the sets has gone; the map is freed once
    the tensor goes."""
    from voxconv import kmap as vkmap
    monkeypatch.setattr(vkmap, "_rows_view", True)
    destroyed = []
    monkeypatch.setattr(vkmap, "lib", _CountingLib(vkmap.lib, destroyed))
    fine = ref.rand_coords(5000, 32, 2)
    want, _ = ref.kernel_pairs("strided", fine, (2, 2, 2), (2, 2, 2), (1, 1, 1))
    pool = vnn.SparseMaxPool3d(2, 2)
    y = pool(voxconv.SparseTensor(torch.ones(len(fine), 4, device=cuda), fine.to(cuda)))
    km = next(k for k, _ in y.coordinate_set.parent.kmaps.values()
              if k.mode == voxconv._lib.KMAP_STRIDED)
    ptr = km.ptr
    rows = y.coords
    del km, y
    vkmap.flush_dropped()
    assert ptr not in destroyed, "the map went while its rows were still in use"
    torch.cuda.synchronize()
    assert torch.equal(rows.cpu(), want)
    del rows
    vkmap.flush_dropped()
    assert ptr in destroyed, "the map outlived its rows"


class _CountingLib:
    """voxconv's lib with voxconv_kmap_destroy counted into `destroyed`."""

    def __init__(self, real, destroyed):
        self._real, self._destroyed = real, destroyed

    def __getattr__(self, name):
        fn = getattr(self._real, name)
        if name != "voxconv_kmap_destroy":
            return fn

        def counted(h, p):
            self._destroyed.append(p)
            return fn(h, p)
        return counted


def test_dropped_maps_are_freed_in_one_batch(cuda, monkeypatch):
    """The maps a forward drops are freed together when the caller drops
    its output (the input set, which every derived set holds, goes last and
    frees the family's batch): every one of them, after the map stream
    waited for the caller's stream once for the batch, not once per map."""
    from voxconv import kmap as vkmap
    monkeypatch.setenv("VOXCONV_MAP_STREAM", "1")
    destroyed, waits = [], []
    monkeypatch.setattr(vkmap, "lib", _CountingLib(vkmap.lib, destroyed))
    orig_wait = torch.cuda.Stream.wait_event

    def counted_wait(self, ev):
        waits.append(self.cuda_stream)
        return orig_wait(self, ev)

    net = _pool_net(cuda)
    coords = ref.rand_coords(20000, 48, 2).to(cuda)
    feats = torch.randn(len(coords), 16, device=cuda, dtype=torch.float16)
    ms = vkmap.map_stream(torch.device(cuda)).stream.cuda_stream
    with torch.no_grad():
        for _ in range(3):
            y = net(voxconv.SparseTensor(feats, coords))
            ptrs = {km.ptr for s in y.manager.sets for km, _ in s.kmaps.values()}
            vkmap.flush_dropped()
            destroyed.clear()
            monkeypatch.setattr(torch.cuda.Stream, "wait_event", counted_wait)
            del y
            gc.collect()
            monkeypatch.setattr(torch.cuda.Stream, "wait_event", orig_wait)
            assert len(ptrs) >= 2 and ptrs <= set(destroyed), (len(ptrs), len(destroyed))
            assert not vkmap._dropped
            assert waits == [ms], waits  # one wait, on the building (map) stream
            waits.clear()


@pytest.mark.parametrize("rows", ["view", "copy"])
def test_a_deep_forward_frees_every_map_when_dropped(cuda, monkeypatch, rows):
    """A forward down three levels (its output on the coarsest set, which
    holds the finer ones through its parents): dropping the output frees
    every map of the forward at once, none left queued for a later flush
    (which used to run inside the next forward: each derived set's maps
    were released after its parent had already freed the batch;
    docs/perf-notes.md item 105). No gc.collect(): reference counting
    alone must do it. With the pooled levels' coordinates as views of the
    maps' rows too (item 107: a map kept its input coordinates, the last
    level's rows, to its end, so the levels' maps went one flush at a
    time)."""
    from voxconv import kmap as vkmap
    monkeypatch.setenv("VOXCONV_MAP_STREAM", "1")
    monkeypatch.setattr(vkmap, "_rows_view", rows == "view")
    destroyed = []
    monkeypatch.setattr(vkmap, "lib", _CountingLib(vkmap.lib, destroyed))
    torch.manual_seed(7)
    net = torch.nn.Sequential(
        vnn.SparseConv3d(8, 8, 3), vnn.SparseMaxPool3d(2, 2),
        vnn.SparseConv3d(8, 8, 3), vnn.SparseMaxPool3d(2, 2),
        vnn.SparseConv3d(8, 8, 3), vnn.SparseMaxPool3d(2, 2),
        vnn.SparseConv3d(8, 8, 3)).to(cuda).half()
    coords = ref.rand_coords(20000, 64, 2).to(cuda)
    feats = torch.randn(len(coords), 8, device=cuda, dtype=torch.float16)
    with torch.no_grad():
        for _ in range(3):  # from the second on, maps are prefetched too
            y = net(voxconv.SparseTensor(feats, coords))
            sets, s = [], y.coordinate_set
            while s is not None:
                sets.append(s)
                s = s.parent
            ptrs = {km.ptr for st in sets for km, _ in st.kmaps.values()}
            del s, sets
            vkmap.flush_dropped()
            destroyed.clear()
            del y
            assert len(ptrs) >= 7, len(ptrs)  # 4 submanifold + 3 pooling maps
            assert not vkmap._dropped, f"{len(vkmap._dropped)} maps left for a later flush"
            assert ptrs <= set(destroyed), (len(ptrs), len(set(destroyed) & ptrs))


def test_dropped_maps_wait_while_their_stream_is_captured(cuda, monkeypatch):
    """A map dropped during a CUDA graph capture of a stream that used it:
    flushes during the capture free nothing (an event recorded there would
    pull the map stream into the capture); the first flush after it frees
    the map."""
    from voxconv import kmap as vkmap
    monkeypatch.setenv("VOXCONV_MAP_STREAM", "1")
    destroyed = []
    monkeypatch.setattr(vkmap, "lib", _CountingLib(vkmap.lib, destroyed))
    coords = ref.rand_coords(3000, 24, 2).to(cuda)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        x = voxconv.SparseTensor(torch.zeros(len(coords), 1, device=cuda), coords)
        km = x.manager.kernel_map(x.coordinate_set, voxconv._lib.KMAP_SUBMANIFOLD,
                                  (3, 3, 3), (1, 1, 1), (1, 1, 1))[0]
        km.use_on(voxconv._runtime.handle_for(torch.device(cuda)))  # side uses it
        buf = torch.zeros(8, device=cuda)
    side.synchronize()
    ptr = km.ptr
    vkmap.flush_dropped()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=side):
        buf.add_(1)
        del x, km  # the set goes: its batch is flushed, inside the capture
        gc.collect()
        vkmap.flush_dropped()
        during = list(destroyed)
    assert ptr not in during
    assert any(entry[1] == ptr for entry in vkmap._dropped)  # queued for later
    vkmap.flush_dropped()
    assert ptr in destroyed
    graph.replay()
    torch.cuda.synchronize()
    assert buf[0].item() == 1
