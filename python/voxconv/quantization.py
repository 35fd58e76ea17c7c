"""Post-training int8 quantization of voxconv models (issue 23 item 5).

    qmodel = voxconv.quantization.quantize(model, calibration_batches)
    print(voxconv.quantization.sqnr_report(model, qmodel, batch))

``quantize`` runs the float model over the calibration batches with an
observer on the input of every :class:`voxconv.nn.SparseConv3d` /
:class:`voxconv.nn.SparseDepthwiseConv3d`, then returns a copy of the model
in which each of those layers is an int8 module
(:class:`QuantizedSparseConv3d`, :class:`QuantizedSparseDepthwiseConv3d`)
calling ``voxconv_conv_forward_int8`` / ``voxconv_depthwise_forward_int8``:

* activations: one symmetric scale per tensor, ``amax / 127``, amax from
  the observer (``"minmax"``: max |x| over all batches; ``"percentile"``:
  the ``percentile``-th percentile of |x| over all batches; ``"mse"``: the
  clipping threshold with the least expected squared quantization error,
  i.e. the best SQNR of the values seen, :class:`MSEObserver`);
* weights: one symmetric scale per output channel, ``max |w[:, :, c]| /
  127`` (depthwise ``max |w[:, c]| / 127``); a channel whose weights are all
  zero gets scale 1 (the C API refuses scales <= 0; its int8 weights are 0
  whatever the scale);
* quantization rounds half to even (``torch.round``) and clamps to
  [-127, 127] (-128 is never used, as in the library);
* a BatchNorm directly after the conv (``voxconv.nn.SparseBatchNorm``, or a
  ``torch.nn.BatchNorm1d`` inside a ``voxconv.nn.Sequential``) is folded into
  its weights and bias (with its running statistics, i.e. eval-mode BN)
  before the weights are quantized, and a ReLU directly after the conv or
  the folded BN (``voxconv.nn.SparseReLU``, or ``torch.nn.ReLU`` inside a
  ``voxconv.nn.Sequential``) moves into the library's epilogue; the folded
  modules become ``torch.nn.Identity``.

The int8 layers quantize their float input with the calibrated scale
(``round_half_even(x / x_scale)`` in float32, clamped; one pass of the
library's ``voxconv_quantize``), call the C op, and return float features
(``output="float"``; float32, or with ``out_dtype`` float16 / bfloat16
written by the library; the epilogue dequantises, adds the bias and applies
the ReLU, see include/voxconv.h for its exact rounding) or, with
``output="int8"``, have the library requantise the output to int8 with the
calibrated scale of the layer's (fused) output and return it dequantised
(``q * y_scale`` rounded to float32, then to ``out_dtype``;
``voxconv_dequantize``), so the rest of the network sees exactly what an
int8 pipeline would carry. A layer given int8 features takes them as
already quantized at its own ``x_scale`` (what an int8 pipeline carries
between layers) and skips the quantization. ``quantize(..., chain=True)``
builds such a pipeline: inside a ``torch.nn.Sequential``, a layer followed
(past fused modules and max pooling, which is exact on int8) by another
quantized layer requantises its output at that layer's ``x_scale`` and
hands the int8 features on, so neither the dequantisation nor the next
quantisation pass runs (each a full pass over the features: ~0.3 ms at C =
256 on workload A's level 0, H100); the model's float32 output keeps its
bits. Nested Sequentials count as one (blocks of conv + BN + ReLU chain
into each other), and an input-equalised layer fed by a quantized one
alone has its factor folded into that layer (``fold_equalization``).
Coordinates and kernel maps are those the float layer would use (the same
coordinate-manager cache).

The layers run where their buffers and input are: on the CPU (VNNI where
the CPU has it) or on CUDA (tensor-core int8, src/cuda/cuda_int8.cu); both
give the same bits for the same input. On CUDA the library cannot read the
scales and bias without waiting for the GPU, so a layer checks them once
with ``voxconv_quant_params_check`` when it first runs on a device (and
again after a buffer is changed in place).
"""

import copy
import ctypes
import math

import torch
from torch import nn

from . import _lib
from . import _runtime
from . import errors
from . import functional as F
from . import nn as vnn
from .tensor import SparseTensor

__all__ = [
    "MinMaxObserver", "PercentileObserver", "MSEObserver", "QuantizedSparseConv3d",
    "QuantizedSparseDepthwiseConv3d", "quantize", "sqnr_report", "SQNRReport",
    "weight_scales", "quantize_tensor", "dequantize_tensor", "fuse_conv_bn", "QMAX",
]

QMAX = 127


# ---- observers ------------------------------------------------------------------

def _scale_from_amax(amax):
    """amax / 127 as a positive finite float32 value (1.0 when amax is 0 or
    not finite: then every quantized value is 0 or the data is unusable)."""
    s = float(torch.tensor(float(amax), dtype=torch.float32) / QMAX)
    if not (math.isfinite(s) and s > 0):
        return 1.0
    return s


class MinMaxObserver:
    """Symmetric min/max observer: amax = max |x| over every batch seen."""

    def __init__(self):
        self.amax = 0.0
        self.count = 0

    def update(self, x):
        x = x.detach()
        if x.numel():
            self.amax = max(self.amax, float(x.abs().max()))
        self.count += 1

    def scale(self):
        return _scale_from_amax(self.amax)


