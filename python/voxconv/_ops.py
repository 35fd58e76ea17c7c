"""The library's ops on torch tensors, with autograd.

Layer 1 (``*_impl``): one C call each, contiguous tensors in, new tensors
out; kernel maps are passed by id (``voxconv.kmap.kmap_by_id``) so that the
same signatures serve as torch custom ops.

Layer 1b: the eager fast path, the same calls on KernelMap objects with
no per-call ctypes objects (the handle's scratch structs, cached options).

Layer 2: autograd. Eager calls use ``torch.autograd.Function``s over layer
1b (a Function.apply costs a few microseconds; a torch custom op about
thirty). With torch >= 2.4 (``torch.library.custom_op`` and
``register_autograd``) every op is also registered as
``torch.ops.voxconv.*`` with a fake (meta) implementation, for callers that
want torch's op machinery (opcheck, their own traced code). voxconv's own
entry points never route through them: they name kernel maps by id, and a
compiled graph that held such a call outlived the map it named (maps go
with their last tensor); instead every entry point and module forward runs
outside torch.compile (``outside_compile``), so compiled graphs hold no
voxconv op at all. ``VOXCONV_TORCH_CUSTOM_OPS=0`` skips the registration. Convolutions are
differentiable to any order on both paths (their backward passes are
convolutions); pooling to first order (a second derivative raises).

The public entry points at the bottom (``conv``, ``depthwise``, ``pool``,
``unpool``) take care of contiguity (inputs are made contiguous, never
misread) and of the kernel map's lifetime during backward (the autograd
context holds the map object, not just its id).
"""

import ctypes
import functools
import os
import struct

import torch

from . import _lib
from . import _runtime
from ._lib import lib
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
    kmap.use_on(h)
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


# ---- layer 1b: the eager fast path ---------------------------------------------
# The same C calls on KernelMap objects, with each handle's scratch structs
# filled in place and the options struct cached per configuration: no
# ctypes object is made per call (see _runtime's module doc).

_opt_cache = {}


def _opt_ref(cfg, inference):
    """byref(voxconv_conv_options_t) for cfg = (fwd, dgrad, wgrad, fp16,
    det), made once per distinct configuration and kept alive here."""
    key = (cfg, inference)
    hit = _opt_cache.get(key)
    if hit is None:
        o = _options(*cfg, inference)
        hit = _opt_cache[key] = (o, ctypes.byref(o))
    return hit[1]


_DT = _runtime._DTYPES


# struct formats of voxconv_feats_t (data, rows, channels, dtype) and
# voxconv_weights_t (data, kvol, cin, cout, dtype), without their tail padding
_FEATS_FMT, _WEIGHTS_FMT = "Pqqi", "Pqqqi"


def _padded(body, size):
    """``body`` followed by the padding bytes that make it ``size`` long
    (the ctypes struct's size, so the bytes are the struct's own)."""
    return body + f"{size - struct.calcsize('@' + body)}x"


def _block_packer(layout):
    """A struct.Struct that writes a handle's ArgBlock (fa, fb, fc, wt) in
    one call: ``layout`` names what each of the four slots gets, "f"
    a voxconv_feats_t (data, rows, channels, dtype), "w" a
    voxconv_weights_t (data, kvol, cin, cout, dtype), "-" nothing (its
    bytes are zeroed: a slot the call does not pass). Sizes and padding
    from ctypes, so the bytes are the structs' own."""
    blk = _lib.ArgBlock
    fields = (blk.fa, blk.fb, blk.fc, blk.wt)
    fmt, pos = "@", 0
    for slot, what in zip(fields, layout):
        if slot.offset != pos:
            raise RuntimeError("voxconv: unexpected ArgBlock layout")
        fmt += _padded({"f": _FEATS_FMT, "w": _WEIGHTS_FMT, "-": ""}[what], slot.size)
        pos += slot.size
    packer = struct.Struct(fmt)
    if packer.size != ctypes.sizeof(blk):
        raise RuntimeError("voxconv: unexpected ArgBlock size")
    return packer


