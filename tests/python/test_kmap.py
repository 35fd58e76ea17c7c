"""KernelMap's attributes, read from voxconv_kmap_get_info with one struct
unpack (kmap._info_values), against the same info read field by field
through ctypes, for maps of every mode, with padding, out_shape, an offset
order and an inverse map; and the reader's layout against the ctypes
structure's."""

import ctypes

import pytest
import torch

import voxconv
from voxconv import _lib, _runtime, kmap

import ref


def _ctypes_view(ptr):
    info = _lib.KmapInfo()
    _lib.call("voxconv_kmap_get_info", ptr, ctypes.byref(info))
    d = info.desc
    return {"kernel_size": tuple(d.kernel_size), "stride": tuple(d.stride),
            "dilation": tuple(d.dilation),
            "padding": tuple(d.padding) if d.padded else None,
            "out_shape": tuple(d.out_shape) if any(d.out_shape) else None,
            "offset_order": d.offset_order, "kernel_volume": info.kernel_volume,
            "n_in": info.n_in, "_n_out": info.n_out, "_n_pairs": info.n_pairs,
            "in_tensor_stride": tuple(info.in_tensor_stride),
            "out_tensor_stride": tuple(info.out_tensor_stride), "mode": d.mode}


def test_reader_layout_is_the_structures():
    assert kmap._INFO.size <= ctypes.sizeof(_lib.KmapInfo)
    info = _lib.KmapInfo()
    # distinct values in every field: each must come back at its own index
    n = 1
    for name in ("mode", "padded", "offset_order"):
        setattr(info.desc, name, n)
        n += 1
    for name in ("kernel_size", "stride", "dilation", "padding", "out_shape"):
        for i in range(3):
            getattr(info.desc, name)[i] = n
            n += 1
    info.kernel_volume, info.n_in, info.n_out, info.n_pairs = n, 2**40 + n, -(n + 1), 2**33
    for name in ("in_tensor_stride", "out_tensor_stride"):
        for i in range(3):
            getattr(info, name)[i] = 1000 + n + i
        n += 3
    v = kmap._INFO.unpack_from(info)
    at = kmap._INFO_AT
    assert v[at["desc.mode"]] == info.desc.mode and v[at["desc.offset_order"]] == 3
    assert v[at["desc.kernel_size[2]"]] == info.desc.kernel_size[2]
    assert v[at["desc.out_shape[0]"]] == info.desc.out_shape[0]
    assert (v[at["n_in"]], v[at["n_out"]], v[at["n_pairs"]]) == (info.n_in, info.n_out,
                                                                 info.n_pairs)
    assert v[at["out_tensor_stride[2]"]] == info.out_tensor_stride[2]
    assert len(set(v)) == len(v)  # no field read twice


def _maps(device):
    torch.manual_seed(0)
    coords = ref.rand_coords(400, 12, 2).to(device)
    x = voxconv.SparseTensor(torch.randn(len(coords), 4, device=device), coords)
    mgr, s = x.manager, x.coordinate_set
    out = [mgr.kernel_map(s, _lib.KMAP_SUBMANIFOLD, (3, 3, 3), (1, 1, 1), (1, 1, 1))[0],
           mgr.kernel_map(s, _lib.KMAP_SUBMANIFOLD, (3, 3, 3), (1, 1, 1), (2, 1, 1),
                          order=1)[0],
           mgr.kernel_map(s, _lib.KMAP_SUBMANIFOLD, (2, 3, 2), (1, 1, 1), (1, 1, 1),
                          padding=(0, 1, 1))[0]]
    km, coarse = mgr.kernel_map(s, _lib.KMAP_STRIDED, (3, 3, 3), (2, 2, 2), (1, 1, 1))
    out.append(km)
    out.append(mgr.kernel_map(coarse, _lib.KMAP_TRANSPOSED, (3, 3, 3), (2, 2, 2), (1, 1, 1),
                              s)[0])
    out.append(mgr.kernel_map(coarse, _lib.KMAP_GENERATIVE, (2, 2, 2), (2, 2, 2),
                              (1, 1, 1))[0])
    out.append(mgr.kernel_map(s, kmap.KMAP_EXPANDING, (3, 3, 3), (2, 2, 2), (1, 1, 1),
                              padding=(1, 1, 1), out_shape=(7, 0, 9))[0])
    out.append(mgr.inverse_kernel_map(s, _lib.KMAP_STRIDED, (3, 3, 3), (2, 2, 2),
                                      (1, 1, 1))[0])
    return out


