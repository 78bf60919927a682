"""OpInfo grading: PyTorch's own OpInfo sample inputs, run on the device under test and
compared with the CPU.

Selection (fixed, so pass rates are comparable from run to run):

* every OpInfo in ``op_db`` that PyTorch lists in ``unary_ufuncs``, ``binary_ufuncs`` or
  ``reduction_ops`` (the ``_refs`` entries are Python references, not ops, and are left out);
* "others": the elementwise-adjacent ops in :data:`OTHERS`.

For each op the samples of ``op.sample_inputs`` are run in float32 and, where the op supports
them, int64 and bool (at most :data:`MAX_SAMPLES` per op and dtype, the first ones in
PyTorch's order).  Tensors anywhere in a sample's input/args/kwargs are copied to the device.
Results are compared with the CPU's using the OpInfo's own float32 tolerance overrides where it
has any, else ``torch.testing``'s defaults (exact for integers and bools).  A sample the CPU
rejects is skipped.

Autograd: for the unary, binary and reduction families, the float32 samples that support
autograd must give the CPU's gradients (deterministic random output gradients), and
:func:`test_gradcheck` runs ``torch.autograd.gradcheck`` in float64 for one representative op
per family.

Whole op_db: :func:`test_whole_op_db` runs every OpInfo (float32, forward; random and CUDA-only
ones left out) and prints the pass rate per family (linear algebra, FFT, the rest) and overall;
an op failing there must be in :data:`WHOLE_DB_KNOWN`, with its reason (`tests/opinfo_all.py`
prints the same table from the command line).

Comparison rules beyond "same result": decompositions unique only up to sign are compared
through the sample's own ``output_process_fn_grad`` (:data:`NON_UNIQUE`); samples drawing
dropout are random and skipped; ops whose float32 CPU result is itself off by more than the
tolerance take the CPU's float64 result as the reference (:data:`FLOAT64_REFERENCE`);
arguments PyTorch requires on the CPU stay there (:data:`CPU_ARGS`); ``as_strided`` inputs
keep their whole storage; a result the sample asks for on the CPU (``x.to('cpu')``) is
expected there.

Everything runs under ``TINY_STRICT=1`` (conftest), so nothing passes by falling back to the
CPU.  Known failures live in :data:`KNOWN_FAILURES` (one place, each with its reason); any other
failing sample fails the test, and a known failure that starts passing is printed as a note.
``test_pass_rate_table`` prints pass rates per family and in total (``pytest -s`` not needed).
"""

import time
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
import torch
from torch.utils._pytree import tree_flatten, tree_map

from conftest import DEV

pytest.importorskip("expecttest", reason="PyTorch's OpInfo database needs expecttest")
pytest.importorskip("hypothesis", reason="PyTorch's OpInfo database needs hypothesis")

from torch.testing._internal import common_methods_invocations as cmi  # noqa: E402
from torch.testing._internal.common_device_type import toleranceOverride  # noqa: E402

# x.chalf() warns that ComplexHalf is experimental, on the CPU as on the device
pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")

MAX_SAMPLES = 24  # per op and dtype: bounds the run time of ops with long sample lists
DTYPES = (torch.float32, torch.int64, torch.bool)

