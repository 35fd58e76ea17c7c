"""spconv 2.x's Python API (``spconv.pytorch``) on voxconv.

    import voxconv.compat.spconv as spconv          # for: import spconv.pytorch as spconv
    import voxconv.compat.spconv.pytorch as spconv  # the same module

Written from spconv's documented semantics (its docs/USAGE.md and the
behaviour of spconv/pytorch/{core,conv,pool,modules}.py), not from its
code. Only 3-D is provided. Conventions, as spconv's:

* ``SparseConvTensor(features, indices, spatial_shape, batch_size)``:
  ``indices`` int32 ``[N, 4]`` rows ``(batch, i0, i1, i2)`` in the order
  of ``spatial_shape`` (OpenPCDet passes ``(b, z, y, x)`` with
  ``spatial_shape = [z, y, x]``). spconv is agnostic of what the axes
  mean, and so is this layer: axis ``i0`` is voxconv's first coordinate
  axis ("x") and so on, so no column is ever reordered; only the meaning
  differs from voxconv's ``(b, x, y, z)`` naming.
* Weights are stored as spconv 2.x stores them (``[out, k0, k1, k2, in]``,
  "KRSC"), so spconv state_dicts load unchanged; each call hands the
  library ``weight.permute(1, 2, 3, 4, 0).reshape(K, in, out)`` (kernel
  offset index ``(j0*k1 + j1)*k2 + j2``, the same as voxconv's x-slowest
  order, so no offset is reordered either). As in spconv, a convolution
  with a kernel volume of 1 (and stride 1) is a plain matrix product that
  reads the same storage as ``[in, out]`` (``weight.view(in, out)``).
* Output sets and shapes: ``SubMConv3d`` keeps the input set (centred
  offsets) and ``spatial_shape``; ``SparseConv3d`` / ``SparseMaxPool3d``
  keep every output the kernel reaches inside
  ``out = (in + 2p - d(k-1) - 1) // s + 1`` (voxconv's EXPANDING map with
  ``padding`` and ``out_shape``); ``SparseConvTranspose3d`` creates
  every ``s*i - p + j*d`` inside ``(in - 1)*s - 2p + k + output_padding``
  (GENERATIVE); ``SparseInverseConv3d`` goes back onto the exact input
  set of the layer that registered ``indice_key`` (voxconv_kmap_inverse),
  with that layer's input ``spatial_shape``.
* ``indice_key``: tensors carry ``indice_dict`` (copied, never mutated,
  from layer to layer, as spconv does). A SubM layer whose key is present
  reuses that map and its output set (the key's kernel size, dilation,
  spatial shape and voxel count must match: ValueError otherwise); a
  non-SubM layer registers its map under its key (AssertionError if the
  key exists, as spconv); SparseInverseConv3d reads it.
  Independently of keys, voxconv's coordinate manager shares every map
  between layers of the same geometry on the same voxel set.

Not provided: 1-D/2-D/4-D layers, ``groups``, int8 / quantization,
``algo`` (accepted and ignored: voxconv chooses its own), fused
activations (``act_type``), ``benchmark`` records, ``grid``. See
docs/porting.md.
"""

import math
import sys
from collections import OrderedDict

import torch
from torch import nn
from torch.nn import init as _init

from .. import _lib
from .. import _ops
from ..functional import _autocast, global_avg_pool, global_max_pool
from ..kmap import KMAP_EXPANDING, CoordinateManager
from ..tensor import SparseTensor

__all__ = [
    "SparseConvTensor", "SparseModule", "SparseSequential", "SparseConvolution",
    "SubMConv3d", "SparseConv3d", "SparseConvTranspose3d", "SparseInverseConv3d",
    "SparseMaxPool3d", "SparseAvgPool3d", "SparseGlobalMaxPool", "SparseGlobalAvgPool",
    "SparseBatchNorm", "SparseSyncBatchNorm", "SparseReLU", "SparseIdentity", "Identity",
    "ToDense", "RemoveGrid", "AddTable", "ConcatTable", "JoinTable", "ConvAlgo",
    "IndiceData", "is_spconv_module", "is_sparse_conv", "assign_name_for_sparse_modules",
]

