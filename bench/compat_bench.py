#!/usr/bin/env python3
"""Issue 21, target (b): the host time the compat layers add over native
voxconv modules, on the ports of tests/python (OpenPCDet's VoxelBackBone8x,
VoxelResBackBone8x and UNetV2 and Pointcept's SpUNet-v1m1 through
voxconv.compat.spconv; MinkowskiEngine's MinkUNet through
voxconv.compat.minkowski).

Each port is built twice:

* compat: the re-created upstream model (tests/python/ports_spconv.py,
  tests/python/ports_minkowski.py: the same classes the compat tests run);
* native: the same network written here with voxconv.SparseTensor,
  voxconv.nn.SparseConv3d / Sequential, torch BatchNorm1d / ReLU / Linear on
  the features, ``+`` and voxconv.cat, holding the compat model's weights
  (converted from spconv's [out, k0, k1, k2, in] and ME's offset order to
  voxconv's [K, in, out]; spconv's and ME's 1x1 convolutions, a matrix
  product in both engines, are torch.nn.Linear here).

The native networks ask for the same kernel maps as the compat layers
(spconv's SparseConv3d: expand=True with its padding and output bound; the
inverse convolutions: inverse=True; ME: strided, submanifold, transposed),
so both run the same GPU work and the difference is the layers' host cost.
SpUNet's k = s = 2 downsampling is asked for without the output bound that
spconv's shape rule gives (coordinates c >= 0 map to c // 2, always inside
(in - 2) // 2 + 1 for in = max + 96): the same map. The models' own code
around the layers (OpenPCDet's batch_dict, Pointcept's offset2batch and
sparse_shape, which reads the coordinates' maximum on the host) is kept in
the native versions too. The compat side's input tensor is made inside
the timed region (SparseConvTensor by the pcdet/Pointcept models
themselves, ME.SparseTensor before the call, with its duplicate check), and
so is the native side's voxconv.SparseTensor.

Before timing, the outputs of the two are compared (eval mode, no_grad;
coordinates equal, features to 1e-9) and so is the gradient of the input
features for one output gradient, in float64 on the CPU (the same weights,
the scans cropped to CHECK_CROP_M; why f64: see TOL); a mismatch is fatal.

Timed per port and variant, the two variants alternating in each round:
* forward: eval mode, torch.no_grad();
* fwd+bwd: train mode (BatchNorm batch statistics), forward + backward of
  a fixed random output gradient (gradients of every weight);
* tensor (MinkUNet only): building the input tensor alone, ME.SparseTensor
  (which looks for duplicate coordinates) against voxconv.SparseTensor; a
  part of forward's time, shown apart, not in the target's ratio.
Host issue time: perf_counter from the call to its return (no sync inside
the timed region, one before it); wall time: CUDA events around the same
region with one sync after it (perf_counter on the CPU, where both are the
same). The results are freed after the clock stops (freeing kernel maps
is not part of a forward's issue time), and gc.collect() runs before each
timed call. Median of --repeat after --warmup rounds (the autotuner runs in
the warm-up) and --settle-ms of idle. Ratios are compat / native; the
target is host <= 1.05 in forward and fwd+bwd of every port.

    python3 bench/compat_bench.py --json compat_bench.json            # GPU
    python3 bench/compat_bench.py --device cpu --crop 8 --repeat 2 --warmup 1
"""

import argparse
import gc
import json
import os
import statistics
import sys
import time
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
from bench_common import resolve_device, run_header  # noqa: E402  (bench/ is the script folder)
try:
    import voxconv
except ImportError:  # run from a source tree without installing
    sys.path.insert(0, os.path.join(REPO, "python"))
    import voxconv
sys.path.insert(0, os.path.join(REPO, "tests", "python"))  # the ports

import voxconv.compat.minkowski as ME  # noqa: E402
import voxconv.compat.spconv as spconv  # noqa: E402
from voxconv import nn as vnn  # noqa: E402

import ports_minkowski as pm  # noqa: E402
import ports_spconv as ps  # noqa: E402

PORTS = ["VoxelBackBone8x", "VoxelResBackBone8x", "UNetV2", "SpUNet", "MinkUNet"]
DTYPES = {"f32": torch.float32, "f16": torch.float16, "f64": torch.float64}
# The equality check before timing (check_equal) runs in float64 on the
# CPU, the library's reference path, whatever the timed device and dtype:
# in f32 no bound follows from the format for a whole network's input
# gradient. MinkUNet14's f32 input gradient differs from its f64 result by
# 6.6e-3 (largest difference over largest element; 754 of 50,518 rows over
# 1e-4; CPU, eighteenth session): rows whose 27 x C terms per level cancel
# keep their rounding through 14 levels, an amplification of about 5.5e4
# f32 ulps. Two f32 evaluations that sum in different orders differ by up
# to twice that, and more once the compat layers' maps number offsets as
# MinkowskiEngine does (a different summation order on every layer): 2.15e-2
# on one row of 53,365 (H100, nineteenth session). In f64 the same
# amplification gives about 5.5e4 x 2^-53 = 6e-12; the bounds below leave
# 100x over that, and a wiring mistake (a weight or a map that differs) is
# off by O(1).
TOL = {torch.float64: 1e-9, torch.float32: 1e-4, torch.float16: 2e-2}
GRAD_TOL = {torch.float64: 1e-9, torch.float32: 2e-2, torch.float16: 0.5}
CHECK_CROP_M = 16.0  # the f64 CPU check's crop (a few thousand voxels: seconds)
HOST_TARGET = 1.05


def progress(msg):
    print(f"[compat_bench] {msg}", file=sys.stderr, flush=True)


