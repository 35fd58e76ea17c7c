"""pytest configuration for the voxconv Python suite.

Run from the repository root:
    VOXCONV_LIBRARY=$PWD/build/libvoxconv.so /usr/bin/python3 -m pytest -q tests/python
(without VOXCONV_LIBRARY the package looks in python/voxconv/lib/, then in
build*/ of this tree). The package is imported from python/ of this tree
unless an installed voxconv is found first.

Every test gets a fresh seed, printed (pytest shows it for failing tests);
VOXCONV_TEST_SEED=<n> replays one. CUDA variants run when torch sees a GPU
and the library has the CUDA backend, else they are skipped with a reason.
"""

import os
import random
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
try:
    import voxconv  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(REPO, "python"))
    import voxconv  # noqa: F401

import torch  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))


def cuda_usable():
    return torch.cuda.is_available() and voxconv.has_cuda()


DEVICES = ["cpu"] + (["cuda"] if cuda_usable() else [])
CUDA_SKIP_REASON = ("no CUDA: torch.cuda.is_available()=%s, library has CUDA=%s"
                    % (torch.cuda.is_available(), voxconv.has_cuda()))


@pytest.fixture(autouse=True)
def seed(request):
    s = int(os.environ.get("VOXCONV_TEST_SEED", random.randrange(2**31)))
    torch.manual_seed(s)
    random.seed(s)
    print(f"[{request.node.name}] seed {s} (VOXCONV_TEST_SEED={s} to replay)")
    return s


@pytest.fixture(params=DEVICES)
def device(request):
    return torch.device(request.param)


@pytest.fixture
def cuda():
    if not cuda_usable():
        pytest.skip(CUDA_SKIP_REASON)
    return torch.device("cuda")


@pytest.fixture
def torch_allocator_calls(monkeypatch):
    """Counts the calls of torch's raw caching-allocator entry points, which
    the library's allocator callbacks use (_runtime._torch_cuda_allocator):
    {"alloc": n, "free": n}. Every handle sees them (the callbacks look the
    entry points up at each call); a handle made for the test starts with
    no idle blocks of its own."""
    calls = {"alloc": 0, "free": 0}
    raw_alloc = torch._C._cuda_cudaCachingAllocator_raw_alloc
    raw_delete = torch._C._cuda_cudaCachingAllocator_raw_delete

    def counting_alloc(*a):
        calls["alloc"] += 1
        return raw_alloc(*a)

    def counting_delete(*a):
        calls["free"] += 1
        return raw_delete(*a)

    monkeypatch.setattr(torch._C, "_cuda_cudaCachingAllocator_raw_alloc", counting_alloc)
    monkeypatch.setattr(torch._C, "_cuda_cudaCachingAllocator_raw_delete", counting_delete)
    return calls


def _lib_has(*names):
    lib = voxconv._lib.lib
    return all(lib.has(n) for n in names)


requires_tuner = pytest.mark.skipif(
    not _lib_has("voxconv_set_fp16_accum", "voxconv_get_fp16_accum",
                 "voxconv_resolve_fp16_accum"),
    reason="libvoxconv lacks the fp16-accumulator API (voxconv_set_fp16_accum ...)")
requires_call_info = pytest.mark.skipif(
    not _lib_has("voxconv_get_last_call_info"),
    reason="libvoxconv lacks voxconv_get_last_call_info")