_UNIT = (1, 1, 1)
_CFG = (None, None, None, _lib.UNSET, _lib.UNSET)  # library defaults


class ConvAlgo:
    """Placeholders for spconv's ``ConvAlgo`` values (``algo=`` is
    accepted and ignored)."""
    Native = "Native"
    MaskImplicitGemm = "MaskImplicitGemm"
    MaskSplitImplicitGemm = "MaskSplitImplicitGemm"


def _expand3(val, name):
    if isinstance(val, int) and not isinstance(val, bool):
        return [val] * 3
    res = [int(v) for v in val]
    if len(res) != 3:
        raise ValueError(f"{name}: expected an int or 3 ints (3-D only), got {val!r}")
    return res


def _conv_out_size(shape, k, s, p, d):
    return [(shape[a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1 for a in range(3)]


def _deconv_out_size(shape, k, s, p, d, op):
    # spconv's own formula: (in - 1)*s - 2p + k + output_padding (no
    # dilation term, as in spconv's ops.get_deconv_output_size)
    return [(shape[a] - 1) * s[a] - 2 * p[a] + k[a] + op[a] for a in range(3)]


class IndiceData:
    """What an ``indice_key`` names: the map of the layer that registered
    it, its input/output voxel sets and spatial shapes."""

    def __init__(self, kmap, in_set, out_set, spatial_shape, out_spatial_shape, is_subm,
                 ksize, stride, padding, dilation, mode, out_shape):
        self.kmap, self.in_set, self.out_set = kmap, in_set, out_set
        self.spatial_shape, self.out_spatial_shape = spatial_shape, out_spatial_shape
        self.is_subm, self.ksize, self.stride = is_subm, ksize, stride
        self.padding, self.dilation = padding, dilation
        self.mode, self.out_shape = mode, out_shape

    @property
    def indices(self):
        return self.in_set.coords

    @property
    def out_indices(self):
        return self.out_set.coords


class SparseConvTensor:
    """spconv's sparse tensor (see the module doc for the conventions).
    ``features`` is read-only (``replace_feature`` makes a new tensor, as
    in spconv)."""

    def __init__(self, features, indices, spatial_shape, batch_size, grid=None,
                 voxel_num=None, indice_dict=None, benchmark=False,
                 permanent_thrust_allocator=False, enable_timer=False, force_algo=None):
        if indices.dim() != 2 or indices.shape[1] != 4:
            raise ValueError(f"indices: expected [N, 4] (batch + 3 spatial axes; only 3-D is "
                             f"supported), got {tuple(indices.shape)}")
        assert features.dim() == 2
        assert len(spatial_shape) == 3, "spatial shape must equal to ndim"
        assert indices.dtype == torch.int32, "only support int32"
        assert batch_size > 0
        self._features = features
        self.indices = indices
        self.spatial_shape = [int(v) for v in spatial_shape]
        self.batch_size = batch_size
        self.indice_dict = {} if indice_dict is None else indice_dict
        self.grid = grid
        self.voxel_num = voxel_num
        self.benchmark = benchmark
        self.benchmark_record = {}
        self.force_algo = force_algo
        self.int8_scale = None
        self._set = None  # voxconv CoordinateSet of `indices` (made on first use)
        self._src = None  # the indices tensor _set was made for

    @classmethod
    def _make(cls, features, coord_set, spatial_shape, batch_size, indice_dict, like):
        """A tensor over a voxconv coordinate set (no checks: made by a layer)."""
        t = object.__new__(cls)
        t._features = features
        t.indices = coord_set.coords
        t.spatial_shape = spatial_shape
        t.batch_size = batch_size
        t.indice_dict = indice_dict
        t.grid, t.voxel_num = like.grid, like.voxel_num
        t.benchmark, t.benchmark_record = like.benchmark, like.benchmark_record
        t.force_algo, t.int8_scale = like.force_algo, like.int8_scale
        t._set = coord_set
        t._src = coord_set.coords
        return t

    def _coordinate_set(self):
        s = self._set
        if s is None or self._src is not self.indices:
            # user-made (or replaced) indices: a new voxconv coordinate
            # manager (add() converts and packs them where needed)
            mgr = CoordinateManager(self._features.device)
            s = self._set = mgr.add(self.indices, _UNIT)
            self._src = self.indices
        return s

    def __repr__(self):
        return f"SparseConvTensor[shape={tuple(self._features.shape)}]"

    @property
    def features(self):
        return self._features

    @features.setter
    def features(self, val):
        raise ValueError("you can't set feature directly, use 'x = x.replace_feature("
                         "your_new_feature)' to generate new SparseConvTensor instead.")

    @property
    def is_quantized(self):
        return False

    @property
    def spatial_size(self):
        return self.spatial_shape[0] * self.spatial_shape[1] * self.spatial_shape[2]

    def replace_feature(self, feature):
        """A new tensor with these indices (and indice_dict) and new features."""
        t = object.__new__(SparseConvTensor)
        t.__dict__.update(self.__dict__)
        t._features = feature
        return t

    def shadow_copy(self):
        t = object.__new__(SparseConvTensor)
        t.__dict__.update(self.__dict__)
        return t

    def minus(self):
        return self.replace_feature(-self.features)

    def find_indice_pair(self, key):
        if key is None:
            return None
        return self.indice_dict.get(key)

    def select_by_index(self, valid_indices):
        t = self.shadow_copy()
        t.indices = self.indices[valid_indices]
        t._features = self.features[valid_indices]
        t.indice_dict = {}
        t._set = t._src = None
        return t

    def dense(self, channels_first=True):
        """``[B, C, *spatial_shape]`` (``[B, *spatial_shape, C]`` with
        channels_first=False), differentiable w.r.t. features."""
        f = self._features
        out = f.new_zeros([self.batch_size] + list(self.spatial_shape) + [f.shape[1]])
        if f.shape[0]:
            idx = self.indices.to(f.device).long()
            out = out.index_put((idx[:, 0], idx[:, 1], idx[:, 2], idx[:, 3]), f)
        if not channels_first:
            return out
        return out.permute(0, 4, 1, 2, 3).contiguous()

    @classmethod
    def from_dense(cls, x):
        """From a channels-last dense tensor ``[B, D0, D1, D2, C]`` (its
        non-zero sites)."""
        x_sp = x.to_sparse(x.dim() - 1)
        indices = x_sp.indices().permute(1, 0).contiguous().int()
        return cls(x_sp.values(), indices, list(x_sp.shape[1:-1]), x_sp.shape[0])

    def _other_features(self, other):
        assert isinstance(other, (SparseConvTensor, torch.Tensor))
        return other if isinstance(other, torch.Tensor) else other.features

    def __add__(self, other):
        return self.replace_feature(self.features + self._other_features(other))

    __radd__ = __add__

    def __iadd__(self, other):
        self._features = self._features + self._other_features(other)
        return self


# ---- modules -------------------------------------------------------------------

class SparseModule(nn.Module):
    """Base of the modules that take a SparseConvTensor in SparseSequential."""

    def __init__(self, name=None):
        super().__init__()
        self.name = name
        self._sparse_unique_name = ""


class SparseBatchNorm(nn.BatchNorm1d):
    def forward(self, input):
        if isinstance(input, SparseConvTensor):
            return input.replace_feature(super().forward(input.features))
        return super().forward(input)


class SparseSyncBatchNorm(nn.SyncBatchNorm):
    def forward(self, input):
        if isinstance(input, SparseConvTensor):
            return input.replace_feature(super().forward(input.features))
        return super().forward(input)


class SparseReLU(nn.ReLU):
    def forward(self, input):
        if isinstance(input, SparseConvTensor):
            return input.replace_feature(super().forward(input.features))
        return super().forward(input)


class SparseIdentity(nn.Identity):
    def forward(self, input):
        if isinstance(input, SparseConvTensor):
            return input.replace_feature(super().forward(input.features))
        return super().forward(input)


_SPCONV_MODULES = (SparseModule, SparseBatchNorm, SparseReLU)


def is_spconv_module(module):
    return isinstance(module, _SPCONV_MODULES)


def is_sparse_conv(module):
    return isinstance(module, SparseConvolution)


def assign_name_for_sparse_modules(module):
    for k, n in module.named_modules():
        if isinstance(n, SparseModule):
            n._sparse_unique_name = k


class SparseSequential(SparseModule):
    """spconv's sequential container: sparse modules (SparseModule and its
    subclasses) get the SparseConvTensor; any other module (BatchNorm1d,
    ReLU, Dropout, Identity, ...) is applied to its features (skipped on
    an empty tensor, as in spconv). Built from modules, an OrderedDict or
    keyword arguments."""

    def __init__(self, *args, **kwargs):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for idx, module in enumerate(args):
                self.add_module(str(idx), module)
        for name, module in kwargs.items():
            if name in self._modules:
                raise ValueError("name exists.")
            self.add_module(name, module)

    def __getitem__(self, idx):
        if not (-len(self) <= idx < len(self)):
            raise IndexError(f"index {idx} is out of range")
        if idx < 0:
            idx += len(self)
        return list(self._modules.values())[idx]

    def __len__(self):
        return len(self._modules)

    def add(self, module, name=None):
        if name is None:
            name = str(len(self._modules))
            if name in self._modules:
                raise KeyError("name exists")
        self.add_module(name, module)

    def forward(self, input):
        for module in self._modules.values():
            if isinstance(module, _SPCONV_MODULES):  # is_spconv_module, inline
                input = module(input)
            elif isinstance(input, SparseConvTensor):
                if input.indices.shape[0] != 0:
                    input = input.replace_feature(module(input.features))
            else:
                input = module(input)
        return input


class Identity(nn.Module):
    def forward(self, input):
        return input

    def input_spatial_size(self, out_size):
        return out_size


class ToDense(SparseModule):
    """SparseConvTensor -> dense ``[B, C, D0, D1, D2]``."""

    def forward(self, x):
        return x.dense()


class RemoveGrid(SparseModule):
    def forward(self, x):
        x.grid = None
        return x


class JoinTable(SparseModule):
    def forward(self, input):
        return input[0].replace_feature(torch.cat([i.features for i in input], 1))


class AddTable(SparseModule):
    def forward(self, input):
        f = input[0].features
        for i in input[1:]:
            f = f + i.features
        return input[0].replace_feature(f)


class ConcatTable(SparseModule):
    def forward(self, input):
        return [module(input) for module in self._modules.values()]

    def add(self, module):
        self._modules[str(len(self._modules))] = module
        return self


def _with_key(indice_dict, key, data):
    if key is None:
        return indice_dict
    assert key not in indice_dict, f"your indice key {key} already exists in this sparse tensor."
    d = indice_dict.copy()
    d[key] = data
    return d


class SparseConvolution(SparseModule):
    """spconv's ``SparseConvolution`` for ndim = 3 (see the module doc).
    ``weight``: ``[out_channels, k0, k1, k2, in_channels]``; ``bias``:
    ``[out_channels]`` or None."""

    def __init__(self, ndim, in_channels, out_channels, kernel_size=3, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, subm=False, output_padding=0,
                 transposed=False, inverse=False, indice_key=None, algo=None,
                 fp32_accum=None, record_voxel_count=False, act_type=None, act_alpha=0,
                 act_beta=0, large_kernel_fast_algo=False, name=None, device=None,
                 dtype=None):
        super().__init__(name=name)
        if ndim != 3:
            raise NotImplementedError("voxconv.compat.spconv: only 3-D convolutions")
        assert groups == 1, "don't support groups for now"
        self.ndim = ndim
        self.in_channels, self.out_channels = int(in_channels), int(out_channels)
        self.kernel_size = _expand3(kernel_size, "kernel_size")
        self.stride = _expand3(stride, "stride")
        self.padding = _expand3(padding, "padding")
        self.dilation = _expand3(dilation, "dilation")
        self.output_padding = _expand3(output_padding, "output_padding")
        kv = self.kernel_size[0] * self.kernel_size[1] * self.kernel_size[2]
        self.conv1x1 = kv == 1
        if not subm:
            self.conv1x1 &= self.stride == [1, 1, 1]
            if self.conv1x1:
                assert self.padding == [0, 0, 0], "padding must be zero for 1x1 conv (k=1,s=1)"
        self.groups = groups
        self.subm, self.transposed, self.inverse = bool(subm), bool(transposed), bool(inverse)
        self.indice_key = indice_key
        self.algo, self.fp32_accum = algo, fp32_accum
        self.record_voxel_count = record_voxel_count
        self.act_type, self.act_alpha, self.act_beta = act_type, act_alpha, act_beta
        self._ks, self._st = tuple(self.kernel_size), tuple(self.stride)
        self._dl, self._pd = tuple(self.dilation), tuple(self.padding)
        self._K = kv
        fk = {"device": device, "dtype": dtype}
        if kv > 1:
            # spconv's shape [out, k0, k1, k2, in] over voxconv's memory
            # layout [K, in, out]: the library reads the parameter itself
            # (a view, no copy per call, gradients land in place); state
            # dicts, copy_ and in-place initialisers see spconv's shape.
            base = torch.zeros(kv, self.in_channels, self.out_channels, **fk)
            w = base.view(*self.kernel_size, self.in_channels,
                          self.out_channels).permute(4, 0, 1, 2, 3)
        else:  # spconv's 1x1 reads the storage as [in, out]: keep its layout
            w = torch.zeros(self.out_channels, *self.kernel_size, self.in_channels, **fk)
        self.weight = nn.Parameter(w)
        if bias:
            self.bias = nn.Parameter(torch.zeros(self.out_channels, **fk))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        # spconv's: kaiming-uniform (a = sqrt(5)) with fan_in = in * K
        fan_in = self.in_channels * self._K
        gain = _init.calculate_gain("leaky_relu", math.sqrt(5))
        bound = math.sqrt(3.0) * gain / math.sqrt(fan_in)
        with torch.no_grad():
            self.weight.uniform_(-bound, bound)
        if self.bias is not None:
            b = 1 / math.sqrt(fan_in)
            _init.uniform_(self.bias, -b, b)

    def extra_repr(self):
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, " \
            f"stride={self.stride}"
        if self.padding != [0, 0, 0]:
            s += f", padding={self.padding}"
        if self.dilation != [1, 1, 1]:
            s += f", dilation={self.dilation}"
        if self.output_padding != [0, 0, 0]:
            s += f", output_padding={self.output_padding}"
        if self.bias is None:
            s += ", bias=False"
        if self.indice_key is not None:
            s += f", indice_key={self.indice_key!r}"
        return s

    def _layout(self):
        """spconv's [out, k0, k1, k2, in] -> the library's [K, in, out]."""
        lay = self.__dict__.get("_lay")
        if lay is None:
            lay = self._lay = _ops.PermutedLayout(
                (1, 2, 3, 4, 0), (self.out_channels, *self._ks, self.in_channels),
                (self._K, self.in_channels, self.out_channels))
        return lay

    def _map(self, input):
        """(kmap, out_set, out_spatial_shape, indice_dict) as spconv resolves
        them (see the module doc)."""
        spatial_shape = input.spatial_shape
        key = self.indice_key
        datas = input.indice_dict.get(key) if key is not None else None
        in_set = input._coordinate_set()
        mgr = in_set.manager
        if self.inverse:
            assert datas is not None and key is not None, \
                f"SparseInverseConv3d: indice_key {key!r} not found in the input's indice_dict"
            assert datas.is_subm is False, \
                "inverse conv can only be used with standard conv and pool ops."
            if self._ks != datas.ksize and list(self._ks) != list(datas.ksize):
                raise ValueError(f"Inverse with same indice_key must have same kernel size, "
                                 f"expect {list(datas.ksize)}, this layer {self.kernel_size}")
            if spatial_shape != datas.out_spatial_shape:
                raise ValueError(f"Inverse with same indice_key must have same spatial "
                                 f"structure (spatial shape), expect "
                                 f"{datas.out_spatial_shape}, input {spatial_shape}")
            if input.indices.shape[0] != len(datas.out_set):
                raise ValueError(f"Inverse with same indice_key must have same num of "
                                 f"indices, expect {len(datas.out_set)}, input "
                                 f"{input.indices.shape[0]}")
            if datas.mode not in (KMAP_EXPANDING, _lib.KMAP_STRIDED):
                raise NotImplementedError(
                    f"SparseInverseConv3d of a transposed convolution (indice_key {key!r}) "
                    f"is not supported by voxconv")
            km, out_set = mgr.inverse_kernel_map(datas.in_set, datas.mode, datas.ksize,
                                                 datas.stride, datas.dilation, datas.padding,
                                                 datas.out_shape)
            return km, out_set, datas.spatial_shape, input.indice_dict
        if datas is not None:
            assert self.subm, "only support reuse subm indices"
            assert datas.is_subm, "only support reuse subm indices"
            # (tuples when a layer of this module registered the key: the
            # list conversions only for a hand-made IndiceData)
            if self._ks != datas.ksize and list(self._ks) != list(datas.ksize):
                raise ValueError(f"subm with same indice_key must have same kernel size, "
                                 f"expect {list(datas.ksize)}, this layer {self.kernel_size}")
            if self._dl != datas.dilation and list(self._dl) != list(datas.dilation):
                raise ValueError(f"subm with same indice_key must have same dilation, "
                                 f"expect {list(datas.dilation)}, this layer {self.dilation}")
            if spatial_shape != datas.spatial_shape:
                raise ValueError(f"subm with same indice_key must have same spatial "
                                 f"structure, expect {datas.spatial_shape}, input "
                                 f"{spatial_shape}")
            if input.indices.shape[0] != len(datas.in_set):
                raise ValueError(f"subm with same indice_key must have same num of indices, "
                                 f"expect {len(datas.in_set)}, input {input.indices.shape[0]}")
            return datas.kmap, datas.out_set, spatial_shape, input.indice_dict
        if self.subm:
            km, out_set = mgr.kernel_map(in_set, _lib.KMAP_SUBMANIFOLD, self._ks, _UNIT,
                                         self._dl)
            mode, out_shape, pad, out_ss = _lib.KMAP_SUBMANIFOLD, None, None, spatial_shape
        elif self.transposed:
            out_ss = _deconv_out_size(spatial_shape, self._ks, self._st, self._pd, self._dl,
                                      self.output_padding)
            if min(out_ss) <= 0:
                raise ValueError(f"output spatial shape {out_ss} is not positive")
            ts = in_set.tensor_stride
            if any(t % s for t, s in zip(ts, self._st)):
                # spconv has no tensor stride: give voxconv one it can divide
                in_set = mgr.add(in_set.coords, tuple(t * s for t, s in zip(ts, self._st)),
                                 register=False)
            mode, out_shape, pad = _lib.KMAP_GENERATIVE, tuple(out_ss), self._pd
            km, out_set = mgr.kernel_map(in_set, mode, self._ks, self._st, self._dl, None,
                                         pad, out_shape)
        else:
            out_ss = _conv_out_size(spatial_shape, self._ks, self._st, self._pd, self._dl)
            if min(out_ss) <= 0:
                raise ValueError(f"output spatial shape {out_ss} is not positive")
            mode, out_shape, pad = KMAP_EXPANDING, tuple(out_ss), self._pd
            km, out_set = mgr.kernel_map(in_set, mode, self._ks, self._st, self._dl, None,
                                         pad, out_shape)
        d = input.indice_dict
        if key is not None:
            d = _with_key(d, key, IndiceData(km, in_set, out_set, spatial_shape, out_ss,
                                             self.subm, self._ks, self._st, pad, self._dl,
                                             mode, out_shape))
        return km, out_set, out_ss, d

    @_ops.outside_compile
    def forward(self, input, add_input=None):
        assert input.features.shape[1] == self.in_channels, "channel size mismatch"
        if self.conv1x1:
            # spconv reads the [out, 1, 1, 1, in] storage as [in, out]
            # (reshape = view for the contiguous parameter made here)
            f = torch.mm(input.features, self.weight.reshape(self.in_channels,
                                                             self.out_channels))
            if self.bias is not None:
                f = f + self.bias
            if add_input is not None:
                f = f + add_input.features
            out = input.replace_feature(f)
            if not self.subm:
                out.spatial_shape = _conv_out_size(input.spatial_shape, self._ks, self._st,
                                                   self._pd, self._dl)
            return out
        km, out_set, out_ss, d = self._map(input)
        # The parameter as stored; its layout converts it (inside the
        # convolution's autograd node in training, no view nodes of its
        # own; a kept library view otherwise: _ops.PermutedLayout).
        feats, w, b = _autocast(input.features, self.weight, self.bias)
        y = _ops.conv(feats, w, km, *_CFG, layout=self._layout())
        if b is not None:
            y = y + b
        if add_input is not None:
            y = y + add_input.features
        return SparseConvTensor._make(y, out_set, out_ss, input.batch_size, d, input)


class SubMConv3d(SparseConvolution):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, indice_key=None, algo=None,
                 fp32_accum=None, large_kernel_fast_algo=False, name=None, **kwargs):
        super().__init__(3, in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, True, indice_key=indice_key, algo=algo,
                         fp32_accum=fp32_accum, large_kernel_fast_algo=large_kernel_fast_algo,
                         name=name, **kwargs)
        if any(k % 2 == 0 for k in self.kernel_size):
            # spconv 2.x's own index generation refuses it ("subm only
            # support odd ksize", CPU and CUDA): nothing to be compatible with
            raise NotImplementedError(
                f"voxconv.compat.spconv: SubMConv3d with an even kernel size "
                f"{list(self.kernel_size)}: spconv 2.x supports odd submanifold kernels only "
                f"(its index generation raises 'subm only support odd ksize'); use "
                f"SparseConv3d or an odd kernel")


class SparseConv3d(SparseConvolution):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, indice_key=None, algo=None,
                 fp32_accum=None, record_voxel_count=False, large_kernel_fast_algo=False,
                 name=None, **kwargs):
        super().__init__(3, in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, indice_key=indice_key, algo=algo,
                         fp32_accum=fp32_accum, record_voxel_count=record_voxel_count,
                         large_kernel_fast_algo=large_kernel_fast_algo, name=name, **kwargs)