class _AbsSamples:
    """|x| of the values of every batch seen, as float32 on the CPU: all of
    them up to ``max_samples``, then a random sample of that size in which
    every value seen so far is (about) equally likely to be kept. A batch
    of m values after N seen replaces round(max_samples m / (N + m)) kept
    values, at random places (on average), by values drawn at random from
    it: O(that many) per batch, never a shuffle of all values (that cost ~2 minutes
    of the GPU example's calibration on ten scans). The percentile and MSE
    observers choose amax from them."""

    def __init__(self, max_samples=1 << 24):
        self.max_samples = int(max_samples)
        self._values = []
        self._kept = None  # the sample, once max_samples was reached
        self._n = 0        # values seen
        self.count = 0
        self._g = torch.Generator().manual_seed(0)

    def update(self, x):
        v = x.detach().abs().reshape(-1).float().cpu()
        self.count += 1
        m = v.numel()
        if not m:
            return
        if self._kept is None and self._n + m <= self.max_samples:
            self._values.append(v)
            self._n += m
            return
        if self._kept is None:  # the first batch past the limit: fill it
            allv = torch.cat(self._values + [v])
            pick = torch.randint(len(allv), (self.max_samples,), generator=self._g)
            self._kept, self._values = allv[pick], []
            self._n += m
            return
        self._n += m
        M = self.max_samples
        k = int(round(M * m / self._n))
        if k >= M:
            self._kept = v[torch.randint(m, (M,), generator=self._g)]
        elif k:
            # slots drawn with replacement: n draws hit M (1 - (1 - 1/M)^n)
            # distinct slots on average, k for this n
            n = int(round(math.log1p(-k / M) / math.log1p(-1.0 / M)))
            slots = torch.randint(M, (n,), generator=self._g)
            self._kept[slots] = v[torch.randint(m, (n,), generator=self._g)]

    def _all(self):
        if self._kept is not None:
            return self._kept
        return torch.cat(self._values) if self._n else None

    def scale(self):
        return _scale_from_amax(self.amax)


class PercentileObserver(_AbsSamples):
    """amax = the ``percentile``-th percentile of |x| over every value of
    every batch seen (see _AbsSamples for what is kept)."""

    def __init__(self, percentile=99.99, max_samples=1 << 24):
        if not 0 < percentile <= 100:
            raise errors.InvalidArgumentError(
                f"percentile: expected a value in (0, 100], got {percentile!r}")
        super().__init__(max_samples)
        self.percentile = float(percentile)

    @property
    def amax(self):
        v = self._all()
        if v is None:
            return 0.0
        # the smallest value with at least `percentile`% of the values <= it
        k = max(1, min(len(v), math.ceil(self.percentile / 100.0 * len(v))))
        return float(torch.kthvalue(v, k).values)


class MSEObserver(_AbsSamples):
    """amax = the clipping threshold T that minimises the expected squared
    quantization error of the values seen, i.e. maximises their SQNR (the
    quantity issue 23's per-layer target is stated in). With step s = T /
    127, a value v > T is clipped (error (v - T)^2), a value below s / 2
    rounds to 0 (error v^2), any other is rounded to a step (error s^2 /
    12 on average: v's position within a step is uniform when s is many
    histogram bins wide). Evaluated on a ``bins``-bin histogram of |x| over
    [0, max |x|] (exact zeros counted apart: they cost nothing) for
    thresholds at every ``bins / candidates``-th bin edge; min/max's
    threshold (T = max |x|) is among them, so this never does worse than
    min/max by that measure. Ties go to the larger T (less clipping)."""

    def __init__(self, bins=2048, candidates=256, max_samples=1 << 24):
        if bins < 16 or candidates < 1 or candidates > bins:
            raise errors.InvalidArgumentError(
                f"MSEObserver: want bins >= 16 and 1 <= candidates <= bins, got "
                f"{bins!r}, {candidates!r}")
        super().__init__(max_samples)
        self.bins, self.candidates = int(bins), int(candidates)

    def errors_at(self, thresholds):
        """Expected sum of squared errors (float64) at each threshold, by
        the histogram model above: what amax minimises."""
        v = self._all()
        t = torch.as_tensor(thresholds, dtype=torch.float64).reshape(-1, 1)
        if v is None:
            return torch.zeros(len(t), dtype=torch.float64)
        v = v[v > 0].double()
        if not len(v):
            return torch.zeros(len(t), dtype=torch.float64)
        top = float(v.max())
        hist = torch.histc(v, self.bins, 0.0, top)
        c = (torch.arange(self.bins, dtype=torch.float64) + 0.5) * (top / self.bins)
        s = t / QMAX
        err = torch.where(c > t, (c - t) ** 2, torch.where(c < s / 2, c * c, s * s / 12))
        return (err * hist).sum(1)

    @property
    def amax(self):
        v = self._all()
        if v is None or not bool((v > 0).any()):
            return 0.0
        top = float(v.max())
        step = self.bins // self.candidates
        edges = torch.arange(self.bins, 0, -step, dtype=torch.float64) * (top / self.bins)
        err = self.errors_at(edges)  # largest threshold first: argmin takes the first tie
        return float(edges[int(torch.argmin(err))])


def _make_observer(observer, percentile):
    if observer == "minmax":
        return MinMaxObserver()
    if observer == "percentile":
        return PercentileObserver(percentile)
    if observer == "mse":
        return MSEObserver()
    raise errors.InvalidArgumentError(
        f"observer: expected 'minmax', 'percentile' or 'mse', got {observer!r}")


class ChannelMaxObserver:
    """max |x| per channel (last dimension) over every batch seen: what
    input equalisation (``quantize(..., equalize=...)``) balances."""

    def __init__(self):
        self.amax = None

    def update(self, x):
        x = x.detach()
        if not x.numel():
            return
        m = x.abs().reshape(-1, x.shape[-1]).amax(0).double().cpu()
        self.amax = m if self.amax is None else torch.maximum(self.amax, m)


