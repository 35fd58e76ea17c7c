"""The library's ops on torch tensors, with autograd.

Layer 1 (``*_impl``): one C call each, contiguous tensors in, new tensors
out; kernel maps are passed by id (``voxconv.kmap.kmap_by_id``) so that the
same signatures serve as torch custom ops.

Layer 2: autograd. With torch >= 2.4 (``torch.library.custom_op`` and
``register_autograd``) every op is registered as ``torch.ops.voxconv.*``
with a fake (meta) implementation, so ``torch.compile`` traces around it;
otherwise (e.g. Debian's torch 1.13) plain ``torch.autograd.Function``s do
the same work. ``VOXCONV_TORCH_CUSTOM_OPS=0`` forces the second path.

The public entry points at the bottom (``conv``, ``depthwise``, ``pool``,
``unpool``) take care of contiguity (inputs are made contiguous, never
misread) and of the kernel map's lifetime during backward (the autograd
context holds the map object, not just its id).
"""

import ctypes
import os

import torch

from . import _lib
from . import _runtime
from .kmap import kmap_by_id

# ---- layer 1: single C calls ---------------------------------------------------


def _options(fwd, dgrad, wgrad, fp16, det, inference):
    o = _lib.ConvOptions()
    o.fwd_algo = fwd.encode() if fwd else None
    o.dgrad_algo = dgrad.encode() if dgrad else None
    o.wgrad_algo = wgrad.encode() if wgrad else None
    o.fp16_accum = int(fp16)
    o.deterministic = int(det)
    o.inference = 1 if inference else 0
    return o


def _call(kmap, name, *args):
    h = _runtime.handle_for(kmap.device)
    h.call(name, ctypes.c_void_p(kmap.ptr), *args)


def _fs(t, what):
    return ctypes.byref(_runtime.feats_struct(t, what))


def conv_forward_impl(x, w, kmap_id, rows, fwd, dgrad, wgrad, fp16, det, inference):
    km = kmap_by_id(kmap_id)
    y = x.new_empty((rows, w.shape[2]))
    _call(km, "voxconv_conv_forward", _fs(x, "input features"),
          ctypes.byref(_runtime.weights_struct(w)), _fs(y, "output"),
          ctypes.byref(_options(fwd, dgrad, wgrad, fp16, det, inference)))
    return y


def conv_dgrad_impl(dy, w, kmap_id, rows, fwd, dgrad, wgrad, fp16, det):
    km = kmap_by_id(kmap_id)
    dx = dy.new_empty((rows, w.shape[1]))
    _call(km, "voxconv_conv_dgrad", _fs(dy, "output gradient"),
          ctypes.byref(_runtime.weights_struct(w)), _fs(dx, "input gradient"),
          ctypes.byref(_options(fwd, dgrad, wgrad, fp16, det, False)))
    return dx


def conv_wgrad_impl(x, dy, kmap_id, rows, fwd, dgrad, wgrad, fp16, det):
    km = kmap_by_id(kmap_id)
    dw = x.new_empty((rows, x.shape[1], dy.shape[1]))
    _call(km, "voxconv_conv_wgrad", _fs(x, "input features"), _fs(dy, "output gradient"),
          ctypes.byref(_runtime.weights_struct(dw, "weight gradient")),
          ctypes.byref(_options(fwd, dgrad, wgrad, fp16, det, False)))
    return dw


def depthwise_forward_impl(x, w, kmap_id, rows, fwd, dgrad, wgrad, fp16, det, inference):
    km = kmap_by_id(kmap_id)
    y = x.new_empty((rows, x.shape[1]))
    _call(km, "voxconv_depthwise_forward", _fs(x, "input features"),
          _fs(w, "depthwise weight"), _fs(y, "output"),
          ctypes.byref(_options(fwd, dgrad, wgrad, fp16, det, inference)))
    return y


