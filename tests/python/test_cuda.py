"""CUDA specifics (skipped without a GPU): results equal the CPU's, the
current stream is used, the library's temporaries come from PyTorch's
caching allocator, gradients on the GPU, low precision on the GPU."""

import pytest
import torch

import voxconv
from voxconv import _runtime

import ref

MODES = ["submanifold", "strided", "transposed", "generative"]


def _pair(coords, c, device, dtype=torch.float32):
    x = torch.randn(len(coords), c)
    cpu = voxconv.SparseTensor(x.double(), coords)
    gpu = voxconv.SparseTensor(x.to(device, dtype), coords.to(device))
    return cpu, gpu


def _args(mode):
    return dict(kernel_size=3 if mode != "strided" else 2, stride=1 if mode == "submanifold"
                else 2, transposed=mode in ("transposed", "generative"),
                generative=mode == "generative")


@pytest.mark.parametrize("mode", MODES)
def test_conv_and_gradients_match_cpu(cuda, mode):
    coords = ref.rand_coords(3000, 24, 2)
    cpu, gpu = _pair(coords, 16, cuda)
    if mode in ("transposed", "generative"):
        # start from the stride-2 level of the same manager
        wd = torch.randn(8, 16, 16)
        cpu = voxconv.spatially_sparse_conv(cpu, wd.double(), 2, 2)
        gpu = voxconv.spatially_sparse_conv(gpu, wd.to(cuda), 2, 2)
        assert torch.equal(cpu.coords, gpu.coords.cpu())
    a = _args(mode)
    K = a["kernel_size"] ** 3
    w = torch.randn(K, 16, 24) * 0.1
    wc = w.double().requires_grad_()
    wg = w.to(cuda).requires_grad_()
    xc = cpu.feats.detach().requires_grad_()
    xg = gpu.feats.detach().requires_grad_()
    yc = voxconv.spatially_sparse_conv(cpu.replace_feature(xc), wc, **a)
    yg = voxconv.spatially_sparse_conv(gpu.replace_feature(xg), wg, **a)
    assert torch.equal(yc.coords, yg.coords.cpu())
    torch.testing.assert_close(yg.feats.double().cpu(), yc.feats, rtol=1e-3, atol=1e-3)
    g = torch.randn(yc.feats.shape)
    yc.feats.backward(g.double())
    yg.feats.backward(g.to(cuda))
    torch.testing.assert_close(xg.grad.double().cpu(), xc.grad, rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(wg.grad.double().cpu(), wc.grad, rtol=1e-3, atol=2e-3)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_on_gpu(cuda, dtype):
    coords = ref.rand_coords(4000, 24)
    cpu, gpu = _pair(coords, 32, cuda, dtype)
    w = torch.randn(27, 32, 32) * 0.05
    yc = voxconv.spatially_sparse_conv(cpu.replace_feature(gpu.feats.double().cpu()),
                                       w.to(dtype).double())
    yg = voxconv.spatially_sparse_conv(gpu, w.to(cuda, dtype))
    tol = 2e-2 if dtype == torch.float16 else 8e-2
    scale = yc.feats.abs().max().item()
    assert (yg.feats.double().cpu() - yc.feats).abs().max().item() <= tol * scale
    with torch.inference_mode():
        yi = voxconv.spatially_sparse_conv(gpu, w.to(cuda, dtype))
    assert (yi.feats.double().cpu() - yc.feats).abs().max().item() <= 4 * tol * scale


def test_depthwise_pool_unpool_voxelize_match_cpu(cuda):
    coords = ref.rand_coords(3000, 20, 2)
    cpu, gpu = _pair(coords, 8, cuda)
    w = torch.randn(27, 8)
    torch.testing.assert_close(
        voxconv.spatially_sparse_depthwise_conv(gpu, w.to(cuda)).feats.double().cpu(),
        voxconv.spatially_sparse_depthwise_conv(cpu, w.double()).feats, rtol=1e-4, atol=1e-4)
    for fn in (voxconv.sparse_max_pool, voxconv.sparse_avg_pool, voxconv.sparse_sum_pool):
        pc, pg = fn(cpu, 2, 2), fn(gpu, 2, 2)
        assert torch.equal(pc.coords, pg.coords.cpu())
        torch.testing.assert_close(pg.feats.double().cpu(), pc.feats, rtol=1e-4, atol=1e-4)
    uc, ug = voxconv.sparse_unpool(pc, 2, 2), voxconv.sparse_unpool(pg, 2, 2)
    torch.testing.assert_close(ug.feats.double().cpu(), uc.feats, rtol=1e-4, atol=1e-4)
    pts = torch.rand(20000, 4) * 10
    cc, fc, pc_ = voxconv.voxelize(pts, 0.25)
    cg, fg, pg_ = voxconv.voxelize(pts.to(cuda), 0.25)
    assert torch.equal(cc, cg.cpu()) and torch.equal(pc_, pg_.cpu())
    torch.testing.assert_close(fg.cpu(), fc, rtol=1e-5, atol=1e-5)


def test_current_stream_gets_its_own_handle(cuda):
    coords = ref.rand_coords(2000, 16).to(cuda)
    x = voxconv.SparseTensor(torch.randn(len(coords), 8, device=cuda), coords)
    w = torch.randn(27, 8, 8, device=cuda)
    ref_y = voxconv.spatially_sparse_conv(x, w).feats
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = voxconv.spatially_sparse_conv(x, w).feats
        h = _runtime.handle_for(cuda)
        assert h.stream == s.cuda_stream and h is _runtime.last_handle()
    torch.cuda.current_stream().wait_stream(s)
    torch.testing.assert_close(y, ref_y, rtol=0, atol=0)
    assert ("cuda", cuda.index if cuda.index is not None else torch.cuda.current_device(),
            s.cuda_stream) in _runtime._handles


def test_library_temporaries_use_torch_caching_allocator(cuda, torch_allocator_calls):
    """Library memory comes from torch's caching allocator (its raw entry
    points, see _runtime._torch_cuda_allocator); blocks the library frees
    are kept for reuse and go back to torch at voxconv.empty_cache()."""
    calls = torch_allocator_calls
    s = torch.cuda.Stream()  # a fresh handle, so nothing is pooled yet
    with torch.cuda.stream(s):
        coords = ref.rand_coords(5000, 24).to(cuda)
        x = voxconv.SparseTensor(torch.randn(len(coords), 16, device=cuda), coords)
        y = voxconv.nn.SparseConv3d(16, 16, 2, stride=2).to(cuda)(x)
        y.feats.sum().backward()
        del x, y
        import gc
        gc.collect()
    torch.cuda.synchronize()
    assert calls["alloc"] > 0, "the library allocated nothing through torch"
    voxconv.empty_cache()
    assert calls["free"] > 0, "voxconv.empty_cache() gave nothing back to torch"