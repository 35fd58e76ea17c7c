"""Native niceties (issue 21 items 4 and 6): voxconv.nn.init (layout-aware
fans), SparseTensor arithmetic, voxconv.nn.Sequential."""

import copy
import math
from collections import OrderedDict

import pytest
import torch

import voxconv
from voxconv import nn as vnn
from voxconv.tensor import NotATensorError

from ref import rand_coords


def _sparse(c=4, n=40, dtype=torch.float32, extent=5, requires_grad=False):
    coords = rand_coords(n, extent, batches=2)
    f = torch.randn(coords.shape[0], c, dtype=dtype, requires_grad=requires_grad)
    return voxconv.SparseTensor(f, coords)


# ---- voxconv.nn.init ---------------------------------------------------------------
def test_init_is_exposed_as_voxconv_nn_init():
    import voxconv.nn.init as by_import
    from voxconv.nn import init as by_from
    assert by_import is by_from is vnn.init is voxconv.init
    for name in ("kaiming_uniform_", "kaiming_normal_", "xavier_uniform_", "xavier_normal_",
                 "calculate_gain", "calculate_fan_in_and_fan_out"):
        assert callable(getattr(vnn.init, name))


def test_fans_of_voxconv_layouts():
    K, cin, cout = 27, 5, 7
    conv = vnn.SparseConv3d(cin, cout, kernel_size=3)
    dw = vnn.SparseDepthwiseConv3d(cout, kernel_size=(3, 3, 1))
    assert vnn.init.calculate_fan_in_and_fan_out(conv.weight) == (K * cin, K * cout)
    assert vnn.init.calculate_fan_in_and_fan_out(dw.weight) == (9, 9)
    # what torch reads from the same tensors (the reason for this module)
    torch_fans = torch.nn.init._calculate_fan_in_and_fan_out
    assert torch_fans(conv.weight) == (cin * cout, K * cout)
    assert torch_fans(dw.weight) == (cout, 9)
    # explicit layouts
    lin = torch.nn.Linear(3, 4).weight
    assert vnn.init.calculate_fan_in_and_fan_out(lin, "torch") == (3, 4)
    assert vnn.init.calculate_fan_in_and_fan_out(conv.weight, layout="conv") == (K * cin, K * cout)
    with pytest.raises(ValueError, match="layout 'conv'"):
        vnn.init.calculate_fan_in_and_fan_out(lin, "conv")
    with pytest.raises(ValueError, match="cannot tell the layout"):
        vnn.init.calculate_fan_in_and_fan_out(torch.empty(2, 3, 3, 3, 3))
    with pytest.raises(ValueError, match="cannot tell the layout"):
        vnn.init.calculate_fan_in_and_fan_out(torch.empty(5))
    with pytest.raises(ValueError, match="expected one of"):
        vnn.init.calculate_fan_in_and_fan_out(conv.weight, "dense")


# torch's functions on a torch-layout tensor with the same fans and the same
# number of elements draw the same numbers from the same seed: the results
# must be identical. A [K, Cin, Cout] weight has torch's fans on [Cout, Cin, K].
_CONV_CASES = [
    ("kaiming_uniform_", {}),
    ("kaiming_uniform_", {"a": math.sqrt(5)}),
    ("kaiming_uniform_", {"mode": "fan_out", "nonlinearity": "relu"}),
    ("kaiming_normal_", {}),
    ("kaiming_normal_", {"a": 0.1, "mode": "fan_out"}),
    ("kaiming_normal_", {"nonlinearity": "tanh"}),
    ("xavier_uniform_", {}),
    ("xavier_uniform_", {"gain": 2.0}),
    ("xavier_normal_", {}),
    ("xavier_normal_", {"gain": 0.5}),
]


@pytest.mark.parametrize("fn,kwargs", _CONV_CASES)
def test_conv_weight_init_matches_torch_with_the_right_fans(fn, kwargs):
    K, cin, cout = 8, 6, 10
    w = torch.empty(K, cin, cout, dtype=torch.float64)
    ref = torch.empty(cout, cin, K, dtype=torch.float64)
    torch.manual_seed(123)
    out = getattr(vnn.init, fn)(w, **kwargs)
    torch.manual_seed(123)
    getattr(torch.nn.init, fn)(ref, **kwargs)
    assert out is w
    assert torch.equal(w.flatten(), ref.flatten())


def _expected_std(fn, kwargs, fan_in, fan_out):
    if fn.startswith("kaiming"):
        fan = fan_out if kwargs.get("mode") == "fan_out" else fan_in
        gain = torch.nn.init.calculate_gain(kwargs.get("nonlinearity", "leaky_relu"),
                                            kwargs.get("a", 0))
        return gain / math.sqrt(fan)
    return kwargs.get("gain", 1.0) * math.sqrt(2.0 / (fan_in + fan_out))