def depthwise_dgrad_impl(dy, w, kmap_id, rows, fwd, dgrad, wgrad, fp16, det):
    km = kmap_by_id(kmap_id)
    dx = dy.new_empty((rows, dy.shape[1]))
    _call(km, "voxconv_depthwise_dgrad", _fs(dy, "output gradient"),
          _fs(w, "depthwise weight"), _fs(dx, "input gradient"),
          ctypes.byref(_options(fwd, dgrad, wgrad, fp16, det, False)))
    return dx


def depthwise_wgrad_impl(x, dy, kmap_id, rows, fwd, dgrad, wgrad, fp16, det):
    km = kmap_by_id(kmap_id)
    dw = x.new_empty((rows, x.shape[1]))
    _call(km, "voxconv_depthwise_wgrad", _fs(x, "input features"),
          _fs(dy, "output gradient"), _fs(dw, "weight gradient"),
          ctypes.byref(_options(fwd, dgrad, wgrad, fp16, det, False)))
    return dw


def pool_forward_impl(x, kmap_id, rows, mode):
    km = kmap_by_id(kmap_id)
    y = x.new_empty((rows, x.shape[1]))
    _call(km, "voxconv_pool_forward", mode, _fs(x, "input features"), _fs(y, "output"))
    return y


def pool_backward_impl(x, y, dy, kmap_id, rows, mode):
    km = kmap_by_id(kmap_id)
    dx = dy.new_empty((rows, dy.shape[1]))
    if mode == _lib.POOL_MAX:
        xs, ys = _fs(x, "input features"), _fs(y, "pooled output")
    else:
        xs = ys = None
    _call(km, "voxconv_pool_backward", mode, xs, ys, _fs(dy, "output gradient"),
          _fs(dx, "input gradient"))
    return dx


def unpool_forward_impl(x, kmap_id, rows):
    km = kmap_by_id(kmap_id)
    y = x.new_empty((rows, x.shape[1]))
    _call(km, "voxconv_unpool_forward", _fs(x, "coarse features"), _fs(y, "output"))
    return y


def unpool_backward_impl(dy, kmap_id, rows):
    km = kmap_by_id(kmap_id)
    dx = dy.new_empty((rows, dy.shape[1]))
    _call(km, "voxconv_unpool_backward", _fs(dy, "output gradient"),
          _fs(dx, "coarse gradient"))
    return dx


# ---- layer 2a: autograd.Function (any torch) ----------------------------------
# `rows` is the leading dimension of each op's output (n_out, n_in or the
# kernel volume): passed explicitly so that the shapes never need the map.


# Regular and depthwise convolution differ only in their three C calls: the
# autograd around them (save x and w, dgrad for x and wgrad for w, each only
# when needed) is written once here and used by both Functions.


def _weighted_forward(ctx, forward_impl, x, w, km, fwd, dgrad, wgrad, fp16, det, inference):
    ctx.save_for_backward(x, w)
    ctx.km, ctx.cfg = km, (fwd, dgrad, wgrad, fp16, det)
    return forward_impl(x, w, km.id, km.n_out, fwd, dgrad, wgrad, fp16, det, inference)


def _weighted_backward(ctx, dy, dgrad_impl, wgrad_impl):
    x, w = ctx.saved_tensors
    dy = dy.contiguous()
    dx = dw = None
    if ctx.needs_input_grad[0]:
        dx = dgrad_impl(dy, w, ctx.km.id, x.shape[0], *ctx.cfg)
    if ctx.needs_input_grad[1]:
        dw = wgrad_impl(x, dy, ctx.km.id, w.shape[0], *ctx.cfg)
    return dx, dw, None, None, None, None, None, None, None


class _ConvFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, km, fwd, dgrad, wgrad, fp16, det, inference):
        return _weighted_forward(ctx, conv_forward_impl, x, w, km, fwd, dgrad, wgrad, fp16,
                                 det, inference)

    @staticmethod
    def backward(ctx, dy):
        return _weighted_backward(ctx, dy, conv_dgrad_impl, conv_wgrad_impl)