def test_kernel_map_attributes_match_the_library(device):
    maps = _maps(device)
    assert {m.mode for m in maps} >= {_lib.KMAP_SUBMANIFOLD, _lib.KMAP_STRIDED,
                                      _lib.KMAP_TRANSPOSED, _lib.KMAP_GENERATIVE,
                                      kmap.KMAP_EXPANDING}
    assert any(m.padding is not None for m in maps) and any(m.out_shape for m in maps)
    assert any(m.offset_order == 1 for m in maps) and any(m.inverse for m in maps)
    for m in maps:
        m.n_pairs  # completes a pending build (CUDA), then both views read the same
        want = _ctypes_view(m.ptr)
        got = {k: getattr(m, k) for k in want}
        for k in ("kernel_size", "stride", "dilation", "in_tensor_stride",
                  "out_tensor_stride"):
            assert type(got[k]) is tuple and len(got[k]) == 3, (k, got[k])
        assert got == want, m


def test_every_map_mode_can_be_prepared(device):
    """voxconv_kmap_prepare of every mode (a no-op on the CPU): the same
    pairs as an unprepared twin; a bad word is named."""
    every = _lib.PREPARE_FORWARD | _lib.PREPARE_DGRAD | _lib.PREPARE_PAIRS
    for m, twin in zip(_maps(device), _maps(device)):
        m.prepare(m.handle, every)
        for a, b in zip(m.pairs(), twin.pairs()):
            assert torch.equal(a, b), m
    with pytest.raises(voxconv.errors.InvalidArgumentError, match="what = 0x8"):
        m.prepare(m.handle, 8)


@pytest.mark.parametrize("name", ["kernel_size", "out_tensor_stride", "n_in"])
def test_a_wrong_index_is_caught(name, monkeypatch):
    """The comparison above fails when the reader reads the wrong field
    (an index shifted by one)."""
    h = _runtime.handle_for_cpu()
    coords = ref.rand_coords(50, 6, 1)
    ok = kmap.KernelMap(h, _lib.KMAP_STRIDED, (3, 3, 3), (2, 2, 2), (1, 1, 1), coords,
                        (1, 1, 1))
    assert {k: getattr(ok, k) for k in _ctypes_view(ok.ptr)} == _ctypes_view(ok.ptr)
    const = {"kernel_size": "_I_KS", "out_tensor_stride": "_I_OUT_TS", "n_in": "_I_N_IN"}[name]
    monkeypatch.setattr(kmap, const, getattr(kmap, const) + 1)
    bad = kmap.KernelMap(h, _lib.KMAP_STRIDED, (3, 3, 3), (2, 2, 2), (1, 1, 1), coords,
                         (1, 1, 1))
    assert {k: getattr(bad, k) for k in _ctypes_view(bad.ptr)} != _ctypes_view(bad.ptr)