# Elementwise-adjacent ops outside the three ufunc/reduction lists.
OTHERS = (
    "where", "clamp", "masked_fill", "lerp", "addcmul", "addcdiv", "logaddexp2",
    "nn.functional.gelu", "nn.functional.hardswish", "nn.functional.leaky_relu",
    "nn.functional.glu", "clone", "contiguous", "zero_", "full_like", "zeros_like",
    "ones_like", "equal", "allclose",
    # selection, layout and geometry ops with tiny kernels (issue 14)
    "median", "nanmedian", "mode", "nonzero_static", "nn.functional.channel_shuffle", "linalg.cross", "cross", "nn.functional.unfold",
    "histc", "nn.functional.max_unpool2d", "cdist", "nn.functional.pdist",
    # triangular solves and the Cholesky family (loops of lazy kernels)
    "linalg.cholesky", "linalg.cholesky_ex", "cholesky_solve", "cholesky_inverse", "linalg.solve_triangular",
    "triangular_solve",
    # LU with partial pivoting and what is built on it
    "linalg.lu_factor", "linalg.lu_factor_ex", "linalg.lu", "lu", "lu_unpack", "linalg.lu_solve", "lu_solve",
    "linalg.det", "det", "linalg.slogdet", "logdet", "linalg.solve", "linalg.solve_ex", "linalg.inv",
    "linalg.inv_ex", "inverse", "linalg.matrix_power",
    "nn.functional.multi_margin_loss", "nn.functional.multilabel_margin_loss",
    # Householder QR, Jacobi eigh and SVD, and what is built on them
    "geqrf", "ormqr", "linalg.householder_product", "linalg.qr", "linalg.eigh", "linalg.eigvalsh",
    "linalg.matrix_sqrth", "svd", "linalg.svd", "linalg.svdvals", "linalg.pinv", "pinverse", "linalg.matrix_rank",
    "linalg.matrix_norm", "linalg.cond", "linalg.polar", "linalg.lstsq", "matrix_exp",
    # discrete Fourier transforms (DFT matmuls over complex pairs)
    "fft.fft", "fft.ifft", "fft.rfft", "fft.irfft", "fft.hfft", "fft.ihfft", "fft.fft2", "fft.ifft2", "fft.rfft2",
    "fft.irfft2", "fft.hfft2", "fft.ihfft2", "fft.fftn", "fft.ifftn", "fft.rfftn", "fft.irfftn", "fft.hfftn",
    "fft.ihfftn", "stft",
    # sampling, unpooling, attention
    "nn.functional.grid_sample", "grid_sampler_2d", "grid_sampler_3d", "nn.functional.max_unpool3d",
    "nn.functional.scaled_dot_product_attention", "nn.functional.multi_head_attention_forward",
    "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu", "as_strided",
    # results on the CPU by request, CPU-only index arguments
    "to", "tensor_split",
)

# ---------------------------------------------------------------------------------------------
# Known failures, the one list: (op, dtype, check) -> reason.  op is the OpInfo name (with
# ".variant" when the OpInfo has a variant_test_name); dtype is "float32" / "int64" / "bool" or
# "*" for all; check is "forward", "grad" or "*" for both.
KNOWN_FAILURES = {}


def _known(ops, reason, dtype="*", check="*"):
    for op in ops.split():
        KNOWN_FAILURES[(op, dtype, check)] = reason


_known("nn.functional.rrelu", "training mode draws random slopes: tiny's Philox stream is not the CPU's generator")
_known("special.erfcx", "one sample: the backward 2x erfcx(x) - 2/sqrt(pi) cancels in float32 near x = 4.4 and "
       "amplifies a 1-ulp difference of the forward (the CPU's float erfcx is 5e-9 off, tiny's 2e-9, rounded once "
       "from double) to a 5e-6 relative difference", dtype="float32", check="grad")
for _dtype in ("int64", "bool"):
    _known("mode", "one sample, 3000 values with many repeats: the values agree; the CPU's index is whichever "
           "occurrence of the mode its unstable std::sort leaves last in the run, tiny's is the last occurrence",
           dtype=_dtype, check="forward")


# ---------------------------------------------------------------------------------------------
def _key(op):
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _family_of():
    fams = {}
    for fam, ops in (("unary_ufuncs", cmi.unary_ufuncs), ("binary_ufuncs", cmi.binary_ufuncs),
                     ("reduction_ops", cmi.reduction_ops)):
        for op in ops:
            fams.setdefault(id(op), fam)
    return fams


_FAMILY_IDS = _family_of()
FAMILIES = ("unary_ufuncs", "binary_ufuncs", "reduction_ops", "others")
SELECTED = []  # (key, family, OpInfo)
for _op in cmi.op_db:
    _fam = _FAMILY_IDS.get(id(_op))
    if _fam is None and _op.name in OTHERS:
        _fam = "others"
    if _fam is not None:
        SELECTED.append((_key(_op), _fam, _op))