class _DepthwiseFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, km, fwd, dgrad, wgrad, fp16, det, inference):
        return _weighted_forward(ctx, depthwise_forward_impl, x, w, km, fwd, dgrad, wgrad,
                                 fp16, det, inference)

    @staticmethod
    def backward(ctx, dy):
        return _weighted_backward(ctx, dy, depthwise_dgrad_impl, depthwise_wgrad_impl)


class _PoolFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, km, mode):
        y = pool_forward_impl(x, km.id, km.n_out, mode)
        if mode == _lib.POOL_MAX:
            ctx.save_for_backward(x, y)
        ctx.km, ctx.mode, ctx.n_in = km, mode, x.shape[0]
        return y

    @staticmethod
    def backward(ctx, dy):
        x = y = None
        if ctx.mode == _lib.POOL_MAX:
            x, y = ctx.saved_tensors
        return (pool_backward_impl(x, y, dy.contiguous(), ctx.km.id, ctx.n_in, ctx.mode),
                None, None)


class _UnpoolFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, km):
        ctx.km, ctx.n_coarse = km, x.shape[0]
        return unpool_forward_impl(x, km.id, km.n_in)

    @staticmethod
    def backward(ctx, dy):
        return unpool_backward_impl(dy.contiguous(), ctx.km.id, ctx.n_coarse), None


# ---- layer 2b: torch.library custom ops (torch >= 2.4) ------------------------
# Under torch.compile the map id and row counts may be traced as symbolic
# ints: fake implementations use only `rows` and the tensors' shapes, and the
# autograd context keeps the KernelMap object only when the id is concrete
# (eager mode; a compiled graph keeps its maps alive through the module's
# coordinate manager, which the caller holds while it runs the graph).

_custom = None  # True once torch.ops.voxconv.* are registered


def _km_ref(kmap_id):
    return kmap_by_id(kmap_id) if isinstance(kmap_id, int) else None


