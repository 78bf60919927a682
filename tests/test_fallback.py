"""CPU fallback for ops without a tiny kernel, and TINY_STRICT.

Each mode runs in a fresh interpreter (TINY_STRICT is read by torch_tiny, so it must be
set before the import).  The op under test is the first of a short list of ops with no
tiny kernel (histc first); should it get one, the next truly missing op is used instead,
so the test keeps checking the fallback machinery.
"""

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from conftest import IS_TINY

# name -> (token the message must contain, python expression using `a` and `b`).
# `a`, `b` are float32 tensors on the device under test (b > 0).
CANDIDATES = [
    ("histc", "histc", "torch.histc(a, bins=4)"),
    ("nanmedian", "nanmedian", "torch.nanmedian(a)"),
    ("_cdist_forward", "cdist", "torch.cdist(a.reshape(5, 1), b.reshape(5, 1))"),
    ("_pdist_forward", "pdist", "torch.nn.functional.pdist(a.reshape(5, 1))"),
    ("bincount", "bincount", "torch.bincount(a.long())"),
]

# The scripts below never spell an op's name literally in their source, so that a
# Python warning (which prints the offending source line) mentions the op only through
# its message.
_PRELUDE = textwrap.dedent(
    """
    import json, sys, warnings
    import torch
    import torch_tiny
    CANDIDATES = json.loads(sys.argv[1])
    ac = torch.tensor([2.0, 3.0, 4.5, 1.25, 7.0])
    bc = torch.tensor([1.0, 2.0, 0.5, 3.0, 1.5])
    def run(expr, dev):
        a, b = ac.to(dev), bc.to(dev)
        return eval(expr)
    """
)

_STRICT_SCRIPT = _PRELUDE + textwrap.dedent(
    """
    report = []
    for key, token, expr in CANDIDATES:
        try:
            r = run(expr, "tiny")
            r.cpu()
            torch.tiny.synchronize()
            report.append([key, "ran", ""])
        except NotImplementedError as e:
            report.append([key, "NotImplementedError", str(e)])
            break
        except Exception as e:
            report.append([key, type(e).__name__, str(e)])
            break
    print("REPORT " + json.dumps(report))
    """
)

_FALLBACK_SCRIPT = _PRELUDE + textwrap.dedent(
    """
    key, token, expr = CANDIDATES[0]
    expected = run(expr, "cpu")
    r1 = run(expr, "tiny")
    r2 = run(expr, "tiny")
    out = {
        "device1": r1.device.type,
        "device2": r2.device.type,
        "dtype": str(r1.dtype),
        "r1": r1.cpu().tolist(),
        "r2": r2.cpu().tolist(),
        "expected": expected.tolist(),
        "expected_dtype": str(expected.dtype),
    }
    # A later use of the result on the device keeps working.
    out["plus_one"] = (r1 + 1).cpu().tolist()
    sys.stdout.flush()
    print("RESULT " + json.dumps(out))
    """
)


def _run(script, strict, candidates):
    env = dict(os.environ)
    env["TINY_STRICT"] = "1" if strict else "0"
    env["PYTHONWARNINGS"] = "default"
    env.pop("TINY_DEBUG", None)
    return subprocess.run(
        [sys.executable, "-c", script, json.dumps(candidates)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


_WARNING_HEADER = re.compile(r"^.+:\d+: \w*Warning: ")


def _messages(text):
    """Output lines, without the source line Python echoes under a warning."""
    kept, echo_next = [], False
    for l in text.splitlines():
        if echo_next and l.startswith("  "):
            echo_next = False
            continue
        echo_next = bool(_WARNING_HEADER.match(l))
        kept.append(l)
    return kept


@pytest.fixture(scope="module")
def strict_probe():
    """Runs the candidates under TINY_STRICT=1; returns (candidate, exc type, message)."""
    if not IS_TINY:
        pytest.skip("tiny-specific test")
    proc = _run(_STRICT_SCRIPT, True, [list(c) for c in CANDIDATES])
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    line = next(l for l in proc.stdout.splitlines() if l.startswith("REPORT "))
    report = json.loads(line[len("REPORT "):])
    last_key, kind, msg = report[-1]
    if kind == "ran":
        pytest.fail(
            "every candidate op ran under TINY_STRICT=1 without error; either strict mode "
            f"does not raise or all of {[c[0] for c in CANDIDATES]} have tiny kernels "
            "(add a truly missing op to CANDIDATES)"
        )
    cand = next(c for c in CANDIDATES if c[0] == last_key)
    return cand, kind, msg


def test_strict_raises_not_implemented_naming_op(strict_probe):
    (key, token, expr), kind, msg = strict_probe
    assert kind == "NotImplementedError", f"{key}: raised {kind}: {msg}"
    assert token in msg, f"message does not name the op {token!r}: {msg}"


def test_fallback_matches_cpu_and_warns_once(strict_probe):
    (key, token, expr), kind, _ = strict_probe
    assert kind == "NotImplementedError"
    proc = _run(_FALLBACK_SCRIPT, False, [[key, token, expr]])
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["device1"] == "tiny" and out["device2"] == "tiny"
    assert out["dtype"] == out["expected_dtype"]

    import torch

    expected = torch.tensor(out["expected"])
    torch.testing.assert_close(torch.tensor(out["r1"]), expected, equal_nan=True)
    torch.testing.assert_close(torch.tensor(out["r2"]), expected, equal_nan=True)
    torch.testing.assert_close(torch.tensor(out["plus_one"]), expected + 1, equal_nan=True)

    # Exactly one message names the op, for two calls.
    text = proc.stdout.replace(line, "") + "\n" + proc.stderr
    naming = [l for l in _messages(text) if re.search(re.escape(token), l, re.IGNORECASE)]
    assert len(naming) == 1, (
        f"expected exactly one line naming {token!r}, got {len(naming)}:\n" + "\n".join(naming)
        + f"\n--- full stderr ---\n{proc.stderr}"
    )