class SparseConvTranspose3d(SparseConvolution):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, indice_key=None, algo=None,
                 fp32_accum=None, large_kernel_fast_algo=False, name=None, output_padding=0,
                 **kwargs):
        super().__init__(3, in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, transposed=True, output_padding=output_padding,
                         indice_key=indice_key, algo=algo, fp32_accum=fp32_accum,
                         large_kernel_fast_algo=large_kernel_fast_algo, name=name, **kwargs)


class SparseInverseConv3d(SparseConvolution):
    def __init__(self, in_channels, out_channels, kernel_size, indice_key, bias=True,
                 algo=None, fp32_accum=None, large_kernel_fast_algo=False, name=None,
                 **kwargs):
        super().__init__(3, in_channels, out_channels, kernel_size, bias=bias, inverse=True,
                         indice_key=indice_key, algo=algo, fp32_accum=fp32_accum,
                         large_kernel_fast_algo=large_kernel_fast_algo, name=name, **kwargs)


class _SparsePool(SparseModule):
    _pool_mode = None

    def __init__(self, kernel_size=3, stride=1, padding=0, dilation=1, indice_key=None,
                 subm=False, algo=None, record_voxel_count=False, name=None):
        super().__init__(name=name)
        self.ndim = 3
        self.kernel_size = _expand3(kernel_size, "kernel_size")
        self.stride = (list(self.kernel_size) if stride is None
                       else _expand3(stride, "stride"))
        self.padding = _expand3(padding, "padding")
        self.dilation = _expand3(dilation, "dilation")
        self.subm, self.indice_key, self.algo = bool(subm), indice_key, algo
        self.record_voxel_count = record_voxel_count

    def extra_repr(self):
        s = f"kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != [0, 0, 0]:
            s += f", padding={self.padding}"
        if self.dilation != [1, 1, 1]:
            s += f", dilation={self.dilation}"
        return s

    @_ops.outside_compile
    def forward(self, input):
        assert isinstance(input, SparseConvTensor)
        in_set = input._coordinate_set()
        mgr = in_set.manager
        ks, st, dl, pd = (tuple(self.kernel_size), tuple(self.stride), tuple(self.dilation),
                          tuple(self.padding))
        ss = input.spatial_shape
        d = input.indice_dict
        if self.subm:
            km, out_set = mgr.kernel_map(in_set, _lib.KMAP_SUBMANIFOLD, ks, _UNIT, dl)
            out_ss = ss
        else:
            out_ss = _conv_out_size(ss, ks, st, pd, dl)
            km, out_set = mgr.kernel_map(in_set, KMAP_EXPANDING, ks, st, dl, None, pd,
                                         tuple(out_ss))
            key = self.indice_key
            if key is not None and key not in d:
                d = d.copy()
                d[key] = IndiceData(km, in_set, out_set, ss, out_ss, False, ks, st, pd, dl,
                                    KMAP_EXPANDING, tuple(out_ss))
        y = _ops.pool(input.features, km, self._pool_mode)
        return SparseConvTensor._make(y, out_set, out_ss, input.batch_size, d, input)