# the argument slots of _launch's three shapes: (a, b, c) as
# (feats, weights, feats), (feats, feats, weights), (feats, feats, feats)
_PACK_FWF = _block_packer("f-fw")  # a -> fa, c -> fc, b -> wt
_PACK_FFW = _block_packer("ff-w")  # a -> fa, b -> fb, c -> wt
_PACK_FFF = _block_packer("fff-")


def _launch(fn, name, km, a, b, c, b_weights, c_weights, opt):
    """fn(h, map, a, b, c, opt) with a, b, c tensors (b or c a
    voxconv_weights_t when b_weights / c_weights). This is the hottest
    Python of the package: the three structs are written with one
    struct.pack_into (one C call instead of thirteen field assignments)."""
    h = _runtime.handle_for_tensor(a)
    if h.stream != km._last_user:
        km.use_on(h)
    # f: the other voxconv_feats_t; w: the voxconv_weights_t (its three
    # dimensions), or the third voxconv_feats_t of a depthwise pass
    if b_weights:  # a -> fa, c -> fc, b -> wt
        packer, f, w, refs = _PACK_FWF, c, b, (h.ra, h.rw, h.rc)
    elif c_weights:  # a -> fa, b -> fb, c -> wt
        packer, f, w, refs = _PACK_FFW, b, c, (h.ra, h.rb, h.rw)
    else:  # a -> fa, b -> fb, c -> fc
        packer, f, w, refs = _PACK_FFF, b, c, (h.ra, h.rb, h.rc)
    ar, ac = a.shape
    fr, fc = f.shape
    with h.lock:
        # a w of the wrong rank gives the wrong item count: struct.error
        packer.pack_into(h.args, 0, a.data_ptr(), ar, ac, _DT[a.dtype],
                         f.data_ptr(), fr, fc, _DT[f.dtype],
                         w.data_ptr(), *w.shape, _DT[w.dtype])
        st = fn(h.ptr, km.ptr, *refs, opt)
        _runtime._last_handle = h
        if st:
            _lib.raise_for_status(st, h.ptr, name)


def _conv_fwd(x, w, km, cfg, inference):
    y = x.new_empty((km.n_out, w.shape[2]))
    _launch(lib.voxconv_conv_forward, "voxconv_conv_forward", km, x, w, y, True, False,
            _opt_ref(cfg, inference))
    return y


def _conv_dgrad(dy, w, km, cfg):
    dx = dy.new_empty((km.n_in, w.shape[1]))
    _launch(lib.voxconv_conv_dgrad, "voxconv_conv_dgrad", km, dy, w, dx, True, False,
            _opt_ref(cfg, False))
    return dx


def _conv_wgrad(x, dy, km, cfg):
    dw = x.new_empty((km.kernel_volume, x.shape[1], dy.shape[1]))
    _launch(lib.voxconv_conv_wgrad, "voxconv_conv_wgrad", km, x, dy, dw, False, True,
            _opt_ref(cfg, False))
    return dw


def _dw_fwd(x, w, km, cfg, inference):
    y = x.new_empty((km.n_out, x.shape[1]))
    _launch(lib.voxconv_depthwise_forward, "voxconv_depthwise_forward", km, x, w, y, False,
            False, _opt_ref(cfg, inference))
    return y


def _dw_dgrad(dy, w, km, cfg):
    dx = dy.new_empty((km.n_in, dy.shape[1]))
    _launch(lib.voxconv_depthwise_dgrad, "voxconv_depthwise_dgrad", km, dy, w, dx, False,
            False, _opt_ref(cfg, False))
    return dx


def _dw_wgrad(x, dy, km, cfg):
    dw = x.new_empty((km.kernel_volume, x.shape[1]))
    _launch(lib.voxconv_depthwise_wgrad, "voxconv_depthwise_wgrad", km, x, dy, dw, False,
            False, _opt_ref(cfg, False))
    return dw


def _feats_packer(n):
    """A struct.Struct that writes n consecutive voxconv_feats_t (a
    handle's pool_args) in one call; padding from ctypes, as
    _block_packer's."""
    one = ctypes.sizeof(_lib.Feats)
    packer = struct.Struct("@" + _padded(_FEATS_FMT, one) * n)
    if packer.size != n * one:
        raise RuntimeError("voxconv: unexpected voxconv_feats_t size")
    return packer