OPS = {k: (fam, op) for k, fam, op in SELECTED}
GRAD_OPS = [k for k, fam, op in SELECTED
            if fam != "others" and op.supports_autograd
            and torch.float32 in op.supported_backward_dtypes("cpu")]


def _known_reason(key, dtype, check):
    d = str(dtype).replace("torch.", "")
    for k in ((key, d, check), (key, "*", check), (key, d, "*"), (key, "*", "*")):
        if k in KNOWN_FAILURES:
            return KNOWN_FAILURES[k]
    return None


# ---------------------------------------------------------------------------------------------
@dataclass
class Result:
    samples: int = 0
    passed: int = 0
    skipped: int = 0  # the CPU rejected the sample
    failures: list = field(default_factory=list)

    @property
    def ok(self):
        return self.samples > 0 and self.passed == self.samples


RESULTS = {}  # (key, dtype, check) -> Result


# Tolerances the OpInfo's own do not cover: (op, dtype) -> (atol, rtol), the looser of the two
# taken per bound. special.i1 float32: the OpInfo allows 1e-4 absolute and no relative error,
# under two units at i1(-8.4784) = -628.61249 (float64); the CPU's float32 gives -628.61243 and
# tiny -628.61255 (both within 2 units; the CPU is as far off at -7.9506, by 6 units).
EXTRA_TOLERANCE = {("special.i1", torch.float32): (1e-4, 4e-7)}


def _tolerance(op, dtype):
    """The loosest (atol, rtol) the OpInfo's decorators and EXTRA_TOLERANCE allow for ``dtype``,
    or None."""
    atol, rtol = EXTRA_TOLERANCE.get((op.name, dtype), (None, None))
    for dec in getattr(op, "decorators", ()) or ():
        for d in getattr(dec, "decorators", (dec,)) or ():
            if isinstance(d, toleranceOverride) and dtype in d.d:
                t = d.d[dtype]
                atol = max(atol or 0, t.atol)
                rtol = max(rtol or 0, t.rtol)
    return None if atol is None else (atol, rtol)


def _to_dev(x):
    return x.detach().to(DEV) if isinstance(x, torch.Tensor) else x


# Decompositions whose outputs are unique only up to signs (or a basis of a subspace): compared
# after the sample's own output_process_fn_grad, which PyTorch's OpInfo gives them for exactly
# this (|U|, U @ Vh, |eigenvectors|).
NON_UNIQUE = ("svd", "linalg.svd", "linalg.eigh", "svd_lowrank", "pca_lowrank")
# Ops whose float32 CPU result is itself off by more than the tolerance: the reference is the
# CPU's float64 result rounded to float32. matrix_exp: the CPU's float32 scaling and squaring is
# 3e-6 off (relative to the largest entry) on a 5x5x5 sample, tiny's (float64 inside) 4e-8.
# _scaled_dot_product_flash_attention_for_cpu: logits of a few hundred in float32 leave the CPU's
# output 1.9e-5 off (values up to 9); tiny computes float32 attention in float64.
FLOAT64_REFERENCE = ("matrix_exp", "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu")
# Arguments PyTorch requires on the CPU whatever the input's device: (op, positional index).
CPU_ARGS = {("tensor_split", 0)}


def _to_dev_same_storage(x):
    """A view copied with its whole storage (as_strided may reach outside the view: partial_views)."""
    if not isinstance(x, torch.Tensor) or x._base is None:
        return _to_dev(x)
    base = x._base.detach()
    assert base.storage_offset() == 0 and base.is_contiguous()
    return base.to(DEV).as_strided(x.size(), x.stride(), x.storage_offset())


def _input_to_dev(key, x):
    return _to_dev_same_storage(x) if key.startswith("as_strided") else tree_map(_to_dev, x)


def _args_to_dev(key, args):
    return tuple(a if (key, i) in CPU_ARGS else tree_map(_to_dev, a) for i, a in enumerate(args))


