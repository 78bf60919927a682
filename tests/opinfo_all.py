"""The whole of PyTorch's op_db on the device, float32, forward, strict (no CPU fallback).

Not part of the pytest run (it takes minutes): `python tests/opinfo_all.py [--list]` prints, per
family (linear algebra, FFT, the rest), how many ops pass every sample compared with the CPU, the
all-ops figure, and with --list each failing op's first failure. Ops whose results are random or
uninitialized memory, or that need CUDA, are left out, as test_opinfo.py's issue describes.
Samples are test_opinfo.py's: the first MAX_SAMPLES of each op, compared the same way.
"""
import argparse
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conftest  # noqa: E402,F401  (strict mode, the device)
import torch  # noqa: E402

import test_opinfo as t  # noqa: E402

# values drawn at random, or memory that was never written
LEFT_OUT = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform", "empty", "poisson", "randint",
            "randn", "rrelu", "cauchy", "exponential", "geometric", "log_normal", "new_empty", "alpha_dropout",
            "feature_alpha_dropout", "_standard_gamma", "_sample_dirichlet", "binomial")
LINALG = ("linalg.", "cholesky", "det", "logdet", "inverse", "lu", "svd", "qr", "pinverse", "matrix_exp",
          "triangular_solve", "ormqr", "geqrf", "eig", "symeig", "lstsq", "pca_lowrank", "svd_lowrank",
          "householder_product", "ldl", "slogdet", "norm", "matrix_power", "matrix_rank", "cross", "tensorinv",
          "tensorsolve", "vander", "multi_dot")


def family(name):
    if name.startswith("fft."):
        return "fft"
    if any(name.startswith(p) if p.endswith(".") else p in name for p in LINALG):
        return "linalg"
    return "others"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print each failing op's first failure")
    args = ap.parse_args()
    ops = {}
    for op in t.cmi.op_db:
        key = t._key(op)
        if any(w in op.name for w in LEFT_OUT) or torch.float32 not in op.supported_dtypes("cpu"):
            continue
        ops.setdefault(key, op)
    t.OPS.update({k: ("all", op) for k, op in ops.items()})
    counts = defaultdict(lambda: [0, 0])
    failing = []
    t0 = time.perf_counter()
    for key, op in ops.items():
        res = t.run_forward(key, torch.float32)
        if res.samples == 0:
            continue
        fam = family(op.name)
        counts[fam][1] += 1
        if res.ok:
            counts[fam][0] += 1
        else:
            failing.append((key, res.failures[0]))
    print(f"op_db, float32, forward, strict: {time.perf_counter() - t0:.0f} s")
    for fam in ("linalg", "fft", "others"):
        p, n = counts[fam]
        print(f"  {fam:8s} {p:4d} / {n:4d} ops pass every sample  ({100 * p / max(n, 1):5.1f} %)")
    p, n = sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())
    print(f"  {'all':8s} {p:4d} / {n:4d} ops pass every sample  ({100 * p / max(n, 1):5.1f} %)")
    if args.list:
        for key, first in failing:
            print(f"FAIL {key}: {first[:240]}")


if __name__ == "__main__":
    main()