def _register_custom_ops():
    from typing import Optional

    import torch.library as L
    T = torch.Tensor
    OS = Optional[str]

    @L.custom_op("voxconv::conv_forward", mutates_args=())
    def conv_forward(x: T, w: T, kmap_id: int, rows: int, fwd: OS, dgrad: OS, wgrad: OS,
                     fp16: int, det: int, inference: bool) -> T:
        return conv_forward_impl(x, w, kmap_id, rows, fwd, dgrad, wgrad, fp16, det, inference)

    @L.custom_op("voxconv::conv_dgrad", mutates_args=())
    def conv_dgrad(dy: T, w: T, kmap_id: int, rows: int, fwd: OS, dgrad: OS, wgrad: OS,
                   fp16: int, det: int) -> T:
        return conv_dgrad_impl(dy, w, kmap_id, rows, fwd, dgrad, wgrad, fp16, det)

    @L.custom_op("voxconv::conv_wgrad", mutates_args=())
    def conv_wgrad(x: T, dy: T, kmap_id: int, rows: int, fwd: OS, dgrad: OS, wgrad: OS,
                   fp16: int, det: int) -> T:
        return conv_wgrad_impl(x, dy, kmap_id, rows, fwd, dgrad, wgrad, fp16, det)

    @L.custom_op("voxconv::depthwise_forward", mutates_args=())
    def depthwise_forward(x: T, w: T, kmap_id: int, rows: int, fwd: OS, dgrad: OS, wgrad: OS,
                          fp16: int, det: int, inference: bool) -> T:
        return depthwise_forward_impl(x, w, kmap_id, rows, fwd, dgrad, wgrad, fp16, det,
                                      inference)

    @L.custom_op("voxconv::depthwise_dgrad", mutates_args=())
    def depthwise_dgrad(dy: T, w: T, kmap_id: int, rows: int, fwd: OS, dgrad: OS, wgrad: OS,
                        fp16: int, det: int) -> T:
        return depthwise_dgrad_impl(dy, w, kmap_id, rows, fwd, dgrad, wgrad, fp16, det)

    @L.custom_op("voxconv::depthwise_wgrad", mutates_args=())
    def depthwise_wgrad(x: T, dy: T, kmap_id: int, rows: int, fwd: OS, dgrad: OS, wgrad: OS,
                        fp16: int, det: int) -> T:
        return depthwise_wgrad_impl(x, dy, kmap_id, rows, fwd, dgrad, wgrad, fp16, det)

    @L.custom_op("voxconv::pool_forward", mutates_args=())
    def pool_forward(x: T, kmap_id: int, rows: int, mode: int) -> T:
        return pool_forward_impl(x, kmap_id, rows, mode)

    @L.custom_op("voxconv::pool_backward", mutates_args=())
    def pool_backward(x: T, y: T, dy: T, kmap_id: int, rows: int, mode: int) -> T:
        return pool_backward_impl(x, y, dy, kmap_id, rows, mode)

    @L.custom_op("voxconv::unpool_forward", mutates_args=())
    def unpool_forward(x: T, kmap_id: int, rows: int) -> T:
        return unpool_forward_impl(x, kmap_id, rows)

    @L.custom_op("voxconv::unpool_backward", mutates_args=())
    def unpool_backward(dy: T, kmap_id: int, rows: int) -> T:
        return unpool_backward_impl(dy, kmap_id, rows)

    # Fake (meta) implementations: shapes only, no library call.
    @conv_forward.register_fake
    def _(x, w, kmap_id, rows, *_cfg):
        return x.new_empty((rows, w.shape[2]))

    @conv_dgrad.register_fake
    def _(dy, w, kmap_id, rows, *_cfg):
        return dy.new_empty((rows, w.shape[1]))

    @conv_wgrad.register_fake
    def _(x, dy, kmap_id, rows, *_cfg):
        return x.new_empty((rows, x.shape[1], dy.shape[1]))

    @depthwise_forward.register_fake
    def _(x, w, kmap_id, rows, *_cfg):
        return x.new_empty((rows, x.shape[1]))

    @depthwise_dgrad.register_fake
    def _(dy, w, kmap_id, rows, *_cfg):
        return dy.new_empty((rows, dy.shape[1]))

    @depthwise_wgrad.register_fake
    def _(x, dy, kmap_id, rows, *_cfg):
        return x.new_empty((rows, x.shape[1]))

    @pool_forward.register_fake
    def _(x, kmap_id, rows, mode):
        return x.new_empty((rows, x.shape[1]))

    @pool_backward.register_fake
    def _(x, y, dy, kmap_id, rows, mode):
        return dy.new_empty((rows, dy.shape[1]))

    @unpool_forward.register_fake
    def _(x, kmap_id, rows):
        return x.new_empty((rows, x.shape[1]))

    @unpool_backward.register_fake
    def _(dy, kmap_id, rows):
        return dy.new_empty((rows, dy.shape[1]))

    # Autograd.
    def conv_setup(ctx, inputs, output):
        x, w, kmap_id, _rows, fwd, dgrad, wgrad, fp16, det, _inf = inputs
        ctx.save_for_backward(x, w)
        ctx.kmap_id, ctx.km = kmap_id, _km_ref(kmap_id)
        ctx.cfg = (fwd, dgrad, wgrad, fp16, det)

    def conv_backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy = dy.contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = torch.ops.voxconv.conv_dgrad(dy, w, ctx.kmap_id, x.shape[0], *ctx.cfg)
        if ctx.needs_input_grad[1]:
            dw = torch.ops.voxconv.conv_wgrad(x, dy, ctx.kmap_id, w.shape[0], *ctx.cfg)
        return dx, dw, None, None, None, None, None, None, None, None

    def dw_backward(ctx, dy):
        x, w = ctx.saved_tensors
        dy = dy.contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            dx = torch.ops.voxconv.depthwise_dgrad(dy, w, ctx.kmap_id, x.shape[0], *ctx.cfg)
        if ctx.needs_input_grad[1]:
            dw = torch.ops.voxconv.depthwise_wgrad(x, dy, ctx.kmap_id, w.shape[0], *ctx.cfg)
        return dx, dw, None, None, None, None, None, None, None, None

    def pool_setup(ctx, inputs, output):
        x, kmap_id, _rows, mode = inputs
        ctx.kmap_id, ctx.km, ctx.mode, ctx.n_in = kmap_id, _km_ref(kmap_id), mode, x.shape[0]
        if mode == _lib.POOL_MAX:
            ctx.save_for_backward(x, output)

    def pool_bwd(ctx, dy):
        if ctx.mode == _lib.POOL_MAX:
            x, y = ctx.saved_tensors
        else:  # AVG/SUM ignore x and y; pass dy for the schema's tensors
            x = y = dy
        return (torch.ops.voxconv.pool_backward(x, y, dy.contiguous(), ctx.kmap_id, ctx.n_in,
                                                ctx.mode), None, None, None)

    def unpool_setup(ctx, inputs, output):
        x, kmap_id, _rows = inputs
        ctx.kmap_id, ctx.km, ctx.n_coarse = kmap_id, _km_ref(kmap_id), x.shape[0]

    def unpool_bwd(ctx, dy):
        return (torch.ops.voxconv.unpool_backward(dy.contiguous(), ctx.kmap_id, ctx.n_coarse),
                None, None)

    conv_forward.register_autograd(conv_backward, setup_context=conv_setup)
    depthwise_forward.register_autograd(dw_backward, setup_context=conv_setup)
    pool_forward.register_autograd(pool_bwd, setup_context=pool_setup)
    unpool_forward.register_autograd(unpool_bwd, setup_context=unpool_setup)
    return True