_PACK_FEATS = {2: _feats_packer(2), 4: _feats_packer(4)}


def _launch_feats(fn, name, km, mode, ts):
    """fn(h, map, [mode,] *ts) with ts two or four feature tensors (None
    passes NULL): pooling and unpooling on the handle's pool_args, written
    with one struct.pack_into as _launch writes its block."""
    h = _runtime.handle_for_tensor(ts[-1])
    if h.stream != km._last_user:
        km.use_on(h)
    vals, refs = [], h.pool_refs[:len(ts)]
    for i, t in enumerate(ts):
        if t is None:  # NULL pointer: its slot is zeroed and not passed
            vals += (0, 0, 0, 0)
            refs = refs[:i] + (None,) + refs[i + 1:]
        else:  # a t of the wrong rank gives the wrong item count: struct.error
            vals += (t.data_ptr(), *t.shape, _DT[t.dtype])
    with h.lock:
        _PACK_FEATS[len(ts)].pack_into(h.pool_args, 0, *vals)
        st = fn(h.ptr, km.ptr, mode, *refs) if mode is not None else fn(h.ptr, km.ptr, *refs)
        _runtime._last_handle = h
        if st:
            _lib.raise_for_status(st, h.ptr, name)


def _pool_fwd(x, km, mode):
    y = x.new_empty((km.n_out, x.shape[1]))
    _launch_feats(lib.voxconv_pool_forward, "voxconv_pool_forward", km, mode, (x, y))
    return y


def _pool_bwd(x, y, dy, km, n_in, mode):
    dx = dy.new_empty((n_in, dy.shape[1]))
    if mode != _lib.POOL_MAX:
        x = y = None
    _launch_feats(lib.voxconv_pool_backward, "voxconv_pool_backward", km, mode,
                  (x, y, dy, dx))
    return dx


def _unpool_fwd(x, km):
    y = x.new_empty((km.n_in, x.shape[1]))
    _launch_feats(lib.voxconv_unpool_forward, "voxconv_unpool_forward", km, None, (x, y))
    return y


def _unpool_bwd(dy, km, n_coarse):
    dx = dy.new_empty((n_coarse, dy.shape[1]))
    _launch_feats(lib.voxconv_unpool_backward, "voxconv_unpool_backward", km, None, (dy, dx))
    return dx


# (forward, dgrad, wgrad) of the two weighted convolutions.
_PASSES = {"conv": (_conv_fwd, _conv_dgrad, _conv_wgrad),
           "depthwise": (_dw_fwd, _dw_dgrad, _dw_wgrad)}


# ---- layer 2a: autograd (eager) ------------------------------------------------
# A convolution is linear in its input and in its weight, and so are its two
# backward passes, whose derivatives are again the three passes:
#   y  = fwd(x, W)     dL/dx  = dgrad(dy, W)       dL/dW  = wgrad(x, dy)
#   dx = dgrad(dy, W)  d/d dy = fwd(g, W)          d/dW   = wgrad(g, dy)
#   dW = wgrad(x, dy)  d/dx   = dgrad(dy, G)       d/d dy = fwd(x, G)
# (g, G: the incoming gradients of dx and dW). So each pass is a Function
# whose backward applies the others, and gradients of any order are exact
# (a gradient penalty through a sparse conv is correct). When backward runs
# without create_graph the passes are called directly.


# For pass `which` with inputs (a, b) and incoming gradient g, the two
# gradients as (pass, first argument, second argument), the arguments
# named "a", "b" or "g" (the table above):
_GRADS = (
    (("dgrad", "g", "b"), ("wgrad", "a", "g")),  # fwd:   a = x,  b = W
    (("fwd", "g", "b"), ("wgrad", "g", "a")),    # dgrad: a = dy, b = W
    (("dgrad", "b", "g"), ("fwd", "a", "g")),    # wgrad: a = x,  b = dy
)
_WHICH = {"fwd": 0, "dgrad": 1, "wgrad": 2}


