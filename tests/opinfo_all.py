"""The whole of PyTorch's op_db on the device, float32, forward, strict (no CPU fallback).

`python tests/opinfo_all.py [--list]` prints test_opinfo.test_whole_op_db's table: per family (linear
algebra, FFT, the rest) how many ops pass every sample compared with the CPU, the all-ops figure, and
with --list each failing op's first failure and whether it is a known failure. Ops whose results are
random or uninitialized memory, or that need CUDA, are left out (test_opinfo.WHOLE_DB_LEFT_OUT).
"""
import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import conftest  # noqa: E402,F401  (strict mode, the device)

import test_opinfo as t  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--list", action="store_true", help="print each failing op's first failure")
    args = ap.parse_args()
    t0 = time.perf_counter()
    counts, failing = t.run_whole_db()
    print(t.format_db_table(counts).replace("strict:", f"strict: {time.perf_counter() - t0:.0f} s"))
    if args.list:
        for key, first in failing:
            known = t.WHOLE_DB_KNOWN.get(key)
            print(f"FAIL {key}{' (known: ' + known + ')' if known else ''}: {first[:240]}")


if __name__ == "__main__":
    main()
