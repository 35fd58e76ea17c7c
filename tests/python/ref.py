"""Independent references for the Python tests: brute-force kernel maps from
include/voxconv.h's definitions (Python dicts, no library code), fp64."""

import itertools

import torch


def offsets(kernel_size, dilation):
    """Kernel offsets in the library's order (x slowest):
    (j - (k-1)//2) * d per axis."""
    axes = [[(j - (k - 1) // 2) * d for j in range(k)] for k, d in zip(kernel_size, dilation)]
    return list(itertools.product(*axes))


def rand_coords(n, extent, batches=1, lo=0, gen=None):
    """Up to n unique int32 (b, x, y, z) with x, y, z in [lo, lo+extent),
    sorted by (b, x, y, z)."""
    b = torch.randint(0, batches, (n, 1), generator=gen)
    xyz = torch.randint(lo, lo + extent, (n, 3), generator=gen)
    c = torch.unique(torch.cat([b, xyz], 1), dim=0)
    return c.to(torch.int32)


def _rows(coords):
    return {tuple(r): i for i, r in enumerate(coords.tolist())}


def floor_div(c, s):
    return [c[0]] + [v // si for v, si in zip(c[1:], s)]


def kernel_pairs(mode, in_coords, kernel_size, stride, dilation, out_coords=None):
    """(out_coords tensor, list of (i, o, k)) for a mode name as in
    voxconv.h: 'submanifold', 'strided', 'transposed', 'generative'."""
    offs = offsets(kernel_size, dilation)
    cin = in_coords.tolist()
    if mode == "submanifold":
        out = in_coords.clone()
    elif mode == "strided":
        out = torch.tensor(sorted({tuple(floor_div(c, stride)) for c in cin}),
                           dtype=torch.int32).reshape(-1, 4)
    elif mode == "generative":
        cells = {(c[0], *[s * v + o for v, s, o in zip(c[1:], stride, off)])
                 for c in cin for off in offs}
        out = torch.tensor(sorted(cells), dtype=torch.int32).reshape(-1, 4)
    elif mode == "transposed":
        out = out_coords.clone()
    else:
        raise ValueError(mode)
    in_rows, out_rows = _rows(in_coords), _rows(out)
    pairs = []
    if mode in ("submanifold", "strided"):
        s = (1, 1, 1) if mode == "submanifold" else stride
        for o, c in enumerate(out.tolist()):
            for k, off in enumerate(offs):
                key = (c[0], *[si * v + di for v, si, di in zip(c[1:], s, off)])
                i = in_rows.get(key)
                if i is not None:
                    pairs.append((i, o, k))
    else:
        for i, c in enumerate(cin):
            for k, off in enumerate(offs):
                key = (c[0], *[si * v + di for v, si, di in zip(c[1:], stride, off)])
                o = out_rows.get(key)
                if o is not None:
                    pairs.append((i, o, k))
    return out, pairs


def conv(x, w, n_out, pairs):
    """y[o] = sum over pairs x[i] @ w[k] in fp64."""
    y = torch.zeros(n_out, w.shape[2], dtype=torch.float64)
    xd, wd = x.double().cpu(), w.double().cpu()
    for i, o, k in pairs:
        y[o] += xd[i] @ wd[k]
    return y


def depthwise(x, w, n_out, pairs):
    y = torch.zeros(n_out, x.shape[1], dtype=torch.float64)
    xd, wd = x.double().cpu(), w.double().cpu()
    for i, o, k in pairs:
        y[o] += xd[i] * wd[k]
    return y


def pool(x, n_out, pairs, mode):
    xd = x.double().cpu()
    C = x.shape[1]
    groups = [[] for _ in range(n_out)]
    for i, o, _k in pairs:
        groups[o].append(i)
    y = torch.zeros(n_out, C, dtype=torch.float64)
    for o, ins in enumerate(groups):
        if not ins:
            continue
        v = xd[ins]
        y[o] = {"max": lambda: v.max(0).values, "avg": lambda: v.mean(0),
                "sum": lambda: v.sum(0)}[mode]()
    return y


def unpool(x_coarse, n_fine, pairs):
    """y_fine[i] = sum over pairs (i, o, k) of x_coarse[o]."""
    y = torch.zeros(n_fine, x_coarse.shape[1], dtype=torch.float64)
    xd = x_coarse.double().cpu()
    for i, o, _k in pairs:
        y[i] += xd[o]
    return y


# ---- format-derived tolerances -------------------------------------------------

def widest_dtype(device):
    """The widest format the device runs: float64 on the CPU, float32 on
    CUDA."""
    return torch.float64 if torch.device(device).type == "cpu" else torch.float32


def exact_randn(*shape, dtype):
    """float64 values exactly representable in `dtype`: the reference sees
    the same inputs as the op, so only the op's arithmetic is measured."""
    return torch.randn(*shape, dtype=torch.float64).to(dtype).double()


def assert_at_fp_bound(got, want, abs_sum, n_terms, dtype):
    """|got - want| <= (gamma_n(dtype) + u(dtype) + gamma_n(f64)) * S per
    element, S = sum |x||w| (+|b|) over the element's terms: n rounded
    products summed in any order (Higham, Accuracy and Stability, 3.1),
    the result rounded once to `dtype`, and the float64 reference's own
    error. No margin beyond the formats."""
    def gamma(n, u):
        return n * u / (1 - n * u)
    u = torch.finfo(dtype).eps / 2
    u64 = torch.finfo(torch.float64).eps / 2
    bound = (gamma(n_terms, u) + u + gamma(n_terms, u64)) * abs_sum
    err = (got.detach().cpu().double() - want).abs()
    assert got.shape == want.shape and torch.isfinite(got).all()
    worst = (err - bound).max().item() if err.numel() else 0.0
    assert worst <= 0, f"error exceeds the {dtype} bound by {worst} (max err {err.max()})"


def assert_same_sums(got, want, abs_sum, n_terms, dtype=torch.float32):
    """Two float32 (or ``dtype``) evaluations of the same sums whose
    algorithm and order may differ (CUDA: the autotuner's choice): |got -
    want| <= 2 gamma_n(dtype) S elementwise, S = sum |a||b| over each
    element's n terms (computed by the caller with the same op on absolute
    values)."""
    u = torch.finfo(dtype).eps / 2
    gamma = n_terms * u / (1 - n_terms * u)
    assert got.shape == want.shape == abs_sum.shape
    assert torch.isfinite(got).all() and torch.isfinite(want).all()
    err = (got - want).abs()
    bound = 2 * gamma * abs_sum
    assert (err <= bound).all(), f"max err {err.max()} over the bound {bound.max()}"