def _pass(kind, which, a, b, km, cfg, graph):
    """One pass: through _PassFn when a second-order graph is being built
    (backward with create_graph=True), else the plain call."""
    if graph:
        return _pass_apply(a, b, (km, kind, cfg, which, False, None))
    fn = _PASSES[kind][which]
    return fn(a, b, km, cfg, False) if which == 0 else fn(a, b, km, cfg)


class WeightLayout:
    """How a module stores a convolution weight that the library reads as
    ``[K, Cin, Cout]`` (compat.spconv's ``[Cout, k0, k1, k2, Cin]`` view;
    compat.minkowski needs none: its maps number offsets in ME's order).
    ``to_lib(w)`` gives the library's tensor, ``to_stored(t)`` a
    library-layout tensor (the weight's gradient) in the stored layout.
    Passed to :func:`conv`, the conversion happens inside the convolution's
    autograd node instead of as autograd ops of its own (two view nodes per
    spconv layer, paid again in backward)."""

    __slots__ = ()

    def to_lib(self, w):
        raise NotImplementedError

    def lib_view(self, w):
        """to_lib(w) made without recording a graph, contiguous."""
        raise NotImplementedError

    def to_stored(self, g):
        raise NotImplementedError


class PermutedLayout(WeightLayout):
    """``to_lib(w) = w.permute(*perm).reshape(lib_shape)`` (a view for a
    weight stored that way, e.g. spconv's).

    Per training step each layer converts twice (its weight forward, its
    weight's gradient backward), so both are kept to one cheap call: the
    library view of the parameter is kept while the parameter keeps its
    storage and strides (the view follows in-place updates: it aliases the
    parameter; made and used only while no graph through the parameter is
    recorded; a converted copy is kept for one version of the parameter),
    and a contiguous gradient becomes the stored layout in one as_strided
    (the strides a reshape + permute would give). Measured: item 73 of
    docs/perf-notes.md."""

    __slots__ = ("perm", "inv", "lib_shape", "permuted_shape", "stored_shape",
                 "stored_strides", "_view")

    def __init__(self, perm, stored_shape, lib_shape):
        self.perm = tuple(perm)
        self.inv = tuple(sorted(range(len(perm)), key=lambda i: perm[i]))
        self.stored_shape = tuple(stored_shape)
        self.permuted_shape = tuple(stored_shape[i] for i in perm)
        self.lib_shape = tuple(lib_shape)
        # strides of a contiguous [*permuted_shape] tensor, permuted by inv
        st, acc = [0] * len(perm), 1
        for i in range(len(perm) - 1, -1, -1):
            st[i] = acc
            acc *= self.permuted_shape[i]
        self.stored_strides = tuple(st[i] for i in self.inv)
        # (parameter, data_ptr, strides, library tensor, inference mode,
        #  parameter version for a copy / None for a view)
        self._view = None

    def to_lib(self, w):
        if torch.is_grad_enabled() and w.requires_grad:
            # a graph through w is being built (double backward): record it
            return w.permute(*self.perm).reshape(self.lib_shape)
        return self.lib_view(w)

    def lib_view(self, w):
        """The library-layout tensor of w, contiguous, with no graph
        recorded (what to_lib gives when no graph through w is built)."""
        c = self._view
        inf = _inference()  # views made under inference_mode stay there
        if (c is not None and c[0] is w and c[1] == w.data_ptr() and c[2] == w.stride()
                and c[4] == inf and (c[5] is None or c[5] == w._version)):
            return c[3]
        # Of a detached alias: autograd keeps no view record for it, so it
        # can be saved for backward after in-place updates of w (a view of
        # w itself made without grad could not be); the version counter is
        # still w's, so an update between forward and backward is caught.
        v = w.detach().permute(*self.perm).reshape(self.lib_shape)
        # A view follows w's in-place updates; a copy (w not stored over
        # the library layout, e.g. replaced by a contiguous tensor) holds
        # for w's current version only.
        v = v if v.is_contiguous() else v.contiguous()
        view = v.data_ptr() == w.data_ptr()
        self._view = (w, w.data_ptr(), w.stride(), v, inf, None if view else w._version)
        return v

    def to_stored(self, g):
        if g.is_contiguous():
            return g.as_strided(self.stored_shape, self.stored_strides)
        return g.reshape(self.permuted_shape).permute(*self.inv)