def _draws_random(op, sample):
    """Samples whose results are random draws (dropout inside attention): skipped, like LEFT_OUT ops."""
    if sample.kwargs.get("dropout_p", 0) > 0:
        return True
    if op.name == "nn.functional.multi_head_attention_forward":  # dropout_p is positional, training defaults on
        return sample.args[9] > 0 and sample.kwargs.get("training", True)
    return False


def _target_device(sample):
    """The device a sample's positional arguments name for its result (``x.to('cpu')``), else the
    device (a ``device=`` keyword is replaced by the device, see _kwargs_to_dev)."""
    for a in sample.args:
        if isinstance(a, (str, torch.device)):
            try:
                return torch.device(a).type
            except RuntimeError:
                continue
    return torch.device(DEV).type


def _kwargs_to_dev(kwargs):
    """Tensors to the device; a sample's ``device=`` (factory-like ops) names the device too."""
    out = tree_map(_to_dev, kwargs)
    if "device" in out and out["device"] is not None:
        out["device"] = DEV
    return out


def _compare(actual, expected, tol, path="out", device=None):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{path}: expected a tensor, got {type(actual)}"
        device = device or torch.device(DEV).type
        assert actual.device.type == device, f"{path}: result on {actual.device}, expected {device}"
        kw = {} if tol is None or not expected.dtype.is_floating_point else dict(atol=tol[0], rtol=tol[1])
        torch.testing.assert_close(actual.detach().cpu(), expected.detach(), equal_nan=True,
                                   check_device=False, check_stride=False, msg=lambda m: f"{path}: {m}", **kw)
    elif isinstance(expected, (tuple, list)):
        assert isinstance(actual, (tuple, list)), f"{path}: expected a sequence, got {type(actual)}"
        assert len(actual) == len(expected), f"{path}: {len(actual)} results, expected {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, tol, f"{path}[{i}]", device)
    elif isinstance(expected, float):
        torch.testing.assert_close(actual, expected, equal_nan=True, msg=lambda m: f"{path}: {m}")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


def _first_line(e):
    s = f"{type(e).__name__}: {e}".strip().splitlines()
    return s[0][:300] if s else type(e).__name__


def run_forward(key, dtype):
    k = (key, dtype, "forward")
    if k in RESULTS:
        return RESULTS[k]
    _, op = OPS[key]
    res = Result()
    tol = _tolerance(op, dtype)
    torch.manual_seed(0)
    for i, s in enumerate(op.sample_inputs("cpu", dtype)):
        if i >= MAX_SAMPLES:
            break
        if _draws_random(op, s):
            res.skipped += 1
            continue
        unique = (lambda out: out) if op.name not in NON_UNIQUE else s.output_process_fn_grad
        try:
            if op.name in FLOAT64_REFERENCE and dtype == torch.float32:
                args = tree_map(lambda a: a.double() if isinstance(a, torch.Tensor) and a.dtype == dtype else a, s.args)
                expected = tree_map(lambda r: r.to(dtype) if isinstance(r, torch.Tensor) and r.is_floating_point()
                                    else r, unique(op(s.input.double(), *args, **s.kwargs)))
            else:
                expected = unique(op(s.input, *s.args, **s.kwargs))
        except Exception:
            res.skipped += 1
            continue
        res.samples += 1
        try:
            actual = unique(op(_input_to_dev(key, s.input), *_args_to_dev(key, s.args), **_kwargs_to_dev(s.kwargs)))
            _compare(actual, expected, tol, device=_target_device(s))
            res.passed += 1
        except Exception as e:  # noqa: BLE001 - every failure is recorded with its sample
            res.failures.append(f"sample {i} ({s.summary() if hasattr(s, 'summary') else s}): {_first_line(e)}")
    RESULTS[k] = res
    return res


def _grad_outputs(outs):
    g = torch.Generator().manual_seed(1234)
    return [torch.randn(o.shape, dtype=o.dtype, generator=g) for o in outs]


def _diff_outputs(out):
    flat, _ = tree_flatten(out if not isinstance(out, tuple) else list(out))
    return [t for t in flat if isinstance(t, torch.Tensor) and t.requires_grad]


