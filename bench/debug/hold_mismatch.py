"""Debug: why does a held forward differ from an unheld one?"""
import sys, torch, voxconv
from voxconv import nn as vnn
sys.path.insert(0, "tests/python")
import ref
ALGO = "[mask_gemm, mask_gemm_wgmma]"
cuda = torch.device("cuda")
torch.manual_seed(3)
layer = vnn.SparseConv3d(64, 64, 3, bias=False, fwd_algo=ALGO, bwd_algo=ALGO, deterministic=True).to(cuda).half()
coords = ref.rand_coords(40000, 48, 2).to(cuda)
feats = torch.randn(len(coords), 64, device=cuda, dtype=torch.float16).requires_grad_()
gout = torch.randn(len(coords), 64, device=cuda, dtype=torch.float16)
def step(hold=False, nograd=False):
    feats.grad = None; layer.weight.grad = None
    if hold: torch.cuda._sleep(int(1e9))
    x = voxconv.SparseTensor(feats, coords)
    y = layer(x)
    infos = [voxconv.get_last_call_info()]
    y.feats.backward(gout)
    torch.cuda.synchronize()
    return y.feats.detach().clone(), feats.grad.clone(), layer.weight.grad.clone(), infos
res = {}
for i in range(3): res[f"warm{i}"] = step()
res["plain"] = step()
res["held"] = step(hold=True)
res["plain2"] = step()
base = res["plain"]
for k, v in res.items():
    d = [(a != b).sum().item() for a, b in zip(v[:3], base[:3])]
    print(k, "diff counts y/gx/gw:", d, "fwd:", v[3][0].algo, v[3][0].params, "cache", v[3][0].from_cache)