@pytest.mark.parametrize("fn,kwargs", _CONV_CASES)
def test_depthwise_weight_init_uses_fans_k(fn, kwargs):
    """[K, C]: fan_in = fan_out = K; the same draws as torch's uniform_ /
    normal_ with torch's formula for that std."""
    K, C = 27, 40
    w = torch.empty(K, C, dtype=torch.float64)
    torch.manual_seed(7)
    getattr(vnn.init, fn)(w, **kwargs)
    std = _expected_std(fn, kwargs, K, K)
    torch.manual_seed(7)
    if fn.endswith("uniform_"):
        ref = torch.empty(K, C, dtype=torch.float64).uniform_(-math.sqrt(3) * std,
                                                               math.sqrt(3) * std)
    else:
        ref = torch.empty(K, C, dtype=torch.float64).normal_(0, std)
    assert torch.equal(w, ref)


@pytest.mark.parametrize("fn", ["kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
                                "xavier_normal_"])
def test_init_statistics(fn):
    """Std (and the uniform bound) of a large weight against the formula."""
    K, cin, cout = 27, 32, 48
    w = vnn.SparseConv3d(cin, cout, kernel_size=3, dtype=torch.float64).weight
    getattr(vnn.init, fn)(w)
    std = _expected_std(fn, {}, K * cin, K * cout)
    assert abs(w.std().item() / std - 1) < 0.03
    if fn.endswith("uniform_"):
        bound = math.sqrt(3) * std
        assert w.abs().max().item() <= bound
        assert w.abs().max().item() > 0.99 * bound
    assert w.requires_grad and w.grad_fn is None  # initialised under no_grad


def test_init_generator_and_errors():
    w1, w2 = torch.empty(8, 3, 4), torch.empty(8, 3, 4)
    vnn.init.kaiming_uniform_(w1, generator=torch.Generator().manual_seed(5))
    vnn.init.kaiming_uniform_(w2, generator=torch.Generator().manual_seed(5))
    assert torch.equal(w1, w2)
    with pytest.raises(ValueError, match="Mode fan_avg not supported"):
        vnn.init.kaiming_normal_(w1, mode="fan_avg")
    with pytest.raises(ValueError):
        vnn.init.kaiming_normal_(w1, nonlinearity="no_such_function")
    with pytest.warns(UserWarning, match="zero-element"):
        vnn.init.kaiming_uniform_(torch.empty(8, 0, 4))
    # a Linear weight in the same network: layout="torch" is torch's init
    lin1, lin2 = torch.empty(4, 3), torch.empty(4, 3)
    torch.manual_seed(1)
    vnn.init.xavier_uniform_(lin1, layout="torch")
    torch.manual_seed(1)
    torch.nn.init.xavier_uniform_(lin2)
    assert torch.equal(lin1, lin2)


# ---- SparseTensor arithmetic -------------------------------------------------------
def test_add_sub_values_and_coordinates():
    x = _sparse()
    y = x.replace_feature(torch.randn_like(x.feats))
    for got, want in [(x + y, x.feats + y.feats), (x - y, x.feats - y.feats),
                      (x + 2, x.feats + 2), (2.5 + x, 2.5 + x.feats), (x - 1, x.feats - 1),
                      (1 - x, 1 - x.feats), (-x, -x.feats),
                      (x + torch.arange(4.0), x.feats + torch.arange(4.0)),
                      (torch.arange(4.0) - x, torch.arange(4.0) - x.feats),
                      (x + torch.ones(1, 4), x.feats + 1),
                      (x + x.feats, 2 * x.feats), (sum([x, y, x]), x.feats + y.feats + x.feats)]:
        assert isinstance(got, voxconv.SparseTensor)
        assert torch.equal(got.feats, want)
        assert got.coordinate_set is x.coordinate_set and got.manager is x.manager
    # channel broadcasting between two sparse tensors: [N, 1] + [N, C]
    one = x.replace_feature(x.feats[:, :1].clone())
    assert torch.equal((one + x).feats, x.feats[:, :1] + x.feats)


def test_add_on_equal_coordinates_of_another_manager():
    x = _sparse()
    other = voxconv.SparseTensor(torch.randn_like(x.feats), x.coords.clone())
    assert other.manager is not x.manager
    z = x + other
    assert torch.equal(z.feats, x.feats + other.feats)
    assert z.coordinate_set is x.coordinate_set  # the left operand's