def custom_ops_enabled():
    """True when the ops run as torch.ops.voxconv.* custom ops."""
    return _custom is True


if (os.environ.get("VOXCONV_TORCH_CUSTOM_OPS", "1") not in ("0", "false", "off")
        and hasattr(torch.library, "custom_op") and hasattr(torch.library, "register_autograd")):
    _custom = _register_custom_ops()


# ---- public entry points -------------------------------------------------------


def _inference():
    f = getattr(torch, "is_inference_mode_enabled", None)
    return bool(f()) if f is not None else False


def conv(x, w, km, fwd, dgrad, wgrad, fp16, det):
    """y = conv(x, w) through kernel map km (a KernelMap)."""
    x, w = x.contiguous(), w.contiguous()
    inf = _inference()
    if _custom:
        return torch.ops.voxconv.conv_forward(x, w, km.id, km.n_out, fwd, dgrad, wgrad, fp16,
                                              det, inf)
    return _ConvFn.apply(x, w, km, fwd, dgrad, wgrad, fp16, det, inf)


def depthwise(x, w, km, fwd, dgrad, wgrad, fp16, det):
    x, w = x.contiguous(), w.contiguous()
    inf = _inference()
    if _custom:
        return torch.ops.voxconv.depthwise_forward(x, w, km.id, km.n_out, fwd, dgrad, wgrad,
                                                   fp16, det, inf)
    return _DepthwiseFn.apply(x, w, km, fwd, dgrad, wgrad, fp16, det, inf)


def pool(x, km, mode):
    x = x.contiguous()
    if _custom:
        return torch.ops.voxconv.pool_forward(x, km.id, km.n_out, mode)
    return _PoolFn.apply(x, km, mode)


def unpool(x, km):
    x = x.contiguous()
    if _custom:
        return torch.ops.voxconv.unpool_forward(x, km.id, km.n_in)
    return _UnpoolFn.apply(x, km)