def fail(msg):
    print(f"compat_bench: error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(1)


# ==== native networks ==================================================================
# Module names mirror the compat models' (so weights transfer by name, see
# transfer_weights); forward passes are written for voxconv.SparseTensor.

def conv_out(shape, k, s, p):
    k, s, p = ([v] * 3 if isinstance(v, int) else list(v) for v in (k, s, p))
    return tuple((shape[a] + 2 * p[a] - k[a]) // s[a] + 1 for a in range(3))


def pcdet_bn(c):
    return nn.BatchNorm1d(c, eps=1e-3, momentum=0.01)


def subm(cin, cout, k=3, bias=False):
    return vnn.SparseConv3d(cin, cout, k, bias=bias)


def down(cin, cout, k, s, p, out_shape):
    """spconv's SparseConv3d(k, s, p): the expanding map with spconv's bound."""
    return vnn.SparseConv3d(cin, cout, k, s, bias=False, padding=p, expand=True,
                            out_shape=out_shape)


def inverse(cin, cout, k, s, p, out_shape):
    """spconv's SparseInverseConv3d of the down(.., k, s, p, out_shape) layer."""
    return vnn.SparseConv3d(cin, cout, k, s, bias=False, padding=p, expand=True,
                            out_shape=out_shape, inverse=True)


def cbr(conv, c, bn=pcdet_bn):
    return vnn.Sequential(conv, bn(c), nn.ReLU())


def sparse_shape(grid_size):
    return [int(v) for v in (np.asarray(grid_size)[::-1] + [1, 0, 0])]


class NativeSparseBasicBlock(nn.Module):
    """OpenPCDet's SparseBasicBlock: spconv_backbone.py's (bias per its rule:
    True when a norm follows) and spconv_unet.py's (bias=False)."""

    def __init__(self, inplanes, planes, bias=None):
        super().__init__()
        bias = True if bias is None else bias  # norm_fn given: bias = True
        self.conv1 = subm(inplanes, planes, bias=bias)
        self.bn1 = pcdet_bn(planes)
        self.relu = nn.ReLU()
        self.conv2 = subm(planes, planes, bias=bias)
        self.bn2 = pcdet_bn(planes)

    def forward(self, x):
        out = self.conv1(x)
        out = out.replace_feature(self.relu(self.bn1(out.feats)))
        out = self.conv2(out)
        return out.replace_feature(self.relu(self.bn2(out.feats) + x.feats))


class NativeVoxelBackBone8x(nn.Module):
    """VoxelBackBone8x (res=False) and VoxelResBackBone8x (res=True)."""

    def __init__(self, input_channels, grid_size, res=False, last_pad=0):
        super().__init__()
        ss0 = sparse_shape(grid_size)
        ss1 = conv_out(ss0, 3, 2, 1)
        ss2 = conv_out(ss1, 3, 2, 1)
        ss3 = conv_out(ss2, 3, 2, (0, 1, 1))
        ss4 = conv_out(ss3, (3, 1, 1), (2, 1, 1), last_pad)
        self.levels = (ss1, ss2, ss3)
        c4 = 128 if res else 64

        def body(c):
            if res:
                return [NativeSparseBasicBlock(c, c), NativeSparseBasicBlock(c, c)]
            return [cbr(subm(c, c), c), cbr(subm(c, c), c)]

        self.conv_input = cbr(subm(input_channels, 16), 16)
        self.conv1 = vnn.Sequential(*(body(16) if res else [cbr(subm(16, 16), 16)]))
        self.conv2 = vnn.Sequential(cbr(down(16, 32, 3, 2, 1, ss1), 32), *body(32))
        self.conv3 = vnn.Sequential(cbr(down(32, 64, 3, 2, 1, ss2), 64), *body(64))
        self.conv4 = vnn.Sequential(cbr(down(64, c4, 3, 2, (0, 1, 1), ss3), c4), *body(c4))
        self.conv_out = cbr(down(c4, 128, (3, 1, 1), (2, 1, 1), last_pad, ss4), 128)

    def forward(self, batch_dict):
        x = voxconv.SparseTensor(batch_dict["voxel_features"],
                                 batch_dict["voxel_coords"].int())
        x = self.conv_input(x)
        x_conv1 = self.conv1(x)
        x_conv2 = self.conv2(x_conv1)
        x_conv3 = self.conv3(x_conv2)
        x_conv4 = self.conv4(x_conv3)
        out = self.conv_out(x_conv4)
        batch_dict.update({"encoded_spconv_tensor": out, "encoded_spconv_tensor_stride": 8})
        batch_dict.update({"multi_scale_3d_features": {
            "x_conv1": x_conv1, "x_conv2": x_conv2, "x_conv3": x_conv3, "x_conv4": x_conv4}})
        batch_dict.update({"multi_scale_3d_strides": {
            "x_conv1": 1, "x_conv2": 2, "x_conv3": 4, "x_conv4": 8}})
        return batch_dict


class NativeUNetV2(nn.Module):
    def __init__(self, input_channels, grid_size, voxel_size, point_cloud_range, last_pad=0):
        super().__init__()
        self.voxel_size, self.point_cloud_range = voxel_size, point_cloud_range
        ss0 = sparse_shape(grid_size)
        ss1 = conv_out(ss0, 3, 2, 1)
        ss2 = conv_out(ss1, 3, 2, 1)
        ss3 = conv_out(ss2, 3, 2, (0, 1, 1))
        ss4 = conv_out(ss3, (3, 1, 1), (2, 1, 1), last_pad)

        def subm_block(cin, cout):
            return cbr(subm(cin, cout), cout)

        self.conv_input = subm_block(input_channels, 16)
        self.conv1 = vnn.Sequential(subm_block(16, 16))
        self.conv2 = vnn.Sequential(cbr(down(16, 32, 3, 2, 1, ss1), 32), subm_block(32, 32),
                                    subm_block(32, 32))
        self.conv3 = vnn.Sequential(cbr(down(32, 64, 3, 2, 1, ss2), 64), subm_block(64, 64),
                                    subm_block(64, 64))
        self.conv4 = vnn.Sequential(cbr(down(64, 64, 3, 2, (0, 1, 1), ss3), 64),
                                    subm_block(64, 64), subm_block(64, 64))
        self.conv_out = cbr(down(64, 128, (3, 1, 1), (2, 1, 1), last_pad, ss4), 128)
        self.conv_up_t4 = NativeSparseBasicBlock(64, 64, bias=False)
        self.conv_up_m4 = subm_block(128, 64)
        self.inv_conv4 = cbr(inverse(64, 64, 3, 2, (0, 1, 1), ss3), 64)
        self.conv_up_t3 = NativeSparseBasicBlock(64, 64, bias=False)
        self.conv_up_m3 = subm_block(128, 64)
        self.inv_conv3 = cbr(inverse(64, 32, 3, 2, 1, ss2), 32)
        self.conv_up_t2 = NativeSparseBasicBlock(32, 32, bias=False)
        self.conv_up_m2 = subm_block(64, 32)
        self.inv_conv2 = cbr(inverse(32, 16, 3, 2, 1, ss1), 16)
        self.conv_up_t1 = NativeSparseBasicBlock(16, 16, bias=False)
        self.conv_up_m1 = subm_block(32, 16)
        self.conv5 = vnn.Sequential(subm_block(16, 16))

    @staticmethod
    def up(x, conv_inv, fine):
        """An inverse block: the inverse convolution onto `fine` (the input of
        the convolution it inverts), then BatchNorm and ReLU."""
        conv, bn, relu = conv_inv
        y = conv(x, out_coords=fine)
        return y.replace_feature(relu(bn(y.feats)))

    def ur_block(self, x_lateral, x_bottom, conv_t, conv_m):
        x_trans = conv_t(x_lateral)
        x = voxconv.cat([x_bottom, x_trans])
        x_m = conv_m(x)
        n, c = x.feats.shape
        return x_m + x.feats.view(n, x_m.feats.shape[1], -1).sum(dim=2)

    def forward(self, batch_dict):
        x = voxconv.SparseTensor(batch_dict["voxel_features"],
                                 batch_dict["voxel_coords"].int())
        x = self.conv_input(x)
        x_conv1 = self.conv1(x)
        x_conv2 = self.conv2(x_conv1)
        x_conv3 = self.conv3(x_conv2)
        x_conv4 = self.conv4(x_conv3)
        batch_dict["encoded_spconv_tensor"] = self.conv_out(x_conv4)
        batch_dict["encoded_spconv_tensor_stride"] = 8
        x_up4 = self.up(self.ur_block(x_conv4, x_conv4, self.conv_up_t4, self.conv_up_m4),
                        self.inv_conv4, x_conv3)
        x_up3 = self.up(self.ur_block(x_conv3, x_up4, self.conv_up_t3, self.conv_up_m3),
                        self.inv_conv3, x_conv2)
        x_up2 = self.up(self.ur_block(x_conv2, x_up3, self.conv_up_t2, self.conv_up_m2),
                        self.inv_conv2, x_conv1)
        x_up1 = self.ur_block(x_conv1, x_up2, self.conv_up_t1, self.conv_up_m1)
        x_up1 = self.conv5(x_up1)
        batch_dict["point_features"] = x_up1.feats
        c = x_up1.coords
        point_coords = ps.get_voxel_centers(c[:, 1:], downsample_times=1,
                                            voxel_size=self.voxel_size,
                                            point_cloud_range=self.point_cloud_range)
        batch_dict["point_coords"] = torch.cat((c[:, 0:1].float(), point_coords), dim=1)
        return batch_dict


class NativeBasicBlock(nn.Module):
    """Pointcept's SpUNet BasicBlock (1x1 projection = Linear)."""

    def __init__(self, in_channels, embed_channels, bn):
        super().__init__()
        if in_channels == embed_channels:
            self.proj = vnn.Sequential(nn.Identity())
        else:
            self.proj = vnn.Sequential(nn.Linear(in_channels, embed_channels, bias=False),
                                       bn(embed_channels))
        self.conv1 = subm(in_channels, embed_channels)
        self.bn1 = bn(embed_channels)
        self.relu = nn.ReLU()
        self.conv2 = subm(embed_channels, embed_channels)
        self.bn2 = bn(embed_channels)

    def forward(self, x):
        out = self.conv1(x)
        out = out.replace_feature(self.relu(self.bn1(out.feats)))
        out = self.conv2(out)
        return out.replace_feature(self.relu(self.bn2(out.feats) + self.proj(x).feats))


class NativeSpUNet(nn.Module):
    """SpUNet-v1m1 (enc_mode False); channels and layers as SpUNetBase's."""

    def __init__(self, in_channels, num_classes, base_channels=32,
                 channels=(32, 64, 128, 256, 256, 128, 96, 96), layers=(2, 3, 4, 6, 2, 2, 2, 2)):
        super().__init__()
        self.num_stages = len(layers) // 2
        bn = pcdet_bn  # the same eps / momentum
        self.conv_input = cbr(subm(in_channels, base_channels, 5), base_channels, bn)
        enc_channels, dec_channels = base_channels, channels[-1]
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        self.enc, self.dec = nn.ModuleList(), nn.ModuleList()
        for s in range(self.num_stages):
            self.down.append(cbr(vnn.SparseConv3d(enc_channels, channels[s], 2, 2, bias=False,
                                                  padding=0, expand=True), channels[s], bn))
            self.enc.append(vnn.Sequential(OrderedDict(
                (f"block{i}", NativeBasicBlock(channels[s], channels[s], bn))
                for i in range(layers[s]))))
            self.up.append(cbr(vnn.SparseConv3d(channels[len(channels) - s - 2], dec_channels, 2,
                                                2, bias=False, padding=0, expand=True,
                                                inverse=True), dec_channels, bn))
            self.dec.append(vnn.Sequential(OrderedDict(
                (f"block{i}", NativeBasicBlock(dec_channels + enc_channels if i == 0
                                               else dec_channels, dec_channels, bn))
                for i in range(layers[len(channels) - s - 1]))))
            enc_channels = channels[s]
            dec_channels = channels[len(channels) - s - 2]
        self.final = (nn.Linear(channels[-1], num_classes, bias=True) if num_classes > 0
                      else nn.Identity())

    def forward(self, input_dict):
        grid_coord, feat, offset = (input_dict["grid_coord"], input_dict["feat"],
                                    input_dict["offset"])
        batch = ps.offset2batch(offset)
        # upstream's spatial bound: voxconv needs none here (see the module
        # doc), kept so that both variants do the same host work
        torch.add(torch.max(grid_coord, dim=0).values, 96).tolist()
        x = voxconv.SparseTensor(feat, torch.cat([batch.unsqueeze(-1).int(), grid_coord.int()],
                                                 dim=1).contiguous())
        x = self.conv_input(x)
        skips = [x]
        for s in range(self.num_stages):
            x = self.enc[s](self.down[s](x))
            skips.append(x)
        x = skips.pop(-1)
        for s in reversed(range(self.num_stages)):
            conv, bn, relu = self.up[s]
            skip = skips.pop(-1)
            x = conv(x, out_coords=skip)
            x = x.replace_feature(relu(bn(x.feats)))
            x = self.dec[s](voxconv.cat([x, skip]))
        return self.final(x.feats)


class NativeMinkBlock(nn.Module):
    """MinkowskiEngine's BasicBlock (stride 1, dilation 1)."""

    def __init__(self, inplanes, planes, downsample=None, bn_momentum=0.1):
        super().__init__()
        self.conv1 = subm(inplanes, planes)
        self.norm1 = nn.BatchNorm1d(planes, momentum=bn_momentum)
        self.conv2 = subm(planes, planes)
        self.norm2 = nn.BatchNorm1d(planes, momentum=bn_momentum)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        out = self.conv1(x)
        out = out.replace_feature(self.relu(self.norm1(out.feats)))
        out = self.conv2(out)
        out = out.replace_feature(self.norm2(out.feats))
        residual = self.downsample(x) if self.downsample is not None else x
        out += residual
        return out.replace_feature(self.relu(out.feats))


class NativeMinkUNet(nn.Module):
    """examples/minkunet.py's MinkUNetBase with BasicBlock; LAYERS / PLANES /
    INIT_DIM of the compat class given."""

    def __init__(self, compat_cls, in_channels, out_channels):
        super().__init__()
        P, L, init = compat_cls.PLANES, compat_cls.LAYERS, compat_cls.INIT_DIM
        self.inplanes = init

        def make_layer(planes, blocks):
            ds = None
            if self.inplanes != planes:
                ds = vnn.Sequential(nn.Linear(self.inplanes, planes, bias=False),
                                    nn.BatchNorm1d(planes))
            layers = [NativeMinkBlock(self.inplanes, planes, ds)]
            self.inplanes = planes
            layers += [NativeMinkBlock(planes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def tr(cin, cout):
            return vnn.SparseConv3d(cin, cout, 2, 2, bias=False, transposed=True)

        self.conv0p1s1 = subm(in_channels, init, 5)
        self.bn0 = nn.BatchNorm1d(init)
        self.conv1p1s2 = vnn.SparseConv3d(init, init, 2, 2, bias=False)
        self.bn1 = nn.BatchNorm1d(init)
        self.block1 = make_layer(P[0], L[0])
        self.conv2p2s2 = vnn.SparseConv3d(self.inplanes, self.inplanes, 2, 2, bias=False)
        self.bn2 = nn.BatchNorm1d(self.inplanes)
        self.block2 = make_layer(P[1], L[1])
        self.conv3p4s2 = vnn.SparseConv3d(self.inplanes, self.inplanes, 2, 2, bias=False)
        self.bn3 = nn.BatchNorm1d(self.inplanes)
        self.block3 = make_layer(P[2], L[2])
        self.conv4p8s2 = vnn.SparseConv3d(self.inplanes, self.inplanes, 2, 2, bias=False)
        self.bn4 = nn.BatchNorm1d(self.inplanes)
        self.block4 = make_layer(P[3], L[3])
        self.convtr4p16s2 = tr(self.inplanes, P[4])
        self.bntr4 = nn.BatchNorm1d(P[4])
        self.inplanes = P[4] + P[2]
        self.block5 = make_layer(P[4], L[4])
        self.convtr5p8s2 = tr(self.inplanes, P[5])
        self.bntr5 = nn.BatchNorm1d(P[5])
        self.inplanes = P[5] + P[1]
        self.block6 = make_layer(P[5], L[5])
        self.convtr6p4s2 = tr(self.inplanes, P[6])
        self.bntr6 = nn.BatchNorm1d(P[6])
        self.inplanes = P[6] + P[0]
        self.block7 = make_layer(P[6], L[6])
        self.convtr7p2s2 = tr(self.inplanes, P[7])
        self.bntr7 = nn.BatchNorm1d(P[7])
        self.inplanes = P[7] + init
        self.block8 = make_layer(P[7], L[7])
        self.final = nn.Linear(P[7], out_channels, bias=True)
        self.relu = nn.ReLU(inplace=True)

    def cbr(self, conv, bn, x):
        x = conv(x)
        return x.replace_feature(self.relu(bn(x.feats)))

    def forward(self, x):
        out_p1 = self.cbr(self.conv0p1s1, self.bn0, x)
        out_b1p2 = self.block1(self.cbr(self.conv1p1s2, self.bn1, out_p1))
        out_b2p4 = self.block2(self.cbr(self.conv2p2s2, self.bn2, out_b1p2))
        out_b3p8 = self.block3(self.cbr(self.conv3p4s2, self.bn3, out_b2p4))
        out = self.block4(self.cbr(self.conv4p8s2, self.bn4, out_b3p8))
        out = self.cbr(self.convtr4p16s2, self.bntr4, out)
        out = self.block5(voxconv.cat([out, out_b3p8]))
        out = self.cbr(self.convtr5p8s2, self.bntr5, out)
        out = self.block6(voxconv.cat([out, out_b2p4]))
        out = self.cbr(self.convtr6p4s2, self.bntr6, out)
        out = self.block7(voxconv.cat([out, out_b1p2]))
        out = self.cbr(self.convtr7p2s2, self.bntr7, out)
        out = self.block8(voxconv.cat([out, out_p1]))
        return out.replace_feature(self.final(out.feats))


# ==== weights: compat -> native ===========================================================

def _set(param, value):
    if tuple(param.shape) != tuple(value.shape):
        raise ValueError(f"shape {tuple(value.shape)} for a parameter of {tuple(param.shape)}")
    param.copy_(value)


@torch.no_grad()
def transfer_weights(compat, native):
    """Copies every parameter and buffer of the compat model into the native
    one, module by module under the same names; fails unless every native
    module with state got one."""
    nmods = dict(native.named_modules())
    done = set()

    def target(name, kinds):
        nm = nmods.get(name)
        if not isinstance(nm, kinds):
            fail(f"weights: native module {name!r} is {type(nm).__name__}, want "
                 f"{kinds}")
        done.add(name)
        return nm

    for name, m in compat.named_modules():
        parent = name.rsplit(".", 1)[0] if "." in name else ""
        if isinstance(m, spconv.SparseConvolution):
            if m.conv1x1:  # spconv: features @ weight.view(in, out)
                nm = target(name, nn.Linear)
                _set(nm.weight, m.weight.reshape(m.in_channels, m.out_channels).t())
            else:
                nm = target(name, vnn.SparseConv3d)
                _set(nm.weight, m.weight.permute(1, 2, 3, 4, 0).reshape(nm.weight.shape))
            if m.bias is not None:
                _set(nm.bias, m.bias)
        elif isinstance(m, ME.MinkowskiConvolutionBase):
            if m.use_mm:
                nm = target(name, nn.Linear)
                _set(nm.weight, m.kernel.t())
            else:
                nm = target(name, vnn.SparseConv3d)
                _set(nm.weight, ME.to_voxconv_kernel(m.kernel,
                                                     m.kernel_generator.kernel_size))
            if m.bias is not None:
                _set(nm.bias, m.bias.reshape(-1))
        elif isinstance(m, ME.MinkowskiBatchNorm):
            target(name, nn.BatchNorm1d).load_state_dict(m.bn.state_dict())
        elif isinstance(m, nn.BatchNorm1d) and parent not in done:
            target(name, nn.BatchNorm1d).load_state_dict(m.state_dict())
    for name, nm in native.named_modules():
        has_state = (next(nm.parameters(recurse=False), None) is not None
                     or next(nm.buffers(recurse=False), None) is not None)
        if has_state and name not in done:
            fail(f"weights: native module {name!r} ({type(nm).__name__}) got no weights")
    nc = sum(p.numel() for p in compat.parameters())
    nn_ = sum(p.numel() for p in native.parameters())
    if nc != nn_:
        fail(f"weights: compat model has {nc} parameters, native {nn_}")


# ==== inputs ============================================================================

def crop_xy(points, size):
    """Points within a size x size metre square around the median (x, y)."""
    if not size:
        return points
    c = np.median(points[:, :2], 0)
    keep = (np.abs(points[:, :2] - c) < size / 2).all(1)
    return points[keep]


class Port:
    """One port: the compat and native models, their inputs, and how to
    call them and read their outputs."""

    def __init__(self, name, compat, native, make_inputs, outputs, n_voxels, info,
                 input_is_tensor=False):
        self.name, self.compat, self.native = name, compat, native
        self.input_is_tensor = input_is_tensor  # make_inputs builds the sparse tensor
        self.make_inputs = make_inputs  # (variant, feats) -> call argument
        self.outputs = outputs          # (variant, result) -> [(coords or None, feats)]
        self.n_voxels, self.info = n_voxels, info


def pcdet_port(name, data, device, dtype, crop):
    pts = ps.load_scan(data["semkitti"])
    r = ps.PC_RANGE  # points outside are dropped by the pipeline: crop among the rest
    pts = pts[(pts[:, 0] >= r[0]) & (pts[:, 0] < r[3]) & (pts[:, 1] >= r[1]) & (pts[:, 1] < r[4])]
    cloud = ps.voxelize_pcdet(crop_xy(pts, crop))
    inp = ps.pcdet_input([cloud], device, dtype)
    torch.manual_seed(0)
    if name == "UNetV2":
        kw = {"voxel_size": ps.VOXEL_SIZE, "point_cloud_range": ps.PC_RANGE}
        compat = ps.UNetV2({}, 4, ps.GRID_SIZE, **kw)
        native = NativeUNetV2(4, ps.GRID_SIZE, **kw)
    elif name == "VoxelResBackBone8x":
        compat = ps.VoxelResBackBone8x({}, 4, ps.GRID_SIZE)
        native = NativeVoxelBackBone8x(4, ps.GRID_SIZE, res=True)
    else:
        compat = ps.VoxelBackBone8x({}, 4, ps.GRID_SIZE)
        native = NativeVoxelBackBone8x(4, ps.GRID_SIZE)

    def make_inputs(variant, feats):
        return dict(inp, voxel_features=feats)

    def outputs(variant, bd):
        def pair(t):
            return ((t.indices, t.features) if variant == "compat" else (t.coords, t.feats))
        outs = [pair(bd["encoded_spconv_tensor"])]
        if "multi_scale_3d_features" in bd:
            outs += [pair(bd["multi_scale_3d_features"][k])
                     for k in ("x_conv1", "x_conv2", "x_conv3", "x_conv4")]
        if "point_features" in bd:  # the decoder's output comes first (backward's)
            outs.insert(0, (bd["point_coords"], bd["point_features"]))
        return outs

    return Port(name, compat, native, make_inputs, outputs, len(cloud[0]),
                {"input": "SemanticKITTI 00/000000, OpenPCDet KITTI voxels (0.05, 0.05, 0.1)",
                 "feats": inp["voxel_features"]})


def spunet_port(data, device, dtype, crop):
    clouds = [ps.pointcept_voxelize(crop_xy(ps.load_scan(data[k]), crop), 0.1)
              for k in ("kitti8", "semkitti")]
    inp = ps.spunet_input(clouds, device, dtype)
    torch.manual_seed(0)
    compat = ps.SpUNetBase(4, 19)
    native = NativeSpUNet(4, 19)

    def make_inputs(variant, feats):
        return dict(inp, feat=feats)

    def outputs(variant, y):
        return [(None, y)]

    return Port("SpUNet", compat, native, make_inputs, outputs,
                sum(len(c) for c, _ in clouds),
                {"input": "KITTI 000008 + SemanticKITTI 00/000000, Pointcept grid 0.1 m "
                          "(batch of 2)", "feats": inp["feat"]})


def minkunet_port(data, device, dtype, crop, cls_name):
    pts = np.fromfile(data["scannet"], "<f4").reshape(-1, 6)
    pts = crop_xy(pts, crop)
    xyz = pts[:, :3]
    coords = np.floor((xyz - xyz.min(0)) / 0.05).astype(np.int32)
    q, f = ME.utils.sparse_quantize(coords, pts[:, 3:] / 255.0)
    c = ME.utils.batched_coordinates([q]).to(device)
    feats = torch.as_tensor(f).to(device, dtype)
    cls = getattr(pm, cls_name)
    torch.manual_seed(0)
    compat = cls(3, 20, D=3)
    native = NativeMinkUNet(cls, 3, 20)

    def make_inputs(variant, x):
        return ME.SparseTensor(x, c) if variant == "compat" else voxconv.SparseTensor(x, c)

    def outputs(variant, y):
        return [(y.C, y.F) if variant == "compat" else (y.coords, y.feats)]

    return Port("MinkUNet", compat, native, make_inputs, outputs, len(c),
                {"input": f"ScanNet scene0000_00 at 5 cm, {cls_name}", "feats": feats},
                input_is_tensor=True)


def make_port(name, args):
    data = {"semkitti": os.path.join(args.data_dir, "scans", "semantickitti_00_000000.bin"),
            "kitti8": os.path.join(args.data_dir, "scans", "kitti_000008.bin"),
            "scannet": os.path.join(args.data_dir, "scans", "scannet_scene0000_00.bin")}
    for p in data.values():
        if not os.path.exists(p):
            fail(f"{p} not found (--data-dir or $VOXCONV_DATA_DIR: the folder holding scans/)")
    if name in ("VoxelBackBone8x", "VoxelResBackBone8x", "UNetV2"):
        port = pcdet_port(name, data, args.device, args.dtype, args.crop)
    elif name == "SpUNet":
        port = spunet_port(data, args.device, args.dtype, args.crop)
    else:
        port = minkunet_port(data, args.device, args.dtype, args.crop, args.minkunet)
    # BatchNorm statistics that are not the identity, so the eval-mode check
    # exercises them (same values in both: copied below)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in port.compat.modules():
            if isinstance(m, nn.BatchNorm1d):
                n = m.num_features
                m.running_mean.copy_(torch.randn(n, generator=gen) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=gen) + 0.5)
                m.weight.copy_(torch.rand(n, generator=gen) + 0.5)
                m.bias.copy_(torch.randn(n, generator=gen) * 0.1)
    transfer_weights(port.compat, port.native)
    port.compat.to(args.device, args.dtype)
    port.native.to(args.device, args.dtype)
    return port


# ==== checks and timing =====================================================================

def max_rel(a, b):
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30)) if b.numel() else 0.0


def model_of(port, variant):
    return port.compat if variant == "compat" else port.native


def run(port, variant, feats):
    return model_of(port, variant)(port.make_inputs(variant, feats))


def check_equal_f64(name, args):
    """check_equal on a float64 CPU copy of port `name` (the same weights:
    the same seed; a CHECK_CROP_M crop of the same scans, or the timed
    crop when that is smaller). Why f64 on the CPU: see TOL."""
    a = argparse.Namespace(**vars(args))
    a.device, a.dtype = torch.device("cpu"), torch.float64
    a.crop = min(args.crop, CHECK_CROP_M) if args.crop else CHECK_CROP_M
    port = make_port(name, a)
    return check_equal(port, TOL[torch.float64], GRAD_TOL[torch.float64]) + (
        port.n_voxels,)


def check_equal(port, tol, grad_tol):
    """Outputs (coordinates and features) and input-feature gradients of the
    two variants, eval mode (tolerances: TOL, GRAD_TOL). Returns the
    largest relative differences."""
    feats0 = port.info["feats"]
    worst = 0.0
    res, grads = {}, {}
    for v in ("compat", "native"):
        model_of(port, v).eval()
        with torch.no_grad():
            res[v] = port.outputs(v, run(port, v, feats0))
    if len(res["compat"]) != len(res["native"]):
        fail(f"{port.name}: the variants return different outputs")
    for (cc, fc), (cn, fn) in zip(res["compat"], res["native"]):
        if cc is not None and not torch.equal(cc.cpu(), cn.cpu()):
            fail(f"{port.name}: compat and native outputs have different coordinates "
                 f"({tuple(cc.shape)} vs {tuple(cn.shape)})")
        if fc.shape != fn.shape:
            fail(f"{port.name}: feature shapes {tuple(fc.shape)} vs {tuple(fn.shape)}")
        worst = max(worst, max_rel(fn, fc))
    g = torch.randn_like(res["compat"][0][1])
    for v in ("compat", "native"):
        f = feats0.detach().clone().requires_grad_(True)
        port.outputs(v, run(port, v, f))[0][1].backward(g)
        grads[v] = f.grad
    gerr = max_rel(grads["native"], grads["compat"])
    for m in (port.compat, port.native):
        m.zero_grad(set_to_none=True)
    if gerr > grad_tol:
        d = (grads["native"] - grads["compat"]).abs().amax(1)
        bad = (d > grad_tol * grads["compat"].abs().max()).nonzero().flatten()
        progress(f"{port.name}: input gradient rows over tolerance: {len(bad)} of {len(d)} "
                 f"(first {bad[:8].tolist()})")
    if worst > tol or gerr > grad_tol:
        fail(f"{port.name}: compat and native differ: outputs max rel {worst:.3g} "
             f"(tolerance {tol:g}), input gradient max rel {gerr:.3g} (tolerance "
             f"{grad_tol:g})")
    return worst, gerr


class Clock:
    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def time(self, fn):
        """(host ms, wall ms, result) of fn(): host = perf_counter to fn's
        return; wall = CUDA events around it with a sync after (GPU), else
        host. The result is handed back so that freeing it (tensors, kernel
        maps) happens outside the timed region."""
        gc.collect()
        if self.cuda:
            torch.cuda.synchronize()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            t0 = time.perf_counter()
            out = fn()
            t1 = time.perf_counter()
            e.record()
            e.synchronize()
            return 1e3 * (t1 - t0), s.elapsed_time(e), out
        t0 = time.perf_counter()
        out = fn()
        ms = 1e3 * (time.perf_counter() - t0)
        return ms, ms, out


def _quantile(sorted_xs, q):
    """Linear-interpolation quantile of a sorted non-empty list."""
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def bench_port(port, args, clock):
    feats = port.info["feats"]
    with torch.no_grad():
        port.native.eval()
        y = port.outputs("native", run(port, "native", feats))[0][1]
    gout = torch.randn_like(y)

    def forward(v):
        with torch.no_grad():
            return run(port, v, feats)

    def fwd_bwd(v):
        y = run(port, v, feats)
        port.outputs(v, y)[0][1].backward(gout)
        return y

    def tensor_only(v):
        with torch.no_grad():
            return port.make_inputs(v, feats)

    modes = {"forward": forward, "fwd+bwd": fwd_bwd}
    if port.input_is_tensor:  # ME.SparseTensor (with its duplicate check) vs native
        modes["tensor"] = tensor_only
    out = {}
    for mode, fn in modes.items():
        train = mode == "fwd+bwd"
        for v in ("compat", "native"):
            model_of(port, v).train(train)
        samples = {"compat": [], "native": []}
        for rnd in range(args.warmup + args.repeat):
            if rnd == args.warmup and args.settle_ms:
                time.sleep(args.settle_ms / 1e3)  # clocks back up after tuning bursts
            order = ("compat", "native") if rnd % 2 == 0 else ("native", "compat")
            for v in order:
                if train:
                    model_of(port, v).zero_grad(set_to_none=True)
                host, wall, res = clock.time(lambda: fn(v))
                del res
                if rnd >= args.warmup:
                    samples[v].append((host, wall))
        r = {}
        for v in ("compat", "native"):
            r[v] = {"host_ms": statistics.median(h for h, _ in samples[v]),
                    "wall_ms": statistics.median(w for _, w in samples[v]),
                    "host_min_ms": min(h for h, _ in samples[v]),
                    "wall_min_ms": min(w for _, w in samples[v])}
        r["host_ratio"] = r["compat"]["host_ms"] / r["native"]["host_ms"]
        r["wall_ratio"] = r["compat"]["wall_ms"] / r["native"]["wall_ms"]
        # Paired: each round's compat / native (the two ran back to back),
        # so a host whose speed drifts between rounds moves both sides of
        # a ratio alike; median and quartiles of those ratios.
        paired = sorted(c[0] / n[0] for c, n in zip(samples["compat"], samples["native"]))
        r["host_ratio_paired"] = statistics.median(paired)
        r["host_ratio_paired_q1_q3"] = (_quantile(paired, 0.25), _quantile(paired, 0.75))
        out[mode] = r
    for m in (port.compat, port.native):
        m.zero_grad(set_to_none=True)
        m.eval()
    return out


# ==== main ==============================================================================

def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="cuda (default when present) or cpu")
    ap.add_argument("--ports", default=",".join(PORTS), help=f"comma list of {PORTS}")
    ap.add_argument("--minkunet", default="MinkUNet14",
                    choices=["MinkUNet14", "MinkUNet18", "MinkUNet14A"])
    ap.add_argument("--dtype", default="f32", choices=sorted(DTYPES))
    ap.add_argument("--crop", type=float, default=0.0,
                    help="keep only points within a square of this many metres around the "
                         "scan's median (x, y) (CPU smoke test; default: whole scans)")
    ap.add_argument("--repeat", type=int, default=None, help="timed rounds (GPU 20, CPU 3)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed rounds (GPU 5, CPU 1)")
    ap.add_argument("--settle-ms", type=int, default=None,
                    help="idle time after the warm-up rounds of each mode (GPU 1000, CPU 0): "
                         "the clock recovers from the autotuner's bursts")
    ap.add_argument("--data-dir", default=None,
                    help="folder holding scans/ (default $VOXCONV_DATA_DIR, else "
                         "../shared/data beside the repository)")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    dev = args.device or ("cuda" if torch.cuda.is_available() and voxconv.has_cuda()
                          else "cpu")
    args.device = resolve_device(ap, dev)
    cuda = args.device.type == "cuda"
    args.dtype = DTYPES[args.dtype]
    args.ports = [p.strip() for p in args.ports.split(",") if p.strip()]
    if not args.ports or any(p not in PORTS for p in args.ports):
        ap.error(f"--ports: want a subset of {','.join(PORTS)}")
    args.repeat = args.repeat if args.repeat is not None else (20 if cuda else 3)
    args.warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    args.settle_ms = args.settle_ms if args.settle_ms is not None else (1000 if cuda else 0)
    if args.repeat < 1 or args.warmup < 1 or args.settle_ms < 0:
        ap.error("--repeat and --warmup want at least 1, --settle-ms at least 0")
    if cuda and args.repeat < 10:
        progress(f"note: --repeat {args.repeat}: BENCHMARKS.md asks for the median of >= 10")
    args.data_dir = args.data_dir or os.environ.get(
        "VOXCONV_DATA_DIR", os.path.join(os.path.dirname(REPO), "shared", "data"))
    return args