def test_add_refuses_other_coordinates_and_shapes():
    x = _sparse()
    down = voxconv.sparse_max_pool(x, 2, 2)
    with pytest.raises(voxconv.KmapMismatchError, match=r"SparseTensor \+: .*different coordinates"):
        x + down
    shuffled = voxconv.SparseTensor(x.feats, x.coords.flip(0))
    with pytest.raises(voxconv.KmapMismatchError, match="same order"):
        x - shuffled
    restrided = voxconv.SparseTensor(x.feats, x.coords, tensor_stride=2)
    with pytest.raises(voxconv.KmapMismatchError):
        x += restrided
    n, c = x.feats.shape
    with pytest.raises(voxconv.ShapeMismatchError, match="must keep"):
        x + torch.ones(3, n, c)
    with pytest.raises(voxconv.ShapeMismatchError, match="does not broadcast"):
        x + torch.ones(c + 1)
    with pytest.raises(TypeError):
        x + "one"
    with pytest.raises(TypeError):
        x + [1.0]


def test_iadd_in_place_without_autograd():
    x = _sparse()
    alias = x.detach()  # shares the features' storage, as torch's detach
    f, before = x.feats, x.feats.clone()
    ident = id(x)
    with torch.no_grad():
        x += 1.5
    assert id(x) == ident and x.feats is f
    assert torch.equal(f, before + 1.5)
    assert torch.equal(alias.feats, before + 1.5)
    x -= x.replace_feature(torch.ones_like(f))
    assert x.feats is f and torch.equal(f, before + 1.5 - 1)
    # a result of another shape or dtype rebinds
    x += torch.ones(len(x), 1, dtype=torch.float64)
    assert x.feats is not f and x.feats.dtype == torch.float64
    one = x.replace_feature(x.feats[:, :1].contiguous())
    g = one.feats
    one += x
    assert one.feats is not g and one.feats.shape == x.feats.shape
    with torch.inference_mode():
        y = _sparse()
        g = y.feats
        y += 1
        assert y.feats is g


def test_iadd_rebinds_under_autograd_so_backward_works():
    """x.feats saved by ReLU for backward: torch's in-place += would make
    the backward fail; SparseTensor's += rebinds instead."""
    x = _sparse(requires_grad=True)
    y = x.replace_feature(torch.relu(x.feats))
    saved = y.feats
    y += x
    assert y.feats is not saved and saved._version == 0
    y.feats.sum().backward()
    assert torch.equal(x.feats.grad, (x.feats > 0).float() + 1)
    # a leaf that requires grad: rebinds too (add_ would raise)
    leaf = _sparse(requires_grad=True)
    f = leaf.feats
    leaf += 1
    assert leaf.feats is not f and leaf.feats.grad_fn is not None


