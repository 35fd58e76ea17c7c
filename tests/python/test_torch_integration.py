"""torch.library registration (torch >= 2.4): the ops exist as
torch.ops.voxconv.*, pass torch.library.opcheck (schema, fake/meta
implementation, autograd registration), and torch.compile traces around
them with the same results. On older torch (Debian's 1.13) the plain
autograd.Function path is used and these tests skip."""

import pytest
import torch

import voxconv

from conftest import DEVICES
import ref

pytestmark = pytest.mark.skipif(not voxconv.custom_ops_enabled(),
                                reason=f"torch {torch.__version__}: no torch.library.custom_op "
                                       f"(or VOXCONV_TORCH_CUSTOM_OPS=0)")


def test_ops_are_registered():
    for name in ("conv_forward", "conv_dgrad", "conv_wgrad", "depthwise_forward",
                 "depthwise_dgrad", "depthwise_wgrad", "pool_forward", "pool_backward",
                 "unpool_forward", "unpool_backward"):
        assert hasattr(torch.ops.voxconv, name), name


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    coords = ref.rand_coords(200, 8).to(device)
    x = voxconv.SparseTensor(torch.randn(len(coords), 4, device=device), coords)
    km, _ = x.manager.kernel_map(x.coordinate_set, voxconv._lib.KMAP_STRIDED, (2, 2, 2),
                                 (2, 2, 2), (1, 1, 1))
    feats = x.feats.clone().requires_grad_()
    w = torch.randn(8, 4, 5, device=device, requires_grad=True)
    wd = torch.randn(8, 4, device=device, requires_grad=True)
    ops = torch.ops.voxconv
    cfg = (None, None, None, 0, 0)
    torch.library.opcheck(ops.conv_forward, (feats, w, km.id, km.n_out, *cfg, False))
    torch.library.opcheck(ops.depthwise_forward, (feats, wd, km.id, km.n_out, *cfg, False))
    for mode in (0, 1, 2):
        torch.library.opcheck(ops.pool_forward, (feats, km.id, km.n_out, mode))
    coarse = torch.randn(km.n_out, 4, device=device, requires_grad=True)
    torch.library.opcheck(ops.unpool_forward, (coarse, km.id, km.n_in))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = voxconv.nn.SparseConv3d(4, 8, 3)
        self.d = voxconv.nn.SparseConv3d(8, 8, 2, stride=2)
        self.u = voxconv.nn.SparseConvTranspose3d(8, 8, 2, stride=2)
        self.dw = voxconv.nn.SparseDepthwiseConv3d(16, 3)

    def forward(self, x):
        h = self.a(x)
        h = voxconv.cat([self.u(voxconv.sparse_max_pool(self.d(h), 1, 1)), h])
        return self.dw(h).feats.relu().sum(1)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_compile_traces_around_the_ops(device):
    coords = ref.rand_coords(500, 10).to(device)
    x = voxconv.SparseTensor(torch.randn(len(coords), 4, device=device), coords)
    net = Net().to(device)
    want = net(x)
    want.sum().backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    compiled = torch.compile(net, backend="aot_eager")
    got = compiled(x)
    got.sum().backward()
    torch.testing.assert_close(got, want)
    for p, g in zip(net.parameters(), grads):
        torch.testing.assert_close(p.grad, g)


class FeatNet(torch.nn.Module):
    """Sparse convs with dense feature-wise work between them (what the
    inductor compiles) and a dense head."""

    def __init__(self):
        super().__init__()
        self.a = voxconv.nn.SparseConv3d(4, 8, 3)
        self.bn = voxconv.nn.SparseBatchNorm(8)
        self.d = voxconv.nn.SparseConv3d(8, 8, 2, stride=2)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        h = self.bn(self.a(x))
        h = h.replace_feature(torch.relu(h.feats) * 2 + 1)
        return self.head(self.d(h).feats)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="inductor on CUDA: no GPU")
def test_torch_compile_default_mode_fresh_inputs_do_not_recompile():
    """torch.compile's default mode (inductor) over voxconv layers: the same
    results as eager, and a new SparseTensor (new coordinates, new maps) per
    call does not make dynamo recompile (voxconv calls run outside the
    graph, see _ops.outside_compile)."""
    from torch._dynamo.utils import counters
    torch._dynamo.reset()
    counters.clear()
    dev = torch.device("cuda")
    net = FeatNet().to(dev).eval()
    compiled = torch.compile(net)
    frames = []
    for i in range(4):
        coords = ref.rand_coords(300 + 50 * i, 10).to(dev)
        x = voxconv.SparseTensor(torch.randn(len(coords), 4, device=dev), coords)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), net(x), rtol=1e-4, atol=1e-4)
        frames.append(sum(counters["frames"].values()))
    # the first calls compile (and may mark a shape dynamic once); later
    # fresh inputs must reuse what was compiled
    assert frames[3] == frames[2], f"compiled frames per call: {frames}"


def test_outside_compile_runs_eagerly_inside_compiled_code():
    """_ops.outside_compile's entry (eager: a direct call; compiled: torch's
    disabled route): a compiled caller graph-breaks at it, the wrapped
    function runs once per call, and neither it nor what it calls ends up
    in a compiled graph (a helper it calls would be compiled on its own if
    dynamo's frame callback stayed set there). Plain eager calls give the
    same result."""
    from voxconv import _ops

    def inner(t):  # dynamo would compile this frame if the callback stayed set
        return t.sin() * 3

    seen = []

    @_ops.outside_compile
    def outside(t):
        seen.append(1)
        return inner(t)

    assert getattr(outside, "_torchdynamo_disable", False)
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(lambda t: outside(t * 2) + 1, backend=backend)
    x = torch.randn(5)
    want = (x * 2).sin() * 3 + 1
    for _ in range(3):
        torch.testing.assert_close(compiled(x), want)
    assert len(seen) == 3
    targets = [str(n.target) for gm in graphs for n in gm.graph.nodes
               if n.op in ("call_function", "call_method")]
    assert graphs and any("mul" in t for t in targets), targets
    assert not any("sin" in t for t in targets), f"traced into the disabled call: {targets}"
    torch.testing.assert_close(outside(x), x.sin() * 3)
    assert len(seen) == 4