def test_dropped_map_queue_loses_nothing_across_threads(monkeypatch):
    """The queue of dropped CUDA maps (kmap._destroy_kmap, flush_dropped),
    without a GPU: four threads drop 25,000 maps each while this one
    flushes; every map is freed exactly once. (The freeing itself is
    replaced by a record; the handle only says it is a CUDA one.)"""
    import threading

    freed = []
    monkeypatch.setattr(kmap, "_destroy_batch",
                        lambda h, batch: freed.extend(b[0] for b in batch) or True)
    monkeypatch.setattr(kmap, "_dropped", [])

    class FakeCudaHandle:
        device = torch.device("cuda")

    h, per, threads = FakeCudaHandle(), 25000, 4

    def drop(t):
        for i in range(per):
            kmap._destroy_kmap(h, t * per + i, [])

    workers = [threading.Thread(target=drop, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    while any(w.is_alive() for w in workers):
        kmap.flush_dropped()
    for w in workers:
        w.join()
    kmap.flush_dropped()
    assert sorted(freed) == list(range(per * threads))


def _pairs(km):
    """(offsets, in_rows, out_rows) of a map, on the CPU."""
    km.n_pairs  # completes a pending build
    h = _runtime.handle_for(km.device)
    offsets = (ctypes.c_int64 * (km.kernel_volume + 1))()
    rows = [torch.empty(max(km.n_pairs, 1), dtype=torch.int32, device=km.device)
            for _ in range(2)]
    h.call("voxconv_kmap_get_pairs", ctypes.c_void_p(km.ptr), offsets,
           _runtime.ptr(rows[0]), _runtime.ptr(rows[1]))
    return list(offsets), [r[:km.n_pairs].cpu() for r in rows]


def _pyramid(device, coords, monkeypatch, bounds, in_bounds=None):
    """Three strided 2/2 levels over coords (SparseTensor(bounds=in_bounds));
    (the input tensor, level sets, level maps, the names of the library's
    build calls)."""
    monkeypatch.setattr(kmap, "_pass_bounds", bounds)
    calls = []
    real = _runtime.Handle.call

    def spy(self, name, *args):
        calls.append(name)
        return real(self, name, *args)

    monkeypatch.setattr(_runtime.Handle, "call", spy)
    x = voxconv.SparseTensor(torch.randn(len(coords), 4, device=device), coords,
                             bounds=in_bounds)
    mgr, s = x.manager, x.coordinate_set
    sets, maps = [s], []
    for _ in range(3):
        km, s = mgr.kernel_map(s, _lib.KMAP_STRIDED, (2, 2, 2), (2, 2, 2), (1, 1, 1))
        sets.append(s)
        maps.append(km)
    monkeypatch.setattr(_runtime.Handle, "call", real)
    return x, sets, maps, calls


def test_strided_levels_pass_their_bounds(device, monkeypatch):
    """A strided map's output set carries the bounds its build computed
    (voxconv_kmap_out_bounds: the least and greatest field of its rows),
    the next strided build on that set takes them
    (voxconv_kmap_build_bounded), and the maps are those built without
    bounds, row for row and pair for pair (perf-notes item 109)."""
    coords = ref.rand_coords(3000, 40, 3).to(device)
    coords[:, 1:] -= 17  # negative coordinates too
    _, sets, maps, calls = _pyramid(device, coords, monkeypatch, True)
    assert sets[0].bounds is None  # the caller's rows: not known
    for s in sets[1:]:
        c = s.coords.cpu()
        b = s.bounds
        assert b is not None
        assert list(b.lo) == c.min(0).values.tolist()
        assert list(b.hi) == c.max(0).values.tolist()
    assert calls.count("voxconv_kmap_build_bounded") == 2  # levels 2 and 3
    x2, sets2, maps2, calls2 = _pyramid(device, coords, monkeypatch, False)
    assert "voxconv_kmap_build_bounded" not in calls2
    assert all(s.bounds is None for s in sets2)
    for a, b in zip(sets[1:], sets2[1:]):
        assert torch.equal(a.coords.cpu(), b.coords.cpu())
    for a, b in zip(maps, maps2):
        oa, ra = _pairs(a)
        ob, rb = _pairs(b)
        assert oa == ob and all(torch.equal(p, q) for p, q in zip(ra, rb))


def test_rows_outside_their_declared_bounds_are_named(device, monkeypatch):
    """A set's bounds are a promise about its rows: rows outside what the
    set declares get OutOfRangeError naming the declared bounds from the
    next strided map -- at once on the CPU, at the map's first use on CUDA
    -- not a silently different map. (Rows moved in place are caught
    before that, by the version check below; a set made with wrong bounds
    reaches the library's check.)"""
    monkeypatch.setattr(kmap, "_pass_bounds", True)
    monkeypatch.setenv("VOXCONV_MAP_PREFETCH", "0")
    coords = ref.rand_coords(2000, 30, 2).to(device)
    x = voxconv.SparseTensor(torch.randn(len(coords), 4, device=device), coords)
    mgr = x.manager
    _, level1 = mgr.kernel_map(x.coordinate_set, _lib.KMAP_STRIDED, (2, 2, 2), (2, 2, 2),
                               (1, 1, 1))
    assert level1.bounds is not None
    moved = level1.coords.clone()
    moved[0, 1] = level1.bounds.hi[1] + 5  # still a valid coordinate
    wrong = mgr.add(moved, level1.tensor_stride, register=False)
    wrong.bounds = level1.bounds  # what the set claims about its rows
    with pytest.raises(voxconv.errors.OutOfRangeError, match="in_bounds"):
        km, _ = mgr.kernel_map(wrong, _lib.KMAP_STRIDED, (2, 2, 2), (2, 2, 2), (1, 1, 1))
        km.n_pairs  # a CUDA build reports at its first use


def test_input_bounds_given_by_the_caller(device, monkeypatch):
    """SparseTensor(bounds=...): the caller's box (e.g. the voxelization
    grid) reaches the input level's strided build
    (voxconv_kmap_build_bounded at every level now), which makes the maps
    built without it, row for row and pair for pair; rows outside the box
    get OutOfRangeError, bad boxes InvalidArgumentError, and
    VOXCONV_STRIDED_BOUNDS=0 (_pass_bounds False) ignores the argument."""
    monkeypatch.setenv("VOXCONV_MAP_PREFETCH", "0")
    coords = ref.rand_coords(3000, 40, 3).to(device)
    coords[:, 1:] -= 17
    c = coords.cpu()
    lo = [0] + [int(v) - 3 for v in c[:, 1:].min(0).values]  # a loose box
    hi = [2] + [int(v) + 5 for v in c[:, 1:].max(0).values]
    x, _, maps, calls = _pyramid(device, coords, monkeypatch, True, (lo, hi))
    assert list(x.coordinate_set.bounds.lo) == lo and list(x.coordinate_set.bounds.hi) == hi
    assert calls.count("voxconv_kmap_build_bounded") == 3  # the input level too
    _, _, maps0, calls0 = _pyramid(device, coords, monkeypatch, True)
    assert calls0.count("voxconv_kmap_build_bounded") == 2
    for a, b in zip(maps, maps0):
        oa, ra = _pairs(a)
        ob, rb = _pairs(b)
        assert oa == ob and all(torch.equal(p, q) for p, q in zip(ra, rb))
    xo, _, _, calls_off = _pyramid(device, coords, monkeypatch, False, (lo, hi))
    assert xo.coordinate_set.bounds is None
    assert "voxconv_kmap_build_bounded" not in calls_off
    # a box that leaves out the row with the largest x
    monkeypatch.setattr(kmap, "_pass_bounds", True)
    tight = list(hi)
    tight[1] = int(c[:, 1].max()) - 1
    y = voxconv.SparseTensor(torch.randn(len(coords), 4, device=device), coords,
                             bounds=(lo, tight))
    with pytest.raises(voxconv.errors.OutOfRangeError, match="in_bounds"):
        km, _ = y.manager.kernel_map(y.coordinate_set, _lib.KMAP_STRIDED, (2, 2, 2),
                                     (2, 2, 2), (1, 1, 1))
        km.n_pairs  # a CUDA build reports at its first use
    f = torch.randn(len(coords), 4, device=device)
    for bad in [(lo, hi[:3]), (hi, lo), ((-1, 0, 0, 0), (0, 1, 1, 1)),
                ((0, 0, 0, 0), (0, 1, 1, 131072)), "box", ((0, 0, 0, "a"), hi),
                ((0, 0, 0, 0.5), hi), ((0, 0, 0, True), hi)]:
        with pytest.raises(voxconv.errors.InvalidArgumentError, match="bounds"):
            voxconv.SparseTensor(f, coords, bounds=bad)


def test_coordinates_modified_in_place_are_refused(device):
    """A sparse tensor's maps describe the rows it was made with: after an
    in-place write to its coordinates (a moved row, a reused buffer's
    copy_) every map lookup -- a module call, a pooling layer, the
    manager's kernel_map -- raises KmapMismatchError instead of using maps
    of the old rows; a new SparseTensor from the new rows works."""
    coords = ref.rand_coords(1500, 24, 2).to(device)
    feats = torch.randn(len(coords), 8, device=device)
    conv = voxconv.nn.SparseConv3d(8, 8, 3, bias=False).to(device)
    pool = voxconv.nn.SparseMaxPool3d(2, 2)
    def move_row(c):  # past every row in x: no duplicate made
        c[0, 1] = int(c[:, 1].max()) + 2

    for write in (move_row, lambda c: c.copy_(c.flip(0))):
        x = voxconv.SparseTensor(feats, coords.clone())
        with torch.no_grad():
            conv(x)  # the map is cached now
        write(x.coords)
        for call in (lambda: conv(x), lambda: pool(x),
                     lambda: x.manager.kernel_map(x.coordinate_set, _lib.KMAP_SUBMANIFOLD,
                                                  (3, 3, 3), (1, 1, 1), (1, 1, 1))):
            with pytest.raises(voxconv.errors.KmapMismatchError, match="modified in place"):
                with torch.no_grad():
                    call()
        # the new rows through a new tensor: the convolution of those rows
        fresh = voxconv.SparseTensor(feats, x.coords)
        with torch.no_grad():
            got = conv(fresh).feats
        c = fresh.coords.cpu()
        _, pairs = ref.kernel_pairs("submanifold", c, (3, 3, 3), (1, 1, 1), (1, 1, 1))
        want = ref.conv(feats, conv.weight, len(c), pairs)
        absx = ref.conv(feats.abs(), conv.weight.abs(), len(c), pairs)
        ref.assert_at_fp_bound(got, want, absx, 27 * 8, torch.float32)
    # rows made under inference_mode keep no version counter: not checked,
    # and no error from reading one
    with torch.inference_mode():
        xi = voxconv.SparseTensor(feats, coords.clone())
        assert xi.coordinate_set.version is None
        pool(conv(xi))