def equalization_scales(x_amax, w_amax):
    """d_c = sqrt(w_amax_c / x_amax_c) per input channel (1 where either is 0
    or not finite): the layer runs on x_c d_c with weights w_c / d_c, the
    same function, and both then span sqrt(x_amax_c w_amax_c), so one
    per-tensor activation scale no longer leaves a narrow channel a few
    levels while a wide one sets it (cross-layer equalisation's balance,
    Nagel et al. 2019, applied to the layer's input). float64."""
    x = x_amax.double()
    w = w_amax.double()
    d = torch.sqrt(w / x)
    ok = (x > 0) & (w > 0) & torch.isfinite(d) & (d > 0)
    return torch.where(ok, d, torch.ones_like(d))


# ---- weights --------------------------------------------------------------------

def weight_scales(weight):
    """Per-output-channel symmetric scales (float32): ``max |w[:, :, c]| /
    127`` for a regular weight ``[K, Cin, Cout]``, ``max |w[:, c]| / 127``
    for a depthwise weight ``[K, C]``; 1.0 for an all-zero channel. On the
    weight's device; the division is done on the CPU, since torch's CUDA
    division by a scalar multiplies by its reciprocal and can differ in the
    last bit (a model quantized on the GPU would not be the CPU's)."""
    w = weight.detach().float()
    amax = w.abs().amax(dim=tuple(range(w.dim() - 1))).cpu()
    s = amax / QMAX
    return torch.where(s > 0, s, torch.ones_like(s)).contiguous().to(weight.device)


_LIB_FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _lib_convertible(x):
    """A tensor voxconv_quantize / voxconv_dequantize take as it is: 2-D
    (features), contiguous, on the CPU or a CUDA device."""
    return x.dim() == 2 and x.is_contiguous() and x.device.type in ("cpu", "cuda")


def _convert(name, x, y, scale):
    """y = name(x, scale): voxconv_quantize / voxconv_dequantize."""
    fx, fy = _runtime.feats_struct(x, "x"), _runtime.feats_struct(y, "y")
    _runtime.handle_for_tensor(x).call(name, ctypes.byref(fx), ctypes.c_float(scale),
                                       ctypes.byref(fy))
    return y


def _float_scale(scale):
    """The per-tensor scale as the library takes it (binary32), checked."""
    s = float(scale)
    if not (math.isfinite(s) and s > 0):
        raise errors.InvalidArgumentError(
            f"scale: expected a finite value > 0, got {scale!r}")
    return s


def quantize_tensor(x, scale):
    """int8 ``clamp(round_half_even(x / scale), -127, 127)``; ``scale`` a
    number (per tensor) or a tensor broadcasting against ``x`` (the last
    dimension: per output channel). Computed in float32. Feature tensors
    (2-D, contiguous, float32 / float16 / bfloat16) with a per-tensor scale
    go through the library's one-pass ``voxconv_quantize`` (same bits; a NaN
    becomes 0); anything else through torch."""
    x = x.detach()  # no gradient: the rounding is flat almost everywhere
    if (not isinstance(scale, torch.Tensor) and x.dtype in _LIB_FLOATS
            and _lib_convertible(x)):
        return _convert("voxconv_quantize", x,
                        torch.empty(x.shape, dtype=torch.int8, device=x.device),
                        _float_scale(scale))
    return _quantize_tensor_torch(x, scale)


def _quantize_tensor_torch(x, scale):
    """quantize_tensor in torch operations (the reference the library's
    one-pass path is tested against; five passes over float32 copies)."""
    x = x.detach().float()
    if isinstance(scale, torch.Tensor):
        scale = scale.to(device=x.device, dtype=torch.float32)
    else:
        scale = torch.tensor(float(scale), dtype=torch.float32, device=x.device)
    return torch.round(x / scale).clamp_(-QMAX, QMAX).to(torch.int8)


def dequantize_tensor(q, scale, dtype=torch.float32):
    """``(q.float() * scale).to(dtype)`` for int8 ``q`` and a per-tensor
    ``scale``: the product rounded to float32, then to ``dtype`` (float32,
    float16 or bfloat16). Feature tensors go through the library's one-pass
    ``voxconv_dequantize`` (same bits)."""
    if q.dtype != torch.int8:
        raise errors.InvalidArgumentError(f"dequantize_tensor: expected int8, got {q.dtype}")
    s = _float_scale(scale)
    q = q.detach()
    if dtype in _LIB_FLOATS and _lib_convertible(q):
        return _convert("voxconv_dequantize", q,
                        torch.empty(q.shape, dtype=dtype, device=q.device), s)
    return (q.float() * torch.tensor(s, dtype=torch.float32, device=q.device)).to(dtype)


def fuse_conv_bn(conv, bn):
    """A copy of float conv ``conv`` (SparseConv3d / SparseDepthwiseConv3d)
    with the eval-mode BatchNorm ``bn`` (torch.nn.BatchNorm1d, or a
    SparseBatchNorm) folded in: ``w'[..., c] = w[..., c] * g_c``, ``b' = (b -
    mean) * g_c + beta`` with ``g_c = gamma / sqrt(var + eps)`` (computed in
    float64, stored in the conv's dtype)."""
    if isinstance(bn, vnn.SparseBatchNorm):
        bn = bn.module
    if bn.running_mean is None or bn.running_var is None:
        raise errors.InvalidArgumentError(
            "fuse_conv_bn: the BatchNorm has no running statistics "
            "(track_running_stats=False); it cannot be folded")
    fused = copy.deepcopy(conv)
    dt = conv.weight.dtype
    mean = bn.running_mean.detach().double()
    var = bn.running_var.detach().double()
    g = 1.0 / torch.sqrt(var + bn.eps)
    beta = torch.zeros_like(mean)
    if bn.weight is not None:
        g = g * bn.weight.detach().double()
        beta = bn.bias.detach().double()
    w = conv.weight.detach().double() * g  # broadcasts over the last (output) dim
    b = conv.bias.detach().double() if conv.bias is not None else torch.zeros_like(mean)
    b = (b - mean) * g + beta
    with torch.no_grad():
        fused.weight = nn.Parameter(w.to(dt), requires_grad=conv.weight.requires_grad)
        fused.bias = nn.Parameter(b.to(dt), requires_grad=conv.weight.requires_grad)
    return fused