def run_grad(key):
    k = (key, torch.float32, "grad")
    if k in RESULTS:
        return RESULTS[k]
    _, op = OPS[key]
    res = Result()
    tol = _tolerance(op, torch.float32)
    torch.manual_seed(0)
    for i, s in enumerate(op.sample_inputs("cpu", torch.float32, requires_grad=True)):
        if i >= MAX_SAMPLES:
            break
        leaves = [t for t in tree_flatten((s.input, s.args, s.kwargs))[0]
                  if isinstance(t, torch.Tensor) and t.requires_grad and t.is_leaf]
        try:
            outs = _diff_outputs(s.output_process_fn_grad(op(s.input, *s.args, **s.kwargs)))
            if not outs or not leaves:
                res.skipped += 1
                continue
            gouts = _grad_outputs(outs)
            expected = torch.autograd.grad(outs, leaves, gouts, allow_unused=True)
        except Exception:
            res.skipped += 1
            continue
        res.samples += 1
        try:
            dev_leaves = []

            def move(x):
                if not isinstance(x, torch.Tensor):
                    return x
                y = x.detach().to(DEV)
                if x.requires_grad and x.is_leaf:
                    y.requires_grad_()
                    dev_leaves.append(y)
                return y

            inp, args, kwargs = tree_map(move, (s.input, s.args, s.kwargs))
            if kwargs.get("device") is not None:
                kwargs["device"] = DEV
            douts = _diff_outputs(s.output_process_fn_grad(op(inp, *args, **kwargs)))
            assert len(douts) == len(outs), f"{len(douts)} differentiable outputs, expected {len(outs)}"
            actual = torch.autograd.grad(douts, dev_leaves, [g.to(DEV) for g in gouts], allow_unused=True)
            for j, (a, e) in enumerate(zip(actual, expected)):
                if e is None:
                    assert a is None or not a.any(), f"grad[{j}]: expected no gradient"
                else:
                    assert a is not None, f"grad[{j}]: no gradient"
                    _compare(a, e, tol, f"grad[{j}]")
            res.passed += 1
        except Exception as e:  # noqa: BLE001
            res.failures.append(f"sample {i}: {_first_line(e)}")
    RESULTS[k] = res
    return res


NOTES = []


def _check(key, dtype, check, res):
    reason = _known_reason(key, dtype, check)
    if reason is None:
        assert not res.failures, (
            f"{key} {dtype} {check}: {len(res.failures)} of {res.samples} samples fail:\n  "
            + "\n  ".join(res.failures[:8]))
    elif res.ok:
        NOTES.append(f"known failure now passes: {(key, str(dtype).replace('torch.', ''), check)} ({reason})")


def _dtypes(op):
    supported = op.supported_dtypes("cpu")
    return [d for d in DTYPES if d in supported]


# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("key", list(OPS))
def test_forward(key):
    _, op = OPS[key]
    dts = _dtypes(op)
    if not dts:
        pytest.skip("no float32/int64/bool variant")
    for dt in dts:
        _check(key, dt, "forward", run_forward(key, dt))


@pytest.mark.parametrize("key", GRAD_OPS)
def test_grad(key):
    _check(key, torch.float32, "grad", run_grad(key))


@pytest.mark.parametrize(
    "fn,shapes",
    [
        (torch.sin, [(3, 4)]),  # unary_ufuncs
        (torch.atan2, [(3, 4), (4,)]),  # binary_ufuncs (with broadcasting)
        (lambda x: x.sum(dim=1), [(3, 4)]),  # reduction_ops
    ],
    ids=["unary-sin", "binary-atan2", "reduction-sum"],
)
def test_gradcheck(fn, shapes):
    g = torch.Generator().manual_seed(7)
    xs = [(torch.rand(s, dtype=torch.float64, generator=g) + 0.5).to(DEV).requires_grad_() for s in shapes]
    assert torch.autograd.gradcheck(fn, xs, eps=1e-6, atol=1e-5)