def _fast_apply(fn_cls):
    """fn_cls.apply without the Python layer torch 2.x puts around the C
    implementation (setup_context binding and functorch checks: about 1-2 us
    of host time a call on a lent H100 host) while no functorch transform
    (vmap, grad, ...) is active, which is when that layer only forwards the
    call; under a transform it is used as is. Tensors escaped from a
    finished transform are unwrapped, as that layer does. Mirrors that
    layer as torch 2.11 has it (read in its source); a later torch that
    adds work there needs this looked at again (test_higher_order's
    fast-apply test compares the two bit for bit)."""
    base = super(torch.autograd.Function, fn_cls).apply
    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    unwrap = getattr(getattr(torch._C, "_functorch", None), "unwrap_if_dead", None)
    if active is None or unwrap is None or base == fn_cls.apply:
        return fn_cls.apply

    def apply(*args):
        if active():
            return fn_cls.apply(*args)
        return base(*[unwrap(a) if isinstance(a, torch.Tensor) else a for a in args])
    return apply


class _PassFn(torch.autograd.Function):
    """Pass `which` (0 forward, 1 dgrad, 2 wgrad) of a regular or depthwise
    convolution, differentiable in both inputs by the other passes. With a
    WeightLayout (forward only), b is the weight as its module stores it.
    The non-tensor arguments travel as one tuple, meta = (km, kind, cfg,
    which, inference, layout): apply and the node handle three arguments
    instead of eight (host time per autograd call, docs/perf-notes.md
    item 70)."""

    @staticmethod
    def forward(ctx, a, b, meta):
        km, kind, cfg, which, inference, layout = meta
        # the library-layout copy is kept for a first-order backward, which
        # then converts nothing again
        lib_b = None if layout is None else layout.to_lib(b).contiguous()
        _PassFn.record(ctx, a, b, meta, lib_b)
        if lib_b is not None:
            b = lib_b
        fn = _PASSES[kind][which]
        return fn(a, b, km, cfg, inference) if which == 0 else fn(a, b, km, cfg)

    @staticmethod
    def record(ctx, a, b, meta, lib_b):
        """What backward needs: meta, a, b and (with a layout) lib_b."""
        ctx.meta = meta
        if lib_b is None:
            ctx.save_for_backward(a, b)
        else:
            ctx.save_for_backward(a, b, lib_b)

    @staticmethod
    def backward(ctx, g):
        km, kind, cfg, which, _, layout = ctx.meta
        graph = torch.is_grad_enabled()
        if layout is None:
            a, b = ctx.saved_tensors
        elif graph:
            # From the stored weight, under grad mode, when a graph is being
            # built: second derivatives reach the stored parameter.
            a, b, _ = ctx.saved_tensors
            b = layout.to_lib(b).contiguous()
        else:
            a, _, b = ctx.saved_tensors
        args = {"a": a, "b": b, "g": g.contiguous()}
        grads = [None, None]
        for i, (name, first, second) in enumerate(_GRADS[which]):
            if ctx.needs_input_grad[i]:
                grads[i] = _pass(kind, _WHICH[name], args[first], args[second], km, cfg, graph)
        if layout is not None and grads[1] is not None:
            grads[1] = layout.to_stored(grads[1])
        return grads[0], grads[1], None


# Launch first, record after. A forward pass under autograd used to be issued
# from inside Function.apply, after torch had bound the arguments and made
# the context: ~20-25 us of host time on a lent H100/H200 host before the
# kernel reached the GPU, 80 us and more when the host thread had just
# waited for the GPU (the first layer after a synchronisation; workload C's
# single-call rows). The pass is now issued first and the node that
# records it is made while the GPU runs it: the _Launched* Functions below
# take the finished output (in `pre`, a tuple, so that autograd sees no
# tensor input there and makes the output its node's own) and only save
# what backward needs. Their backward is the plain Function's. Used by
# weighted / pool / unpool when a graph is being recorded and no functorch
# transform is active (under one the plain Functions run: transforms wrap
# the tensors, which only the Function's forward sees unwrapped).


