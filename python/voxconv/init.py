"""Weight initialisation for voxconv's weight layouts (``voxconv.nn.init``).

``torch.nn.init`` reads the fans of a weight from torch's own layout
(``[out, in, *kernel]``: fan_in = size(1) * receptive field, fan_out =
size(0) * receptive field). voxconv's weights are laid out differently, so
torch's functions compute the wrong fans on them:

* a convolution weight ``[K, Cin, Cout]`` (``SparseConv3d.weight``, K =
  kernel volume): torch reads fan_in = Cin * Cout, fan_out = K * Cout;
  the right ones are fan_in = K * Cin, fan_out = K * Cout;
* a depthwise weight ``[K, C]`` (``SparseDepthwiseConv3d.weight``): torch
  reads it as a Linear weight, fan_in = C, fan_out = K; each output of a
  depthwise convolution sums K inputs of its own channel and each input
  reaches K outputs, so fan_in = fan_out = K. (torch's grouped
  ``Conv3d(C, C, k, groups=C)`` would report fan_out = C * K, a known
  quirk of its formula: the gradient reaching an input sums K terms, not
  C * K, so ``mode="fan_out"`` uses K here.)

The functions below have torch's signatures and gain rules
(:func:`torch.nn.init.calculate_gain`) and differ only in the fans. The
layout is taken from the number of dimensions (3: convolution, 2:
depthwise); pass ``layout="torch"`` for any other weight (a
``torch.nn.Linear`` in the same network, a dense ``Conv3d``), which then
gets torch's fans, or ``layout="conv"`` / ``"depthwise"`` to say it.
"""

import math
import warnings

import torch
from torch.nn.init import calculate_gain

__all__ = ["calculate_gain", "calculate_fan_in_and_fan_out", "kaiming_uniform_",
           "kaiming_normal_", "xavier_uniform_", "xavier_normal_"]

LAYOUTS = ("conv", "depthwise", "torch")


def calculate_fan_in_and_fan_out(tensor, layout=None):
    """(fan_in, fan_out) of a weight in voxconv's layout (see the module
    doc): ``[K, Cin, Cout]`` -> (K * Cin, K * Cout), ``[K, C]`` -> (K, K);
    ``layout="torch"``: torch's own rule."""
    if layout is None:
        layout = {3: "conv", 2: "depthwise"}.get(tensor.dim())
        if layout is None:
            raise ValueError(
                f"voxconv.nn.init: cannot tell the layout of a weight of shape "
                f"{tuple(tensor.shape)}: voxconv weights are [K, Cin, Cout] (convolution) "
                f"or [K, C] (depthwise); pass layout='torch' for torch's fans")
    if layout == "conv":
        if tensor.dim() != 3:
            raise ValueError(f"voxconv.nn.init: layout 'conv' is [K, Cin, Cout], got shape "
                             f"{tuple(tensor.shape)}")
        k, cin, cout = tensor.shape
        return k * cin, k * cout
    if layout == "depthwise":
        if tensor.dim() != 2:
            raise ValueError(f"voxconv.nn.init: layout 'depthwise' is [K, C], got shape "
                             f"{tuple(tensor.shape)}")
        k = tensor.shape[0]
        return k, k
    if layout == "torch":
        return torch.nn.init._calculate_fan_in_and_fan_out(tensor)
    raise ValueError(f"voxconv.nn.init: layout {layout!r}: expected one of "
                     f"{', '.join(LAYOUTS)} or None")


def _fan(tensor, mode, layout):
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor, layout)
    return fan_in if mode == "fan_in" else fan_out


def _empty(tensor):
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op")
        return True
    return False


def _uniform(tensor, bound, generator):
    with torch.no_grad():
        if generator is None:  # torch 1.13's uniform_ has no generator=None
            return tensor.uniform_(-bound, bound)
        return tensor.uniform_(-bound, bound, generator=generator)


def _normal(tensor, std, generator):
    with torch.no_grad():
        if generator is None:
            return tensor.normal_(0.0, std)
        return tensor.normal_(0.0, std, generator=generator)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None,
                     *, layout=None):
    """As :func:`torch.nn.init.kaiming_uniform_`: uniform in ±bound with
    ``bound = gain * sqrt(3 / fan)``, ``gain = calculate_gain(nonlinearity,
    a)``, ``fan`` from voxconv's layout (``mode`` "fan_in" or "fan_out")."""
    if _empty(tensor):
        return tensor
    fan = _fan(tensor, mode, layout)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return _uniform(tensor, math.sqrt(3.0) * std, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None,
                    *, layout=None):
    """As :func:`torch.nn.init.kaiming_normal_`: normal with ``std = gain /
    sqrt(fan)``, ``fan`` from voxconv's layout."""
    if _empty(tensor):
        return tensor
    fan = _fan(tensor, mode, layout)
    return _normal(tensor, calculate_gain(nonlinearity, a) / math.sqrt(fan), generator)


def xavier_uniform_(tensor, gain=1.0, generator=None, *, layout=None):
    """As :func:`torch.nn.init.xavier_uniform_`: uniform in ±``gain *
    sqrt(6 / (fan_in + fan_out))``, fans from voxconv's layout."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor, layout)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return _uniform(tensor, math.sqrt(3.0) * std, generator)


def xavier_normal_(tensor, gain=1.0, generator=None, *, layout=None):
    """As :func:`torch.nn.init.xavier_normal_`: normal with ``std = gain *
    sqrt(2 / (fan_in + fan_out))``, fans from voxconv's layout."""
    fan_in, fan_out = calculate_fan_in_and_fan_out(tensor, layout)
    return _normal(tensor, gain * math.sqrt(2.0 / float(fan_in + fan_out)), generator)