class SparseMaxPool3d(_SparsePool):
    """Max over each output's inputs (spconv's output set: every output
    the kernel reaches)."""
    _pool_mode = _lib.POOL_MAX

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, indice_key=None,
                 algo=None, record_voxel_count=False, name=None):
        super().__init__(kernel_size, stride, padding, dilation, indice_key, False, algo,
                         record_voxel_count, name)


class SparseAvgPool3d(_SparsePool):
    """Mean over the inputs present in each output's window."""
    _pool_mode = _lib.POOL_AVG

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, indice_key=None,
                 algo=None, record_voxel_count=False, name=None):
        super().__init__(kernel_size, stride, padding, dilation, indice_key, False, algo,
                         record_voxel_count, name)


class _GlobalPool(SparseModule):
    _fn = None

    @_ops.outside_compile
    def forward(self, input):
        t = SparseTensor._wrap(input.features, input._coordinate_set())
        out = type(self)._fn(t)
        if out.shape[0] < input.batch_size:  # batch items without voxels
            out = torch.cat([out, out.new_zeros(input.batch_size - out.shape[0],
                                                out.shape[1])])
        return out


class SparseGlobalMaxPool(_GlobalPool):
    """Dense ``[B, C]``: max over each batch item's voxels."""
    _fn = staticmethod(global_max_pool)


class SparseGlobalAvgPool(_GlobalPool):
    """Dense ``[B, C]``: mean over each batch item's voxels."""
    _fn = staticmethod(global_avg_pool)


# ``import voxconv.compat.spconv.pytorch as spconv`` (spconv's own path) and
# ``from voxconv.compat.spconv import pytorch``: this module under both names.
pytorch = sys.modules[__name__]
sys.modules.setdefault(__name__ + ".pytorch", pytorch)