# ---- the int8 modules -----------------------------------------------------------

_GEOMETRY_ATTRS = ("kernel_size", "stride", "dilation", "transposed", "generative", "_geo",
                   "padding", "out_shape", "expand", "inverse")


class _QuantizedConvBase(nn.Module):
    _depthwise = False
    _c_name = "voxconv_conv_forward_int8"

    def __init__(self, float_conv, x_scale, relu=False, y_scale=None,
                 out_dtype=torch.float32):
        super().__init__()
        self.out_dtype = _checked_out_dtype(out_dtype)
        for a in _GEOMETRY_ATTRS:
            setattr(self, a, getattr(float_conv, a))
        w = float_conv.weight.detach().float().contiguous()
        ws = weight_scales(w)
        self.register_buffer("weight", quantize_tensor(w, ws).contiguous())
        self.register_buffer("weight_scale", ws)
        b = float_conv.bias
        self.register_buffer("bias", None if b is None else b.detach().float().contiguous())
        self.x_scale = float(x_scale)
        self.relu = bool(relu)
        self.y_scale = None if y_scale is None else float(y_scale)
        # int8 output handed on as int8 features, not dequantised: set by
        # quantize(chain=True) when the next layer is quantized and y_scale
        # is that layer's x_scale
        self.int8_out = False
        self.float_tail = None  # name, in the float model, of the module whose output this is
        self.float_name = None
        self.fused = "-"  # what was folded in: "bn", "relu", "bn+relu" or "-"
        # per input channel: float input multiplied by it before quantization
        # (input equalisation, quantize(equalize=...)); the weights were
        # divided by it
        self.register_buffer("in_scale", None)
        # after an equalisation fold (quantize, _fold_equalization): the
        # per-channel factor this layer's output carries (the next layer's
        # d), and the one its input arrives with (its own d, applied by the
        # layer before); forward does not read them, sqnr_report does
        self.register_buffer("output_factor", None)
        self.register_buffer("input_factor", None)
        if not (math.isfinite(self.x_scale) and self.x_scale > 0):
            raise errors.InvalidArgumentError(
                f"x_scale: expected a finite value > 0, got {x_scale!r}")

    def forward(self, input, out_coords=None):
        if not isinstance(input, SparseTensor):
            raise TypeError(f"expected a voxconv.SparseTensor, got {type(input).__name__}")
        feats = input.feats
        if feats.shape[1] != self.weight.shape[-2 if not self._depthwise else -1]:
            raise errors.ShapeMismatchError(
                f"{type(self).__name__}: input has {feats.shape[1]} channels, the layer "
                f"expects {self.weight.shape[-2 if not self._depthwise else -1]}")
        if self._geo is None:
            km, out_set = F._geometry(input, self.kernel_size, self.stride, self.dilation,
                                      self.transposed, self.generative, out_coords)
        else:
            km, out_set = F._geometry_ext(input, self.kernel_size, self.stride,
                                          self.dilation, self.transposed, self.generative,
                                          out_coords, self._geo)
        # int8 features are taken as quantized already, at this layer's
        # x_scale (an int8 pipeline's own tensors); float ones are quantized
        in_scale = getattr(self, "in_scale", None)
        if feats.dtype == torch.int8 and in_scale is not None:
            raise errors.InvalidArgumentError(
                f"{type(self).__name__}: an input-equalised layer takes float features "
                f"(int8 ones were not quantized with its per-channel scales)")
        if in_scale is not None:
            feats = feats * in_scale.to(feats.dtype)
        qx = (feats.contiguous() if feats.dtype == torch.int8
              else quantize_tensor(feats, self.x_scale).contiguous())
        cout = self.weight.shape[-1]
        # modules pickled before out_dtype existed return float32
        out_dtype = getattr(self, "out_dtype", torch.float32)
        if qx.is_cuda:
            self._check_on_device(qx, cout)
        w, layout = self._weight_for(qx)
        y = run_int8(km, qx, w, self.weight_scale, self.bias, self.x_scale,
                     self.relu, self.y_scale, self._depthwise, cout, out_dtype, layout)
        # modules pickled before int8_out existed dequantise
        if y.dtype == torch.int8 and not getattr(self, "int8_out", False):
            y = dequantize_tensor(y, self.y_scale, out_dtype)
        return SparseTensor._wrap(y, out_set)

    def _weight_for(self, qx):
        """(weights, layout) the op reads. On CUDA the regular conv's weights
        in the KOI layout ([K, Cout, Cin], voxconv.h "Weight layout"), made
        once per device and version of ``weight``: the C op then reads them
        in place instead of copying them on every call. Elsewhere, and for
        depthwise, ``weight`` as stored (KIO). ``weight`` created under
        torch.inference_mode() has no version counter: an in-place change
        of it is not noticed (replace the buffer instead)."""
        w = self.weight
        if self._depthwise or not qx.is_cuda:
            return w, _lib.INT8_WEIGHTS_KIO
        key = (w.device, w.data_ptr(), None if w.is_inference() else w._version)
        cached = getattr(self, "_koi", None)
        if cached is None or cached[0] != key:
            cached = (key, w.permute(0, 2, 1).contiguous())
            self._koi = cached
        return cached[1], _lib.INT8_WEIGHTS_KOI

    def __getstate__(self):
        # the KOI copy is a cache (_weight_for): not saved, not deep-copied
        state = self.__dict__.copy()
        state.pop("_koi", None)
        return state

    def _check_on_device(self, qx, cout):
        """The scales and bias checked once per device and buffer version
        (a CUDA op reads them without checking them). Buffers created under
        torch.inference_mode() have no version counter: an in-place change
        of those is not noticed (replace the buffer instead)."""
        def version(t):  # inference tensors keep no version counter
            return None if t is None else (t.data_ptr(),
                                           None if t.is_inference() else t._version)
        b = self.bias
        key = (qx.device, version(self.weight_scale), version(b), self.x_scale,
               self.y_scale, self.relu)
        if getattr(self, "_checked", None) != key:
            check_params(qx, self.weight_scale, b, self.x_scale, self.relu, self.y_scale,
                         cout)
            self._checked = key

    def extra_repr(self):
        s = (f"kernel_size={self.kernel_size}, stride={self.stride}, x_scale={self.x_scale:.6g}"
             f", relu={self.relu}")
        if self.transposed:
            s += ", transposed=True"
        if self.generative:
            s += ", generative=True"
        if self.y_scale is not None:
            s += f", y_scale={self.y_scale:.6g} (int8 output"
            s += ", handed on as int8)" if getattr(self, "int8_out", False) else ")"
        out_dtype = getattr(self, "out_dtype", torch.float32)
        if out_dtype != torch.float32:
            s += f", out_dtype={out_dtype}"
        if getattr(self, "in_scale", None) is not None:
            s += ", input equalised"
        return s


