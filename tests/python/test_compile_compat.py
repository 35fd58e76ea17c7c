"""torch.compile over models written with the compatibility layers
(voxconv.compat.spconv, voxconv.compat.minkowski): the compiled model gives
eager's outputs and gradients on fresh inputs, and no compiled graph holds
a voxconv op.

Why the last check: a graph that held a voxconv op named its kernel map by
id, and maps go with their last tensor, so a later call of that graph (or
its backward) found the map gone ("kernel map #N no longer exists"). The
compat layers' sparse forwards run outside torch.compile as the native
modules' do (_ops.outside_compile); dense work between them (BatchNorm,
ReLU, the head) is still compiled. Needs torch >= 2.1 (torch.compile);
Debian's torch 1.13 skips."""

import pytest
import torch

import voxconv.compat.minkowski as ME
import voxconv.compat.spconv as spconv

import ref

pytestmark = pytest.mark.skipif(
    not hasattr(torch, "compile") or not hasattr(torch, "compiler"),
    reason=f"torch {torch.__version__} has no torch.compile")


class SpconvNet(torch.nn.Module):
    """A SECOND-style stem: SubMConv3d, SparseConv3d (stride 2, padding 1),
    SparseInverseConv3d back onto the input set, a dense head."""

    def __init__(self):
        super().__init__()
        self.stem = spconv.SparseSequential(
            spconv.SubMConv3d(4, 8, 3, padding=1, bias=False, indice_key="subm1"),
            torch.nn.BatchNorm1d(8), torch.nn.ReLU())
        self.down = spconv.SparseSequential(
            spconv.SparseConv3d(8, 8, 3, stride=2, padding=1, bias=False,
                                indice_key="down1"),
            torch.nn.BatchNorm1d(8), torch.nn.ReLU())
        self.up = spconv.SparseInverseConv3d(8, 8, 3, indice_key="down1", bias=False)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        a = self.stem(x)
        b = self.up(self.down(a))
        return self.head(torch.cat([a.features, b.features], 1))


class MinkNet(torch.nn.Module):
    """A MinkUNet-style block: conv, BN, ReLU, a stride-2 conv and its
    transpose, ME.cat with the skip, a residual +, a dense head."""

    def __init__(self):
        super().__init__()
        self.conv = ME.MinkowskiConvolution(4, 8, kernel_size=3, dimension=3)
        self.bn = ME.MinkowskiBatchNorm(8)
        self.relu = ME.MinkowskiReLU()
        self.down = ME.MinkowskiConvolution(8, 8, kernel_size=2, stride=2, dimension=3)
        self.up = ME.MinkowskiConvolutionTranspose(8, 8, kernel_size=2, stride=2,
                                                   dimension=3)
        self.mix = ME.MinkowskiConvolution(16, 8, kernel_size=3, dimension=3)
        self.head = torch.nn.Linear(8, 3)

    def forward(self, x):
        a = self.relu(self.bn(self.conv(x)))
        b = self.up(self.down(a))
        c = self.mix(ME.cat(a, b)) + a
        return self.head(c.F)


def _spconv_input(device, n):
    c = ref.rand_coords(n, 12, batches=2).to(device)  # (b, x, y, z) in [0, 12)
    return lambda f: spconv.SparseConvTensor(f, c, [12, 12, 12], 2), len(c)


def _mink_input(device, n):
    c = ref.rand_coords(n, 12, batches=2).to(device)
    return lambda f: ME.SparseTensor(f, c), len(c)


def _graphs_backend():
    """A dynamo backend that records the graphs it is given and runs them
    as they are."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    return backend, graphs


def _voxconv_nodes(graphs):
    return [str(n.target) for gm in graphs for n in gm.graph.nodes
            if "voxconv" in str(n.target)]


@pytest.mark.parametrize("make_input,net_cls", [(_spconv_input, SpconvNet),
                                                (_mink_input, MinkNet)],
                         ids=["spconv", "minkowski"])
def test_compiled_compat_model_matches_eager_and_holds_no_voxconv_op(
        device, make_input, net_cls):
    torch._dynamo.reset()
    net = net_cls().to(device)
    backend, graphs = _graphs_backend()
    compiled = torch.compile(net, backend=backend)
    for n in (300, 420):  # fresh coordinates (new sets and maps) on each call
        wrap, rows = make_input(device, n)
        f = torch.randn(rows, 4, device=device)
        fe, fc = f.clone().requires_grad_(), f.clone().requires_grad_()
        dy = torch.randn(rows, 3, device=device)
        net.zero_grad()
        want = net(wrap(fe))
        want.backward(dy)
        want_grads = [p.grad.clone() for p in net.parameters()]
        net.zero_grad()
        got = compiled(wrap(fc))
        got.backward(dy)
        # Same ops in the same order on the same inputs: only the compiled
        # dense parts may round differently (same formats, so a few ulps).
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fc.grad, fe.grad, rtol=1e-5, atol=1e-5)
        for p, g in zip(net.parameters(), want_grads):
            torch.testing.assert_close(p.grad, g, rtol=1e-5, atol=1e-5)
    assert graphs, "dynamo compiled nothing: the dense parts should be compiled"
    assert _voxconv_nodes(graphs) == []