class _LaunchedPassFn(_PassFn):
    """_PassFn's forward pass (which 0) already issued: pre = (y, lib_b),
    lib_b the library-layout weight when meta has a WeightLayout."""

    @staticmethod
    def forward(ctx, a, b, meta, pre):
        _PassFn.record(ctx, a, b, meta, pre[1])
        return pre[0]

    @staticmethod
    def backward(ctx, g):
        return _PassFn.backward(ctx, g) + (None,)


# Pooling and unpooling: first derivatives only. Building a graph through
# their backward (create_graph=True) raises at once: a second derivative
# through them would otherwise silently come out as zero.
_FIRST_ORDER_ONLY = ("voxconv: sparse pooling / unpooling support first derivatives only; "
                     "create_graph=True (double backward) through them is not supported")


def _first_order_only(dy):
    if torch.is_grad_enabled() and dy.requires_grad:
        raise RuntimeError(_FIRST_ORDER_ONLY)


class _PoolFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, km, mode):
        return _PoolFn.record(ctx, x, km, mode, _pool_fwd(x, km, mode))

    @staticmethod
    def record(ctx, x, km, mode, y):
        """What backward needs (x and y for max pooling); returns y."""
        if mode == _lib.POOL_MAX:
            ctx.save_for_backward(x, y)
        ctx.km, ctx.mode, ctx.n_in = km, mode, x.shape[0]
        return y

    @staticmethod
    def backward(ctx, dy):
        _first_order_only(dy)
        x = y = None
        if ctx.mode == _lib.POOL_MAX:
            x, y = ctx.saved_tensors
        return _pool_bwd(x, y, dy.contiguous(), ctx.km, ctx.n_in, ctx.mode), None, None


class _UnpoolFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, km):
        ctx.km, ctx.n_coarse = km, x.shape[0]
        return _unpool_fwd(x, km)

    @staticmethod
    def backward(ctx, dy):
        _first_order_only(dy)
        return _unpool_bwd(dy.contiguous(), ctx.km, ctx.n_coarse), None


class _LaunchedPoolFn(_PoolFn):
    """_PoolFn with its forward already issued: pre = (y,)."""

    @staticmethod
    def forward(ctx, x, km, mode, pre):
        return _PoolFn.record(ctx, x, km, mode, pre[0])

    @staticmethod
    def backward(ctx, dy):
        return _PoolFn.backward(ctx, dy) + (None,)


class _LaunchedUnpoolFn(_UnpoolFn):
    """_UnpoolFn with its forward already issued: pre = (y,)."""

    @staticmethod
    def forward(ctx, x, km, pre):
        ctx.km, ctx.n_coarse = km, x.shape[0]
        return pre[0]

    @staticmethod
    def backward(ctx, dy):
        return _UnpoolFn.backward(ctx, dy) + (None,)