# float outputs of the epilogue (voxconv.h step 5: v rounded to nearest even)
_FLOAT_OUT = {torch.float32: _lib.DTYPE_F32, torch.float16: _lib.DTYPE_F16,
              torch.bfloat16: _lib.DTYPE_BF16}


def _checked_out_dtype(out_dtype):
    if out_dtype not in _FLOAT_OUT:
        raise errors.InvalidArgumentError(
            f"out_dtype: expected torch.float32, torch.float16 or torch.bfloat16, "
            f"got {out_dtype!r}")
    return out_dtype


def _quant_params(w_scale, bias, x_scale, relu, y_scale, w_layout=_lib.INT8_WEIGHTS_KIO):
    """voxconv_quant_params_t over the float32 tensors w_scale and bias."""
    return _lib.QuantParams(x_scale, w_scale.data_ptr(),
                            bias.data_ptr() if bias is not None else None, int(bool(relu)),
                            y_scale if y_scale is not None else 0.0, w_layout)


def run_int8(km, qx, qw, w_scale, bias, x_scale, relu, y_scale, depthwise, cout,
             out_dtype=torch.float32, w_layout=_lib.INT8_WEIGHTS_KIO):
    """One call of voxconv_conv_forward_int8 / voxconv_depthwise_forward_int8
    through kernel map ``km``: qx int8 [n_in, cin], qw int8 [K, cin, cout]
    (depthwise [K, C]; with ``w_layout`` _lib.INT8_WEIGHTS_KOI the regular
    conv's [K, cout, cin]), w_scale / bias float32 [cout] on the same device.
    Returns [n_out, cout] in ``out_dtype`` (float32, float16 or bfloat16),
    or int8 when y_scale is given."""
    dt = torch.int8 if y_scale is not None else out_dtype
    y = torch.empty((km.n_out, cout), dtype=dt, device=qx.device)
    fx = _runtime.feats_struct(qx, "int8 features")
    fy = _runtime.feats_struct(y, "output")
    if depthwise:
        fw = _runtime.feats_struct(qw, "int8 depthwise weight")
        name = "voxconv_depthwise_forward_int8"
    else:
        fw = _runtime.weights_struct(qw, "int8 weight")
        if w_layout == _lib.INT8_WEIGHTS_KOI:  # the struct's shape is [K][cin][cout]
            fw.cin, fw.cout = fw.cout, fw.cin
        name = "voxconv_conv_forward_int8"
    qp = _quant_params(w_scale, bias, x_scale, relu, y_scale, w_layout)
    h = _runtime.handle_for_tensor(qx)
    km.use_on(h)
    h.call(name, ctypes.c_void_p(km.ptr), ctypes.byref(fx), ctypes.byref(fw),
           ctypes.byref(qp), ctypes.byref(fy), None)
    return y


def check_params(qx, w_scale, bias, x_scale, relu, y_scale, cout):
    """voxconv_quant_params_check for parameters in device memory (it
    copies them to the host, so it waits for the GPU): what the op itself
    checks on the CPU only."""
    qp = _quant_params(w_scale, bias, x_scale, relu, y_scale)
    h = _runtime.handle_for_tensor(qx)
    h.call("voxconv_quant_params_check", ctypes.byref(qp), int(cout),
           _lib.DTYPE_I8 if y_scale is not None else _lib.DTYPE_F32)


class QuantizedSparseConv3d(_QuantizedConvBase):
    """int8 SparseConv3d: buffers ``weight`` (int8 [K, Cin, Cout]),
    ``weight_scale`` (float32 [Cout]), ``bias`` (float32 [Cout] or None);
    ``x_scale`` (float), ``relu`` (bool), ``y_scale`` (None: float32 output;
    a float: int8 output, returned dequantised)."""


class QuantizedSparseDepthwiseConv3d(_QuantizedConvBase):
    """int8 SparseDepthwiseConv3d: ``weight`` int8 [K, C], per-channel
    ``weight_scale``, as QuantizedSparseConv3d."""
    _depthwise = True
    _c_name = "voxconv_depthwise_forward_int8"


# ---- finding the layers and what follows them -----------------------------------

_CONVS = (vnn.SparseConv3d, vnn.SparseDepthwiseConv3d)


def _is_bn(m, parent):
    if isinstance(m, vnn.SparseBatchNorm):
        return isinstance(m.module, nn.BatchNorm1d)
    return isinstance(parent, vnn.Sequential) and type(m) is nn.BatchNorm1d


