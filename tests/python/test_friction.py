"""Friction fixes (issue 21 item 4): the library search skips sanitizer
builds, coordinates handed to the library are always packed int32 rows,
and a SparseTensor given to a plain torch module says what to do instead.
"""

import copy
import ctypes.util
import os
import pickle
import shutil
import subprocess
import sys
import time

import pytest
import torch

import voxconv
from voxconv import _lib, _runtime
from voxconv import nn as vnn
from voxconv.tensor import NotATensorError

from ref import rand_coords

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PACKAGE = os.path.dirname(os.path.abspath(voxconv.__file__))
ASAN_LIB = os.path.join(REPO, "build-asan", "libvoxconv.so")


# ---- 1. sanitizer builds in the library search --------------------------------------
def _need_asan_build():
    if not os.path.exists(ASAN_LIB):
        pytest.skip(f"no ASan build at {ASAN_LIB} (scripts/test.sh makes one)")
    if "asan" not in _lib.sanitizer_runtimes(ASAN_LIB):
        pytest.skip(f"{ASAN_LIB} is not an AddressSanitizer build")


def _need_clean_loaded_library():
    if _lib.sanitizer_runtimes(voxconv.library_path):
        pytest.skip("this suite runs on a sanitizer build of the library")


def test_sanitizer_runtimes_reads_the_elf_file():
    _need_asan_build()
    assert "asan" in _lib.sanitizer_runtimes(ASAN_LIB)
    assert _lib.sanitizer_runtimes(os.path.realpath(ASAN_LIB)) == _lib.sanitizer_runtimes(ASAN_LIB)
    _need_clean_loaded_library()
    assert _lib.sanitizer_runtimes(voxconv.library_path) == ()
    # not ELF, or no file: nothing known, nothing claimed
    assert _lib.sanitizer_runtimes(os.path.join(PACKAGE, "_lib.py")) == ()
    assert _lib.sanitizer_runtimes(os.path.join(REPO, "no-such-file.so")) == ()


def _source_tree(tmp_path, with_asan=True, with_clean=True):
    """A copy of the source-tree layout: python/voxconv (links to this
    package's files), build-asan/ holding the ASan library, newest, and build/
    holding the library this suite loaded."""
    # the package's files linked one by one, without lib/: an installed
    # package carries its library there, which the search rightly takes
    # before any build folder, and a source tree has none
    pkg = tmp_path / "python" / "voxconv"
    pkg.mkdir(parents=True)
    for name in os.listdir(PACKAGE):
        if name not in ("lib", "__pycache__"):
            os.symlink(os.path.join(PACKAGE, name), pkg / name)
    if with_clean:
        (tmp_path / "build").mkdir()
        os.symlink(os.path.realpath(voxconv.library_path), tmp_path / "build" / "libvoxconv.so")
    if with_asan:
        (tmp_path / "build-asan").mkdir()
        dst = tmp_path / "build-asan" / "libvoxconv.so"
        shutil.copy(os.path.realpath(ASAN_LIB), dst)  # its own mtime: the newest
        future = time.time() + 3600
        os.utime(dst, (future, future))
    return tmp_path


def _run(tree, script, **env_extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("VOXCONV_LIBRARY", "LD_PRELOAD", "PYTHONPATH")}
    env["PYTHONPATH"] = str(tree / "python")
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", script], env=env, cwd=str(tree),
                          capture_output=True, text=True, timeout=300)


_IMPORT = ("import voxconv, voxconv._lib as L; print('LOADED', voxconv.library_path)")
_IMPORT_CATCH = ("try:\n import voxconv\n print('LOADED', voxconv.library_path)\n"
                 "except ImportError as e:\n print('REFUSED', type(e).__name__, e)\n")


def test_source_tree_search_skips_the_asan_build(tmp_path):
    """The ASan build is the newest build*/ library: it used to be loaded
    first, and its runtime killed Python ('ASan runtime does not come first
    in initial library list', exit 1, no exception)."""
    _need_asan_build()
    _need_clean_loaded_library()
    tree = _source_tree(tmp_path)
    p = _run(tree, _IMPORT)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"LOADED {tree / 'build' / 'libvoxconv.so'}" in p.stdout
    assert "ASan" not in p.stderr