def _summary():
    """(family -> [samples, passed]), (family -> float32 [samples, passed]), per-op float32
    all-pass counts, autograd [samples, passed]."""
    fam_samples = defaultdict(lambda: [0, 0])
    fam_f32 = defaultdict(lambda: [0, 0])
    f32_ops = f32_ok = 0
    for key, fam, op in SELECTED:
        for dt in _dtypes(op):
            r = run_forward(key, dt)
            fam_samples[fam][0] += r.samples
            fam_samples[fam][1] += r.passed
            if dt == torch.float32:
                fam_f32[fam][0] += r.samples
                fam_f32[fam][1] += r.passed
            if dt == torch.float32 and r.samples:
                f32_ops += 1
                f32_ok += r.ok
    grad = [0, 0]
    for key in GRAD_OPS:
        r = run_grad(key)
        grad[0] += r.samples
        grad[1] += r.passed
    return fam_samples, fam_f32, (f32_ops, f32_ok), grad


def format_table():
    t0 = time.time()
    fam_samples, fam_f32, (f32_ops, f32_ok), grad = _summary()
    ops_per_fam = defaultdict(lambda: [0, 0])
    for key, fam, op in SELECTED:
        rs = [RESULTS[(key, dt, "forward")] for dt in _dtypes(op)]
        rs = [r for r in rs if r.samples]
        if rs:
            ops_per_fam[fam][0] += 1
            ops_per_fam[fam][1] += all(r.ok for r in rs)
    lines = [f"OpInfo on {DEV!r} vs CPU (float32/int64/bool, <= {MAX_SAMPLES} samples per op and dtype)",
             f"{'family':<16}{'ops':>6}{'ops ok':>8}{'samples':>9}{'passed':>8}{'rate':>8}"
             f"{'f32 samples':>13}{'f32 passed':>12}{'f32 rate':>10}"]
    tot = [0] * 6

    def rate(p, n):
        return f"{(p / n if n else 0):.1%}"

    for fam in FAMILIES:
        n, p = fam_samples[fam]
        fn, fp = fam_f32[fam]
        on, op_ok = ops_per_fam[fam]
        tot = [a + b for a, b in zip(tot, (on, op_ok, n, p, fn, fp))]
        lines.append(f"{fam:<16}{on:>6}{op_ok:>8}{n:>9}{p:>8}{rate(p, n):>8}{fn:>13}{fp:>12}{rate(fp, fn):>10}")
    lines.append(f"{'total':<16}{tot[0]:>6}{tot[1]:>8}{tot[2]:>9}{tot[3]:>8}{rate(tot[3], tot[2]):>8}"
                 f"{tot[4]:>13}{tot[5]:>12}{rate(tot[5], tot[4]):>10}")
    lines.append(f"ops with a float32 variant passing all their samples: {f32_ok}/{f32_ops}"
                 f" = {(f32_ok / f32_ops if f32_ops else 0):.1%}")
    lines.append(f"autograd (float32 gradients vs CPU): {grad[1]}/{grad[0]} samples"
                 f" = {(grad[1] / grad[0] if grad[0] else 0):.1%}")
    lines.append(f"(table assembled in {time.time() - t0:.1f}s)")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The whole op_db (float32, forward): every OpInfo that is not random or CUDA-only, per family.
WHOLE_DB_LEFT_OUT = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "empty", "poisson",
                     "randint", "randn", "rrelu", "cauchy", "exponential", "geometric", "log_normal", "new_empty",
                     "alpha_dropout", "feature_alpha_dropout", "_standard_gamma", "_sample_dirichlet", "binomial")
LINALG_NAMES = ("linalg.", "cholesky", "det", "logdet", "inverse", "lu", "svd", "qr", "pinverse", "matrix_exp",
                "triangular_solve", "ormqr", "geqrf", "eig", "symeig", "lstsq", "pca_lowrank", "svd_lowrank",
                "householder_product", "ldl", "slogdet", "norm", "matrix_power", "matrix_rank", "cross", "tensorinv",
                "tensorsolve", "vander", "multi_dot")