_pass_apply = _fast_apply(_PassFn)
_pool_apply = _fast_apply(_PoolFn)
_unpool_apply = _fast_apply(_UnpoolFn)
_launched_pass_apply = _fast_apply(_LaunchedPassFn)
_launched_pool_apply = _fast_apply(_LaunchedPoolFn)
_launched_unpool_apply = _fast_apply(_LaunchedUnpoolFn)
# torch._C._are_functorch_transforms_active where torch has it (see the
# comment above _LaunchedPassFn): under a transform the plain Functions run.
_transforms_active = getattr(torch._C, "_are_functorch_transforms_active", None) \
    or (lambda: False)


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

    # Autograd: as layer 2a, each pass's backward applies the other passes,
    # so gradients of any order are exact (see the table there).
    ops = torch.ops.voxconv
    passes = {"conv": (ops.conv_forward, ops.conv_dgrad, ops.conv_wgrad),
              "depthwise": (ops.depthwise_forward, ops.depthwise_dgrad,
                            ops.depthwise_wgrad)}

    def setup(ctx, inputs, output):
        a, b, kmap_id = inputs[0], inputs[1], inputs[2]
        ctx.save_for_backward(a, b)
        ctx.kmap_id, ctx.km = kmap_id, _km_ref(kmap_id)
        ctx.cfg = tuple(inputs[4:9])
        ctx.rows = (a.shape[0], b.shape[0])

    def backward_of(kind, which):
        fwd, dgrad, wgrad = passes[kind]

        def bwd(ctx, g):
            a, b = ctx.saved_tensors
            g = g.contiguous()
            k, cfg = ctx.kmap_id, ctx.cfg
            ga = gb = None
            if which == 0:    # y = fwd(x, W): a = x, b = W
                if ctx.needs_input_grad[0]:
                    ga = dgrad(g, b, k, a.shape[0], *cfg)
                if ctx.needs_input_grad[1]:
                    gb = wgrad(a, g, k, b.shape[0], *cfg)
            elif which == 1:  # dx = dgrad(dy, W): a = dy, b = W
                if ctx.needs_input_grad[0]:
                    ga = fwd(g, b, k, a.shape[0], *cfg, False)
                if ctx.needs_input_grad[1]:
                    gb = wgrad(g, a, k, b.shape[0], *cfg)
            else:             # dW = wgrad(x, dy): a = x, b = dy
                if ctx.needs_input_grad[0]:
                    ga = dgrad(b, g, k, a.shape[0], *cfg)
                if ctx.needs_input_grad[1]:
                    gb = fwd(a, g, k, b.shape[0], *cfg, False)
            rest = (None,) * (8 if which == 0 else 7)
            return (ga, gb) + rest
        return bwd

    for kind, fns in (("conv", (conv_forward, conv_dgrad, conv_wgrad)),
                      ("depthwise", (depthwise_forward, depthwise_dgrad,
                                     depthwise_wgrad))):
        for which, op in enumerate(fns):
            op.register_autograd(backward_of(kind, which), setup_context=setup)

    def pool_setup(ctx, inputs, output):
        x, kmap_id, _rows, mode = inputs
        ctx.kmap_id, ctx.km, ctx.mode, ctx.n_in = kmap_id, _km_ref(kmap_id), mode, x.shape[0]
        if mode == _lib.POOL_MAX:
            ctx.save_for_backward(x, output)

    def pool_bwd(ctx, dy):
        _first_order_only(dy)
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
        _first_order_only(dy)
        return (torch.ops.voxconv.unpool_backward(dy.contiguous(), ctx.kmap_id, ctx.n_coarse),
                None, None)

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


_is_inference = getattr(torch, "is_inference_mode_enabled", None)


def _inference():
    return bool(_is_inference()) if _is_inference is not None else False


_compiler = getattr(torch, "compiler", None)


def _dynamo_hooks():
    """(set_eval_frame, skip_code, is_exporting) of torch's dynamo, or None
    when this torch lacks any of them (then outside_compile falls back to
    torch.compiler.disable alone)."""
    try:
        from torch._C._dynamo.eval_frame import set_eval_frame
        from torch._dynamo.eval_frame import skip_code
        is_exporting = getattr(_compiler, "is_exporting", None) or (lambda: False)
        return set_eval_frame, skip_code, is_exporting
    except Exception:  # noqa: BLE001 (any torch without these: the plain route)
        return None


_hooks = None  # _dynamo_hooks(), looked up by the first outside_compile