def test_arithmetic_gradcheck():
    coords = rand_coords(20, 4)
    n = coords.shape[0]
    a = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(n, 3, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(3, dtype=torch.float64, requires_grad=True)

    def f(a, b, bias):
        x = voxconv.SparseTensor(a, coords)
        y = x.replace_feature(b)
        z = (x + y) - bias
        z = 2.0 - z + (-y)
        z += x
        z -= bias
        other = voxconv.SparseTensor(b * 3, coords.clone())  # equal coordinates, other manager
        return (z + other).feats

    assert torch.autograd.gradcheck(f, (a, b, bias))
    assert torch.autograd.gradgradcheck(f, (a, b, bias))


def test_arithmetic_through_convolutions_gradcheck():
    """A residual block: conv(x) + x, with the gradient reaching both."""
    coords = rand_coords(25, 4)
    n = coords.shape[0]
    a = torch.randn(n, 2, dtype=torch.float64, requires_grad=True)
    w = torch.randn(27, 2, 2, dtype=torch.float64, requires_grad=True)

    def f(a, w):
        x = voxconv.SparseTensor(a, coords)
        y = voxconv.spatially_sparse_conv(x, w, kernel_size=3)
        y += x
        return (y + 1).feats

    assert torch.autograd.gradcheck(f, (a, w))


# ---- voxconv.nn.Sequential ---------------------------------------------------------------
def _net():
    return vnn.Sequential(vnn.SparseConv3d(4, 8, dtype=torch.float64),
                          torch.nn.BatchNorm1d(8, dtype=torch.float64), torch.nn.ReLU(),
                          vnn.SparseConv3d(8, 3, dtype=torch.float64))


def test_sequential_matches_manual_composition():
    net = _net()
    manual = copy.deepcopy(net)
    x = _sparse(dtype=torch.float64, n=60)
    y = net(x)
    conv1, bn, relu, conv2 = manual
    h = conv1(x)
    h = h.replace_feature(relu(bn(h.feats)))
    want = conv2(h)
    assert isinstance(y, voxconv.SparseTensor)
    assert y.coordinate_set is x.coordinate_set
    assert torch.allclose(y.feats, want.feats, rtol=0, atol=1e-12)
    y.feats.square().sum().backward()
    want.feats.square().sum().backward()
    for (name, p), q in zip(net.named_parameters(), manual.parameters()):
        assert torch.allclose(p.grad, q.grad, rtol=0, atol=1e-12), name
    assert torch.equal(net[1].running_mean, manual[1].running_mean)
    assert int(net[1].num_batches_tracked) == 1


def test_sequential_state_dict_is_torchs():
    net = _net()
    plain = torch.nn.Sequential(*[copy.deepcopy(m) for m in net])
    assert list(net.state_dict().keys()) == list(plain.state_dict().keys())
    assert "0.weight" in net.state_dict() and "1.running_mean" in net.state_dict()
    other = _net()
    other.load_state_dict(plain.state_dict())
    for k, v in plain.state_dict().items():
        assert torch.equal(other.state_dict()[k], v)
    named = vnn.Sequential(OrderedDict([("conv", vnn.SparseConv3d(4, 8)),
                                        ("bn", torch.nn.BatchNorm1d(8))]))
    assert {"conv.weight", "bn.weight", "bn.running_var"} <= set(named.state_dict())
    assert isinstance(net[1:3], vnn.Sequential) and len(net[1:3]) == 2
    assert isinstance(net, torch.nn.Sequential)


def test_sequential_feature_wise_rules():
    x = _sparse(n=50)
    torch_stack = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.LayerNorm(6))
    sparse_stack = torch.nn.Sequential(vnn.SparseConv3d(6, 6), vnn.SparseReLU())

    class Scale(torch.nn.Module):  # a user module, not marked: gets features only if marked
        voxconv_feature_wise = True

        def forward(self, f):
            assert isinstance(f, torch.Tensor)
            return f * 2

    class Block(torch.nn.Module):  # a user sparse block
        def __init__(self):
            super().__init__()
            self.conv = vnn.SparseConv3d(6, 6)

        def forward(self, s):
            return self.conv(s) + s

    net = vnn.Sequential(torch_stack, torch.nn.Dropout(0.5), sparse_stack, Scale(), Block(),
                         torch.nn.Identity(), vnn.SparseGlobalAvgPool(), torch.nn.Linear(6, 2))
    assert [vnn.feature_wise(m) for m in net] == [True, True, False, True, False, True,
                                                  False, True]
    net.eval()
    out = net(x)
    assert isinstance(out, torch.Tensor) and out.shape == (x.batch_size, 2)
    with torch.no_grad():
        h = x.replace_feature(torch_stack(x.feats))
        h = sparse_stack(h)
        h = h.replace_feature(h.feats * 2)
        h = net[4](h)
        want = net[7](voxconv.global_avg_pool(h))
        assert torch.allclose(out, want, atol=1e-6)
    # an instance flag overrides the class rule
    relu = torch.nn.ReLU()
    relu.voxconv_feature_wise = False
    assert not vnn.feature_wise(relu)
    with pytest.raises(TypeError, match="must be Tensor"):
        vnn.Sequential(relu)(x)


def test_sequential_refuses_a_feature_module_that_drops_rows():
    class FirstRows(torch.nn.Module):
        voxconv_feature_wise = True

        def forward(self, f):
            return f[:3]

    x = _sparse()
    with pytest.raises(voxconv.ShapeMismatchError, match=r"module 1 \(FirstRows\)"):
        vnn.Sequential(torch.nn.ReLU(), FirstRows())(x)


def test_torch_sequential_error_points_here():
    x = _sparse()
    with pytest.raises(NotATensorError, match="voxconv.nn.Sequential"):
        torch.nn.Sequential(vnn.SparseConv3d(4, 4), torch.nn.BatchNorm1d(4))(x)


def test_arithmetic_and_sequential_on_each_device(device):
    coords = rand_coords(80, 6, batches=2).to(device)
    x = voxconv.SparseTensor(torch.randn(coords.shape[0], 4, device=device), coords)
    y = x.replace_feature(torch.randn_like(x.feats))
    assert torch.equal((x + y - 1).feats, x.feats + y.feats - 1)
    assert torch.equal((x + torch.arange(4.0, device=device)).feats,
                       x.feats + torch.arange(4.0, device=device))
    assert torch.equal((x + torch.tensor(2.0)).feats, x.feats + 2)  # a 0-d CPU tensor
    twin = voxconv.SparseTensor(y.feats, coords.clone())
    assert torch.equal((x + twin).feats, x.feats + y.feats)
    f = x.feats
    with torch.no_grad():
        x += y
    assert x.feats is f
    net = vnn.Sequential(vnn.SparseConv3d(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                         vnn.SparseConv3d(8, 3)).to(device)
    manual = copy.deepcopy(net)
    out = net(x)
    h = manual[0](x)
    want = manual[3](h.replace_feature(manual[2](manual[1](h.feats))))
    assert out.device == x.device
    assert torch.allclose(out.feats, want.feats, rtol=1e-5, atol=1e-5)