def _is_relu(m, parent):
    if isinstance(m, vnn.SparseReLU):
        return True
    return isinstance(parent, vnn.Sequential) and type(m) is nn.ReLU


def _plan(model):
    """[(conv name, bn name or None, relu name or None)] for every float
    conv layer of `model` (names as in named_modules)."""
    plan, seen = [], set()
    for pname, parent in model.named_modules():
        if not isinstance(parent, nn.Sequential):
            continue
        kids = list(parent.named_children())
        for i, (cname, child) in enumerate(kids):
            if not isinstance(child, _CONVS):
                continue
            full = f"{pname}.{cname}" if pname else cname
            bn = relu = None
            j = i + 1
            if j < len(kids) and _is_bn(kids[j][1], parent):
                bn = f"{pname}.{kids[j][0]}" if pname else kids[j][0]
                j += 1
            if j < len(kids) and _is_relu(kids[j][1], parent):
                relu = f"{pname}.{kids[j][0]}" if pname else kids[j][0]
            plan.append((full, bn, relu))
            seen.add(full)
    for name, m in model.named_modules():
        if isinstance(m, _CONVS) and name not in seen:
            plan.append((name, None, None))
    return plan


def _set_module(model, name, new):
    parent_name, _, attr = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, attr, new)


def _feats(out):
    return out.feats if isinstance(out, SparseTensor) else out


def _run(model, batch):
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    if isinstance(batch, dict):
        return model(**batch)
    return model(batch)


# ---- quantize ---------------------------------------------------------------------

def _leaves(seq, expanded):
    """seq's modules in call order with nested torch.nn.Sequentials
    expanded (a Sequential only composes its children, so a nested one's
    last module feeds the outer one's next); the ids of the nested ones
    go into `expanded`."""
    out = []
    for kid in seq.children():
        if isinstance(kid, nn.Sequential):
            expanded.add(id(kid))
            out.extend(_leaves(kid, expanded))
        else:
            out.append(kid)
    return out


def _adjacent_pairs(qmodel):
    """(p, e) for quantized layers p, e of ``qmodel`` where, inside a
    torch.nn.Sequential (nested ones expanded), p is followed by e past
    Identity modules (fused BN / ReLU) and max pooling only: e reads p's
    output and nothing else does. A layer instance used at more than one
    place of the model is left out (its output may go elsewhere too).
    Each pair once, in model order: a nested Sequential is only walked as
    part of the outermost one (named_modules lists outer ones first)."""
    uses = {}
    for _n, m in qmodel.named_modules(remove_duplicate=False):
        uses[id(m)] = uses.get(id(m), 0) + 1
    pairs, expanded = [], set()
    for _name, parent in qmodel.named_modules():
        if not isinstance(parent, nn.Sequential) or id(parent) in expanded:
            continue
        kids = _leaves(parent, expanded)
        for i, kid in enumerate(kids):
            if not isinstance(kid, _QuantizedConvBase) or uses[id(kid)] > 1:
                continue
            j = i + 1
            while j < len(kids) and isinstance(kids[j], (nn.Identity, vnn.SparseMaxPool3d)):
                j += 1
            if (j < len(kids) and isinstance(kids[j], _QuantizedConvBase)
                    and uses[id(kids[j])] == 1):
                pairs.append((kid, kids[j]))
    return pairs


def _fold_equalization(qmodel):
    """For each adjacent pair (p, e) whose e is input-equalised with float
    output from p: p's output channel c is multiplied by e's d_c instead
    (p's weight scale and bias times d_c: its epilogue then computes (acc
    x_scale w_c + b_c) d_c up to float32 rounding, and ReLU and max pooling
    commute with a positive per-channel factor), and e takes it as it comes
    (in_scale cleared, x_scale unchanged: it was calibrated on x d). e then
    costs no multiply pass, and chain may hand it int8."""
    for p, e in _adjacent_pairs(qmodel):
        d = getattr(e, "in_scale", None)
        if d is None or p.y_scale is not None:
            continue
        dd = d.double().to(p.weight_scale.device)
        p.weight_scale = (p.weight_scale.double() * dd).float().contiguous()
        if p.bias is not None:
            p.bias = (p.bias.double() * dd).float().contiguous()
        p.output_factor = d.clone()
        e.input_factor, e.in_scale = d, None


def _chain(qmodel):
    """For each adjacent pair (p, e) (see _adjacent_pairs) whose e takes
    int8 (not input-equalised): p hands e int8 features at e's x_scale
    (y_scale = its x_scale, int8_out). Only e reads p's output, so nothing
    else sees int8."""
    for p, e in _adjacent_pairs(qmodel):
        if getattr(e, "in_scale", None) is None:
            p.y_scale = e.x_scale
            p.int8_out = True


def _layer_sets(plan, keep_float, equalize):
    """quantize's keep_float and equalize as sets of layer names (a single
    name may be given as a string), each a conv layer of the plan and
    none in both."""
    names = {name for name, _b, _r in plan}
    sets = []
    for arg, given in (("keep_float", keep_float), ("equalize", equalize)):
        given = {given} if isinstance(given, str) else set(given)
        unknown = given - names
        if unknown:
            raise errors.InvalidArgumentError(
                f"{arg}: not a conv layer of the model: {', '.join(sorted(unknown))}")
        sets.append(given)
    both = sets[0] & sets[1]
    if both:
        raise errors.InvalidArgumentError(
            f"equalize: {', '.join(sorted(both))} is kept float (keep_float)")
    return sets