def outside_compile(fn):
    """`fn` under torch.compiler.disable: dynamo never traces into it (a
    call from a compiled frame is a graph break, and `fn` with everything
    it calls runs eagerly). Used on voxconv's entry points and module
    forwards.

    Why not less: tracing the coordinate manager's Python (maps keyed by
    coordinate sets that are new for every input) recompiled on every call
    (MiniMinkUNet on the H100: forward 1.32x, train step 1.57x eager). A
    wrapper that called the disabled function only when
    torch.compiler.is_compiling() said so was traced through on torch 2.11
    (compiled graphs held torch.ops.voxconv calls naming kernel maps by id,
    and a map freed with its last tensor was gone by the backward), and the
    module forwards dynamo compiled after each break are shared by every
    instance, so it recompiled them past its limit. With the module
    forwards disabled too, MiniMinkUNet's compiled train step ran at 1.01x
    eager (h100_2026-11-26_s16.md).

    Why not torch's wrapper alone: it swaps dynamo's frame callback out and
    back on every call, through several Python calls, also in plain eager
    code where no callback is set (1-4 us a module call on the lent hosts,
    disable_cost.py). The entry returned here asks the frame callback
    once (a C call): none set, and not exporting, means no compile is
    running on this thread, and `fn` is called directly; otherwise the
    call goes through torch's disabled wrapper, exactly as before. Dynamo
    sees the entry as torch.compiler.disable'd (the attributes torch's own
    wrappers carry: a graph break, never inlined), and its code object is
    marked skipped, as torch marks its non-recursive disable wrapper's, so
    that when a compiled frame calls it at run time dynamo does not try to
    compile the entry itself."""
    global _hooks
    disable = getattr(_compiler, "disable", None)
    if disable is None:  # torch < 2.1: nothing compiles
        return fn
    disabled = disable(fn)
    if _hooks is None:
        _hooks = _dynamo_hooks() or False
    if not _hooks:
        return disabled
    set_eval_frame, skip_code, is_exporting = _hooks

    def entry(*args, **kwargs):
        prior = set_eval_frame(None)
        if prior is None and not is_exporting():
            return fn(*args, **kwargs)
        set_eval_frame(prior)
        return disabled(*args, **kwargs)

    skip_code(entry.__code__)  # one code object for every entry: idempotent
    functools.update_wrapper(entry, fn)
    entry._torchdynamo_disable = True
    entry._torchdynamo_disable_msg = None
    entry._torchdynamo_disable_recursive = True
    return entry


def weighted(kind, x, w, km, cfg, layout=None):
    """conv (kind "conv") or depthwise of x and w through km with cfg =
    (fwd, dgrad, wgrad, fp16, det) as one tuple, as conv_geometry holds it
    (no unpacking and packing again on the hot path)."""
    x = x.contiguous()
    inf = _inference()
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad):
        meta = (km, kind, cfg, 0, inf, layout)
        if _transforms_active():
            return _pass_apply(x, w if layout is not None else w.contiguous(), meta)
        if layout is None:
            w = lib_w = w.contiguous()
        else:
            # the library view of the stored weight, made without a graph
            # (the node converts the weight's gradient back: to_stored)
            lib_w = layout.lib_view(w)
        y = _PASSES[kind][0](x, lib_w, km, cfg, inf)
        return _launched_pass_apply(x, w, meta, (y, None if layout is None else lib_w))
    if layout is not None:
        w = layout.to_lib(w)
    return _PASSES[kind][0](x, w.contiguous(), km, cfg, inf)


def conv(x, w, km, fwd, dgrad, wgrad, fp16, det, layout=None):
    """y = conv(x, w) through kernel map km (a KernelMap): the fast path
    (autograd.Function, scratch structs). Callers run outside torch.compile
    (outside_compile), so this is never traced. ``layout``: None (w is
    ``[K, Cin, Cout]``) or a WeightLayout saying how w is stored."""
    return weighted("conv", x, w, km, (fwd, dgrad, wgrad, fp16, det), layout)


def depthwise(x, w, km, fwd, dgrad, wgrad, fp16, det):
    return weighted("depthwise", x, w, km, (fwd, dgrad, wgrad, fp16, det))


def _recording(x):
    """Whether an op on x is recorded by autograd now."""
    return torch.is_grad_enabled() and x.requires_grad


def pool(x, km, mode):
    x = x.contiguous()
    if not _recording(x):
        return _pool_fwd(x, km, mode)
    if _transforms_active():
        return _pool_apply(x, km, mode)
    return _launched_pool_apply(x, km, mode, (_pool_fwd(x, km, mode),))


def unpool(x, km):
    x = x.contiguous()
    if not _recording(x):
        return _unpool_fwd(x, km)
    if _transforms_active():
        return _unpool_apply(x, km)
    return _launched_unpool_apply(x, km, (_unpool_fwd(x, km),))