# op_db ops failing some float32 sample, with the reason: the list may only shrink.
WHOLE_DB_KNOWN = {}
for _names, _reason in (
    ("sparse.sampled_addmm sparse.mm.reduce to_sparse", "sparse layouts are not stored on tiny"),
    ("linalg.eig linalg.eigvals", "the non-symmetric eigendecomposition (complex results) has no kernel"),
    ("linalg.ldl_factor linalg.ldl_factor_ex linalg.ldl_solve", "Bunch-Kaufman LDL has no kernel"),
    ("svd_lowrank", "a sample with q below the rank: the result depends on the random projection, and tiny's "
     "generator is not the CPU's"),
    ("nn.functional.fractional_max_pool2d nn.functional.fractional_max_pool3d", "no kernel (regions drawn at random)"),
    ("_upsample_bilinear2d_aa histogram histogramdd nn.functional.embedding_bag nn.functional.ctc_loss "
     "_segment_reduce.lengths _segment_reduce.offsets", "no kernel"),
):
    for _n in _names.split():
        WHOLE_DB_KNOWN[_n] = _reason


def db_family(name):
    if name.startswith("fft."):
        return "fft"
    if any(name.startswith(p) if p.endswith(".") else p in name for p in LINALG_NAMES):
        return "linalg"
    return "others"


def run_whole_db():
    """{family: [passed, total]} and [(op, first failure)] over the whole op_db, float32 forward."""
    ops = {}
    for op in cmi.op_db:
        if any(w in op.name for w in WHOLE_DB_LEFT_OUT) or torch.float32 not in op.supported_dtypes("cpu"):
            continue
        ops.setdefault(_key(op), op)
    for key, op in ops.items():
        OPS.setdefault(key, ("all", op))
    counts, failing = defaultdict(lambda: [0, 0]), []
    for key, op in ops.items():
        res = run_forward(key, torch.float32)
        if res.samples == 0:
            continue
        fam = db_family(op.name)
        counts[fam][1] += 1
        if res.ok:
            counts[fam][0] += 1
        else:
            failing.append((key, res.failures[0]))
    return counts, failing


def format_db_table(counts):
    lines = ["op_db, float32, forward, strict:"]
    for fam in ("linalg", "fft", "others"):
        p, n = counts[fam]
        lines.append(f"  {fam:8s} {p:4d} / {n:4d} ops pass every sample  ({100 * p / max(n, 1):5.1f} %)")
    p, n = sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())
    lines.append(f"  {'all':8s} {p:4d} / {n:4d} ops pass every sample  ({100 * p / max(n, 1):5.1f} %)")
    return "\n".join(lines)


def test_whole_op_db(capsys):
    counts, failing = run_whole_db()
    with capsys.disabled():
        print("\n" + format_db_table(counts))
        for key in sorted(set(WHOLE_DB_KNOWN) - {k for k, _ in failing}):
            print(f"NOTE: {key} passes now; remove it from WHOLE_DB_KNOWN")
    unexpected = [f"{k}: {first}" for k, first in failing if k not in WHOLE_DB_KNOWN]
    assert not unexpected, "\n".join(unexpected)


def test_pass_rate_table(capsys):
    table = format_table()
    with capsys.disabled():
        print("\n" + table)
        for n in NOTES:
            print("NOTE:", n)
    # The selection must actually have run something in every family.
    for fam in FAMILIES:
        assert any(f == fam for _, f, _ in SELECTED), fam


if __name__ == "__main__":
    import conftest  # noqa: F401  (strict mode, device)

    print(format_table())
    for key, fam, op in SELECTED:
        for dt in _dtypes(op):
            r = RESULTS[(key, dt, "forward")]
            if r.failures:
                print(f"FAIL {key} {dt} {r.passed}/{r.samples}:")
                for f in r.failures:
                    print("    " + f)
    for key in GRAD_OPS:
        r = RESULTS[(key, torch.float32, "grad")]
        if r.failures:
            print(f"FAIL-GRAD {key} {r.passed}/{r.samples}:")
            for f in r.failures:
                print("    " + f)