def _equalized(conv, obs):
    """(a copy of conv with w_c / d_c, d, the activation scale of x d) for
    input equalisation from a ChannelMaxObserver of conv's input."""
    w = conv.weight.detach().double()
    depthwise = isinstance(conv, vnn.SparseDepthwiseConv3d)
    # input channels: [K, C] (depthwise) or [K, cin, cout]
    # the observer keeps its maxima on the CPU; the weight may be on CUDA
    w_amax = (w.abs().amax(0) if depthwise else w.abs().amax((0, 2))).cpu()
    x_amax = obs.amax if obs.amax is not None else torch.zeros_like(w_amax)
    # rounded to float32 first: the layer multiplies its input by that value
    d = equalization_scales(x_amax, w_amax).float()
    dd = d.double().to(w.device)
    eq = copy.deepcopy(conv)
    with torch.no_grad():
        scaled = w / (dd if depthwise else dd[:, None])
        eq.weight = nn.Parameter(scaled.to(conv.weight.dtype),
                                 requires_grad=conv.weight.requires_grad)
    return eq, d, _scale_from_amax(float((x_amax * d.double()).max()))


def quantize(model, calibration_batches, *, observer="minmax", percentile=99.99,
             output="float", out_dtype=torch.float32, chain=False, keep_float=(),
             equalize=(), fold_equalization=True):
    """Calibrates on ``calibration_batches`` (an iterable of model inputs: a
    SparseTensor, or a tuple / dict of arguments) and returns a new model
    (a deep copy, in eval mode) whose SparseConv3d / SparseDepthwiseConv3d
    layers are int8 modules, with following BatchNorm / ReLU fused (see the
    module doc). ``model`` itself is left unchanged (its train/eval mode
    included). ``out_dtype`` (torch.float32, float16 or bfloat16): the
    layers' output features; with ``output="float"`` the library's epilogue
    writes them directly (half the bytes of float32 for the half types).
    ``chain=True``: a layer whose output goes (inside a torch.nn.Sequential,
    nested ones expanded, past fused modules and max pooling) straight
    into another quantized
    layer has the library requantise it at that layer's ``x_scale`` and
    hands it on as int8 features (no dequantise, no quantise: an int8
    pipeline); with float32 outputs elsewhere the model's output has the
    same bits as with ``chain=False`` (the epilogue rounds v / x_scale as
    voxconv_quantize does). ``keep_float``: names (as in
    ``named_modules()``) of conv layers left in floating point, with their
    BatchNorm and ReLU, as deployments often keep the first layer, whose
    few input channels (coordinates, intensity) share one per-tensor scale
    badly. ``equalize``: names of conv layers whose input is equalised
    instead: per input channel c, max |x_c| (over the calibration batches)
    and max |w_c| (after the BN fold) give d_c =
    :func:`equalization_scales`; the int8 layer stores w_c / d_c and
    multiplies its float input by d (one elementwise pass: meant for
    narrow inputs such as a first layer's), and its activation scale is
    max_c(max |x_c| d_c) / 127 (min/max whatever ``observer`` says). Such a
    layer takes float input only, so ``chain`` never hands it int8 --
    unless the factor is folded: ``fold_equalization`` (default True, with
    ``output="float"``) moves an equalised layer's d into the quantized
    layer before it when that one's output goes to it alone (inside a
    torch.nn.Sequential, nested ones expanded, past fused modules and max
    pooling): that layer's weight scales and bias are multiplied by d, the
    equalised layer drops its multiply pass and may be chained into
    (``input_factor`` / ``output_factor`` record the fold for
    sqnr_report). Pass False when such a layer's output is also read
    elsewhere (a block called on its own by the model's forward)."""
    if output not in ("float", "int8"):
        raise errors.InvalidArgumentError(f"output: expected 'float' or 'int8', got {output!r}")
    _checked_out_dtype(out_dtype)  # before the calibration runs
    plan = _plan(model)
    keep_float, equalize = _layer_sets(plan, keep_float, equalize)
    plan = [p for p in plan if p[0] not in keep_float]
    mods = dict(model.named_modules())
    in_obs = {name: (ChannelMaxObserver() if name in equalize
                     else _make_observer(observer, percentile)) for name, _b, _r in plan}
    out_obs = {name: _make_observer(observer, percentile) for name, _b, _r in plan} \
        if output == "int8" else {}
    hooks = []
    for name, bn, relu in plan:
        hooks.append(mods[name].register_forward_pre_hook(
            lambda m, args, _o=in_obs[name]: _o.update(args[0].feats)))
        if output == "int8":
            tail = relu or bn or name
            hooks.append(mods[tail].register_forward_hook(
                lambda m, args, out, _o=out_obs[name]: _o.update(_feats(out))))
    was_training = model.training
    model.eval()
    n = 0
    try:
        with torch.no_grad():
            for batch in calibration_batches:
                _run(model, batch)
                n += 1
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    if n == 0:
        raise errors.InvalidArgumentError("quantize: calibration_batches is empty")

    qmodel = copy.deepcopy(model)
    qmodel.eval()
    qmods = dict(qmodel.named_modules())
    for name, bn, relu in plan:
        conv = qmods[name]
        if bn is not None:
            conv = fuse_conv_bn(conv, qmods[bn])
            _set_module(qmodel, bn, nn.Identity())
        if relu is not None:
            _set_module(qmodel, relu, nn.Identity())
        cls = (QuantizedSparseDepthwiseConv3d if isinstance(conv, vnn.SparseDepthwiseConv3d)
               else QuantizedSparseConv3d)
        y_scale = out_obs[name].scale() if output == "int8" else None
        if name in equalize:
            conv, d, x_scale = _equalized(conv, in_obs[name])
        else:
            d, x_scale = None, in_obs[name].scale()
        q = cls(conv, x_scale, relu is not None, y_scale, out_dtype)
        if d is not None:
            q.in_scale = d  # float32, the value the weights were divided by
        q.float_name, q.float_tail = name, relu or bn or name
        q.fused = "+".join(p for p, n in (("bn", bn), ("relu", relu)) if n) or "-"
        q.to(conv.weight.device)
        if not name:  # the model is the layer itself: it is replaced whole
            return q
        _set_module(qmodel, name, q)
    if output == "float" and fold_equalization:
        _fold_equalization(qmodel)
    if chain:
        _chain(qmodel)
    return qmodel


