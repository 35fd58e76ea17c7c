"""Where the host time of one SparseConv3d call goes (CUDA, map cached),
piece by piece, with the GPU kept busy so that nothing waits for it."""
import sys, time, torch, voxconv
from voxconv import nn as vnn, functional as F, _ops, _runtime
sys.path.insert(0, "tests/python")
import ref
cuda = torch.device("cuda")
coords = ref.rand_coords(20000, 40, 1).to(cuda)
x = voxconv.SparseTensor(torch.randn(len(coords), 64, device=cuda, dtype=torch.float16), coords)
conv = vnn.SparseConv3d(64, 64, 3, bias=False).to(cuda).half()
for _ in range(5): conv(x)
torch.cuda.synchronize()
w = conv.weight; feats = x.feats
km, out_set = x.manager.kernel_map(x.coordinate_set, 0, (3,3,3),(1,1,1),(1,1,1))
cfg = (None, None, None, 0, 0)
def bench(name, f, n=300):
    torch.cuda._sleep(int(2e8))
    best = []
    for _ in range(n):
        t0 = time.perf_counter(); f(); best.append(time.perf_counter() - t0)
    best.sort()
    busy = not torch.cuda.current_stream().query()
    torch.cuda.synchronize()
    print("%-32s median %7.2f us  p10 %7.2f us  busy=%s" % (name, best[n//2]*1e6, best[n//10]*1e6, busy))
bench("handle_for_tensor", lambda: _runtime.handle_for_tensor(feats))
bench("new_empty", lambda: feats.new_empty((len(coords), 64)))
bench("_autocast", lambda: F._autocast(feats, w, None))
wd = w.detach()
bench("_conv_fwd (C call)", lambda: _ops._conv_fwd(feats, wd, km, cfg, False))
with torch.no_grad():
    bench("module call no_grad", lambda: conv(x))
bench("module call grad", lambda: conv(x))
bench("_PassFn.apply", lambda: _ops._PassFn.apply(feats, w, km, "conv", cfg, 0, False))
import cProfile, pstats
torch.cuda._sleep(int(5e8))
pr = cProfile.Profile(); pr.enable()
for _ in range(200): conv(x)
pr.disable(); torch.cuda.synchronize()
pstats.Stats(pr).sort_stats("tottime").print_stats(15)