def main(argv=None):
    args = parse_args(argv)
    cuda = args.device.type == "cuda"
    clock = Clock(args.device)
    rec = {**run_header("bench/compat_bench.py", args.device, REPO),
           "dtype": str(args.dtype).split(".")[-1],
           "crop_m": args.crop or None,
           "protocol": {"repeat": args.repeat, "warmup": args.warmup,
                        "settle_ms": args.settle_ms,
                        "host": "perf_counter from the call to its return, sync before",
                        "wall": "CUDA events around the call, sync after" if cuda else
                                "perf_counter (CPU)",
                        "forward": "eval mode, torch.no_grad()",
                        "fwd+bwd": "train mode, forward + backward of a fixed output "
                                   "gradient",
                        "tensor": "MinkUNet only: ME.SparseTensor vs voxconv.SparseTensor "
                                 "construction alone (part of forward's time)",
                        "order": "compat and native alternate within each round",
                        "paired": "host_ratio_paired: median (and quartiles) of each "
                                  "round's compat / native host time"},
           "target_host_ratio": HOST_TARGET, "ports": {}}
    progress(f"device {rec['device_name']}; torch {torch.__version__}; dtype "
             f"{rec['dtype']}; {args.repeat} timed rounds after {args.warmup} warm-up"
             + (f"; crop {args.crop:g} m" if args.crop else ""))
    for name in args.ports:
        err, gerr, n_check = check_equal_f64(name, args)
        port = make_port(name, args)
        progress(f"{name}: {port.n_voxels:,} input voxels; native == compat in f64 on the "
                 f"CPU ({n_check:,} voxels: outputs max rel {err:.2e}, input gradient "
                 f"{gerr:.2e}); timing")
        res = bench_port(port, args, clock)
        rec["ports"][name] = {"input": port.info["input"], "voxels": port.n_voxels,
                              "check": f"float64 on the CPU, {n_check} voxels",
                              "max_rel_output": err, "max_rel_input_grad": gerr, **res}
        del port
        if cuda:
            torch.cuda.empty_cache()

    print(f"\ncompat vs native voxconv modules, {rec['device_name']}, {rec['dtype']}, "
          f"median of {args.repeat}" + (f", crop {args.crop:g} m" if args.crop else ""))
    print(f"{'port':20s} {'mode':8s} {'voxels':>8s} {'host compat':>12s} {'native':>9s} "
          f"{'ratio':>7s} {'wall compat':>12s} {'native':>9s} {'ratio':>7s} "
          f"{'paired host ratio (q1-q3)':>26s}")
    worst = 0.0
    for name, r in rec["ports"].items():
        for mode in ("forward", "fwd+bwd", "tensor"):
            if mode not in r:
                continue
            m = r[mode]
            if mode != "tensor":
                worst = max(worst, m["host_ratio"])
            print(f"{name:20s} {mode:8s} {r['voxels']:8,d} {m['compat']['host_ms']:12.3f} "
                  f"{m['native']['host_ms']:9.3f} {m['host_ratio']:7.3f} "
                  f"{m['compat']['wall_ms']:12.3f} {m['native']['wall_ms']:9.3f} "
                  f"{m['wall_ratio']:7.3f} {m['host_ratio_paired']:11.3f} "
                  f"({m['host_ratio_paired_q1_q3'][0]:.3f}-{m['host_ratio_paired_q1_q3'][1]:.3f})")
    rec["worst_host_ratio"] = worst
    rec["target_pass"] = worst <= HOST_TARGET
    print(f"\ntarget (b), compat host time <= {HOST_TARGET} x native: worst {worst:.3f} "
          f"{'PASS' if worst <= HOST_TARGET else 'FAIL'}"
          + ("" if cuda else "  (CPU: host time includes the computation itself)"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rec, f, indent=1)
        progress(f"wrote {args.json}")


if __name__ == "__main__":
    main()