# ---- SQNR report ------------------------------------------------------------------

def sqnr_db(ref, q):
    """10 log10(sum ref^2 / sum (q - ref)^2), in float64 (inf when equal)."""
    ref = ref.detach().double()
    q = q.detach().double()
    sig = float((ref * ref).sum())
    noise = float(((q - ref) ** 2).sum())
    if noise == 0:
        return math.inf
    if sig == 0:
        return -math.inf
    return 10.0 * math.log10(sig / noise)


class SQNRReport:
    """Rows (layer name, kind, SQNR dB); ``str()`` prints a table. The last
    row, "(model output)", compares the two models' outputs end to end.
    ``clipped``: per layer name, the share of its input values (float
    input, after equalisation) beyond the calibrated range, |x| > 127.5
    x_scale, which the quantization clamps to +-127: on a batch unlike the
    calibration batches, the usual cause of a low SQNR."""

    def __init__(self, rows, model_sqnr, clipped=None):
        self.rows = rows
        self.model_sqnr = model_sqnr
        self.clipped = dict(clipped or {})

    def __iter__(self):
        return iter(self.rows)

    def __len__(self):
        return len(self.rows)

    def as_dict(self):
        return {name: db for name, _kind, db in self.rows}

    def min(self):
        return min(db for _n, _k, db in self.rows)

    def __str__(self):
        w = max([len(r[0]) for r in self.rows] + [len("(model output)"), 5])
        lines = [f"{'layer':<{w}}  {'fused':<14} {'SQNR dB':>8} {'clipped':>9}"]
        for name, kind, db in self.rows:
            c = self.clipped.get(name)
            c = f"{100 * c:8.4f}%" if c is not None else f"{'':>9}"
            lines.append(f"{name:<{w}}  {kind:<14} {db:8.2f} {c}")
        if self.model_sqnr is not None:
            lines.append(f"{'(model output)':<{w}}  {'':<14} {self.model_sqnr:8.2f}")
        return "\n".join(lines)

    __repr__ = __str__


def _clipped_share(q, feats):
    """Share of the float feats' values that layer q's quantization clamps
    (sqnr_report feeds every layer the float model's input)."""
    if not feats.numel():
        return 0.0
    x = feats.double()
    in_scale = getattr(q, "in_scale", None)  # modules pickled before it existed
    if in_scale is not None:
        x = x * in_scale.to(x.device, torch.float64)
    return float((x.abs() > 127.5 * q.x_scale).double().mean())


def _unchained_output(q, args):
    """q's float output on args. A chained layer (int8_out) computes it as
    without chain=True: its int8 hand-off rounds at the next layer's
    x_scale, the rounding that layer's own row already counts (it
    quantizes the float input at that scale), and the chained model's
    output is bit for bit the unchained one's. Counted here too, it put
    chained strided layers of the example network 10-20 dB below the same
    layers unchained (docs/perf-notes.md item 124)."""
    if not getattr(q, "int8_out", False):
        y = q(*args).feats
        return dequantize_tensor(y, q.y_scale) if y.dtype == torch.int8 else y
    saved = q.y_scale, q.int8_out
    q.y_scale, q.int8_out = None, False
    try:
        return q(*args).feats
    finally:
        q.y_scale, q.int8_out = saved


def sqnr_report(float_model, quant_model, batch):
    """Per quantized layer of ``quant_model`` (made by :func:`quantize` from
    ``float_model``): the SQNR of its output against the float layer's
    output (after the BN / ReLU it absorbed) when both get the float model's
    input of that layer on ``batch``. Plus the SQNR of the whole models'
    outputs, and per layer the share of its input clipped by its
    calibrated range (``.clipped``). Returns an :class:`SQNRReport`."""
    fmods = dict(float_model.named_modules())
    qlayers = [(n, m) for n, m in quant_model.named_modules()
               if isinstance(m, _QuantizedConvBase)]
    ins, outs, hooks = {}, {}, []
    for name, q in qlayers:
        hooks.append(fmods[q.float_name].register_forward_pre_hook(
            lambda m, args, _n=name: ins.__setitem__(
                _n, (args[0].replace_feature(args[0].feats.clone()),) + tuple(args[1:]))))
        hooks.append(fmods[q.float_tail].register_forward_hook(
            lambda m, args, out, _n=name: outs.__setitem__(_n, _feats(out).clone())))
    was_training = float_model.training
    float_model.eval()
    try:
        with torch.no_grad():
            ref_out = _run(float_model, batch)
            rows, clipped = [], {}
            for name, q in qlayers:
                if name not in ins:
                    continue
                args = ins[name]
                fin = getattr(q, "input_factor", None)
                if fin is not None:  # equalisation folded into the layer before
                    x0 = args[0]
                    args = (x0.replace_feature(x0.feats * fin.to(x0.feats)),) + args[1:]
                yq = _unchained_output(q, args)
                fout = getattr(q, "output_factor", None)
                if fout is not None:
                    yq = yq.double() / fout.to(yq.device, torch.float64)
                kind = q.fused
                rows.append((name, kind, sqnr_db(outs[name], yq)))
                clipped[name] = _clipped_share(q, args[0].feats)
            q_out = _run(quant_model, batch)
    finally:
        for h in hooks:
            h.remove()
        float_model.train(was_training)
    model_db = None
    if isinstance(ref_out, torch.Tensor) or isinstance(ref_out, SparseTensor):
        model_db = sqnr_db(_feats(ref_out), _feats(q_out))
    return SQNRReport(rows, model_db, clipped)