def test_source_tree_with_only_the_asan_build_says_why(tmp_path):
    _need_asan_build()
    tree = _source_tree(tmp_path, with_clean=False)
    p = _run(tree, _IMPORT_CATCH)
    assert p.returncode == 0, p.stdout + p.stderr
    if "LOADED" in p.stdout:  # a libvoxconv installed on the system path
        assert "build-asan" not in p.stdout
    else:
        assert "LibraryNotFoundError" in p.stdout
        assert "build-asan/libvoxconv.so: skipped, built with AddressSanitizer" in p.stdout
        assert "VOXCONV_LIBRARY" in p.stdout


def test_explicit_asan_build_without_its_runtime_is_refused(tmp_path):
    """VOXCONV_LIBRARY names the ASan build but the runtime was not
    preloaded: a clear ImportError instead of the process dying."""
    _need_asan_build()
    tree = _source_tree(tmp_path)
    p = _run(tree, _IMPORT_CATCH, VOXCONV_LIBRARY=str(tree / "build-asan" / "libvoxconv.so"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "REFUSED LibraryNotFoundError" in p.stdout
    assert "built with AddressSanitizer" in p.stdout
    assert "LD_PRELOAD=libasan" in p.stdout
    assert "does not come first" not in p.stderr


def test_explicit_asan_build_with_its_runtime_preloaded_loads(tmp_path):
    _need_asan_build()
    needed = _lib._elf_dynamic(ASAN_LIB)[0]
    runtime = next((n for n in needed if n.startswith("libasan.")), None)
    if runtime is None or ctypes.util.find_library("asan") is None:
        pytest.skip("no libasan runtime to preload")
    tree = _source_tree(tmp_path, with_asan=False)
    script = (_IMPORT + "\nimport torch\n"
              "u, m = voxconv.merge_duplicates(torch.tensor("
              "[[0, 1, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]], dtype=torch.int32))\n"
              "print('OUT', u.tolist(), m.tolist())\n")
    p = _run(tree, script, VOXCONV_LIBRARY=ASAN_LIB, LD_PRELOAD=runtime,
             ASAN_OPTIONS="detect_leaks=0")
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"LOADED {ASAN_LIB}" in p.stdout
    assert "OUT [[0, 0, 0, 0], [0, 1, 0, 0]] [1, 0, 1]" in p.stdout


# ---- 2. coordinates handed to the library ----------------------------------------------
def _views(coords):
    """Non-packed tensors with the values of `coords` [N, 4] int32."""
    n = coords.shape[0]
    wide = torch.cat([coords, torch.full((n, 1), 7, dtype=torch.int32)], 1)
    return {
        "column slice": wide[:, :4],
        "column-major": coords.t().contiguous().t(),
        "every other row": torch.stack([coords, coords + 1], 1).reshape(2 * n, 4)[::2],
        "int64 column slice": wide.long()[:, :4],
    }


@pytest.mark.parametrize("kind", ["column slice", "column-major", "every other row",
                                  "int64 column slice"])
def test_coordinate_manager_add_packs_views(kind):
    """CoordinateManager.add used to keep the view and the library read it
    as packed rows: other coordinates, and a bogus DuplicateCoordsError."""
    coords = rand_coords(60, 6)
    view = _views(coords)[kind]
    assert not view.is_contiguous() or view.dtype != torch.int32
    feats = torch.randn(coords.shape[0], 3, dtype=torch.float64)
    conv = vnn.SparseConv3d(3, 2, dtype=torch.float64)

    mgr = voxconv.CoordinateManager("cpu")
    s = mgr.add(view, (1, 1, 1))
    assert s.coords.dtype == torch.int32 and s.coords.is_contiguous()
    assert torch.equal(s.coords, coords)
    got = conv(voxconv.SparseTensor(feats, None, _coord_set=s))
    want = conv(voxconv.SparseTensor(feats, coords))
    assert torch.equal(got.feats, want.feats)


def test_coordinate_manager_add_refuses_what_is_not_coordinates():
    mgr = voxconv.CoordinateManager("cpu")
    with pytest.raises(voxconv.DtypeMismatchError, match="CoordinateManager.add|coords"):
        mgr.add(torch.zeros(3, 4), (1, 1, 1))
    with pytest.raises(voxconv.ShapeMismatchError, match=r"\[N, 4\]"):
        mgr.add(torch.zeros(3, 3, dtype=torch.int32), (1, 1, 1))
    with pytest.raises(voxconv.OutOfRangeError, match="CoordinateManager.add: coords row 1"):
        mgr.add(torch.tensor([[0, 0, 0, 0], [0, 2**31, 0, 0]])[:, :4], (1, 1, 1))
    with pytest.raises(TypeError):
        mgr.add([[0, 0, 0, 0]], (1, 1, 1))
    # packed int32 on the manager's device: kept as is (the internal path)
    c = rand_coords(10, 4)
    assert mgr.add(c, (1, 1, 1)).coords is c


def test_coords_struct_refuses_unpacked_coordinates():
    """The struct keeps a raw pointer: a view is refused, never read as
    packed rows (and never copied there, where the copy would be freed
    while the library reads it)."""
    coords = rand_coords(20, 5)
    for name, view in _views(coords).items():
        with pytest.raises(voxconv.InvalidArgumentError, match="contiguous int32"):
            _runtime.coords_struct(view, (1, 1, 1))
    c = _runtime.coords_struct(coords, (2, 2, 2))
    assert c.n == coords.shape[0] and tuple(c.tensor_stride) == (2, 2, 2)


def test_other_coordinate_entries_take_views():
    coords = rand_coords(40, 5)
    for view in _views(coords).values():
        x = voxconv.SparseTensor(torch.randn(coords.shape[0], 2), view)
        assert torch.equal(x.coords, coords)
        u, row_map = voxconv.merge_duplicates(view)
        assert torch.equal(u, coords) and torch.equal(row_map, torch.arange(coords.shape[0]))
        out = voxconv.spatially_sparse_conv(
            voxconv.sparse_max_pool(x, 2, 2), torch.randn(8, 2, 2), kernel_size=2, stride=2,
            transposed=True, out_coords=view)
        assert torch.equal(out.coords, coords)


# ---- 3. a SparseTensor given to a plain torch module -----------------------------------
def _sparse(c=4, n=30):
    coords = rand_coords(n, 5)
    return voxconv.SparseTensor(torch.randn(coords.shape[0], c), coords)


def test_batchnorm_in_torch_sequential_names_the_fix():
    x = _sparse()
    net = torch.nn.Sequential(vnn.SparseConv3d(4, 8), torch.nn.BatchNorm1d(8))
    with pytest.raises(TypeError) as info:
        net(x)
    msg = str(info.value)
    assert "'SparseTensor' object has no attribute 'dim'" in msg
    assert "voxconv.nn.Sequential" in msg and "SparseFeatureOp" in msg
    assert isinstance(info.value, AttributeError) and isinstance(info.value, NotATensorError)
    # what the message says works
    y = vnn.Sequential(*net)(x)
    assert y.feats.shape == (len(x), 8)


def test_missing_tensor_attributes_still_behave_as_missing():
    x = _sparse()
    assert not hasattr(x, "dim") and not hasattr(x, "view")
    assert getattr(x, "numel", "default") == "default"
    with pytest.raises(AttributeError) as info:
        x.no_such_attribute
    assert not isinstance(info.value, TypeError)
    assert "'SparseTensor' object has no attribute 'no_such_attribute'" in str(info.value)
    # private names (copy / pickle protocols probe them) are plain misses
    with pytest.raises(AttributeError) as info:
        x.__deepcopy__
    assert not isinstance(info.value, TypeError)
    # what SparseTensor does have is untouched
    assert x.shape == tuple(x.feats.shape) and x.device == x.feats.device
    assert x.dtype == torch.float32 and len(x) == x.feats.shape[0]
    for y in (copy.copy(x), copy.deepcopy(x), pickle.loads(pickle.dumps(x))):
        assert torch.equal(y.feats, x.feats) and torch.equal(y.coords, x.coords)


def test_subclass_attributes_are_not_taken_for_tensor_ones():
    class Tagged(voxconv.SparseTensor):
        def dim(self):
            return "mine"

    coords = rand_coords(5, 3)
    t = Tagged(torch.randn(coords.shape[0], 2), coords)
    assert t.dim() == "mine"
    with pytest.raises(NotATensorError, match="'Tagged' object has no attribute 'view'"):
        t.view(-1)


def test_tensor_names_are_not_listed_as_sparse_tensor_api():
    x = _sparse()
    names = dir(x)
    assert "feats" in names and "coords" in names and "replace_feature" in names
    assert "dim" not in names and "view" not in names
    assert not hasattr(voxconv.SparseTensor, "dim")
    # an instance attribute of a torch.Tensor name is the user's to set
    x.data = "mine"
    assert x.data == "mine" and "data" in dir(x)
