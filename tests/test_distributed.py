"""torch.distributed on tiny tensors: collectives and DDP over 2 processes on loopback
(the "tiny" backend: Gloo with tiny tensors staged through host memory), compared with
the same run on the CPU over Gloo."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import IS_TINY

if not IS_TINY:
    pytest.skip("tiny-specific tests (the tiny process-group backend)", allow_module_level=True)

HERE = os.path.dirname(os.path.abspath(__file__))
WORLD = 2


def _run(dev, tmp_path):
    store = str(tmp_path / f"{dev}.store")
    outs = [tmp_path / f"{dev}{r}.json" for r in range(WORLD)]
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "distributed_worker.py"), str(r), str(WORLD), store,
                               dev, str(outs[r])], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=300)[0])
    finally:
        for p in procs:
            p.kill()
    for p, log in zip(procs, logs):
        assert p.returncode == 0, log[-3000:]
    return [json.loads(o.read_text()) for o in outs]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dist")
    return _run("tiny", tmp), _run("cpu", tmp)


def test_backend_is_tiny(runs):
    tiny, cpu = runs
    assert [r["backend"] for r in tiny] == ["tiny"] * WORLD
    assert [r["backend"] for r in cpu] == ["gloo"] * WORLD


@pytest.mark.parametrize("name", ["all_reduce", "all_reduce_max", "all_reduce_view", "broadcast", "all_gather",
                                  "all_gather_into_tensor", "reduce_scatter", "reduce"])
def test_collectives_match_gloo_on_the_cpu(runs, name):
    tiny, cpu = runs
    for r in range(1 if name == "reduce" else WORLD):  # reduce defines the result on its destination only
        assert tiny[r][name] == cpu[r][name], (r, tiny[r][name], cpu[r][name])
    expected = {
        "all_reduce": [[0.0, 3.0, 6.0], [9.0, 12.0, 15.0]],
        "all_reduce_max": [3.0, 3.0, 3.0],
        "broadcast": [10.0, 11.0, 12.0, 13.0, 14.0],
        "reduce": [3.0, 3.0, 3.0],
    }.get(name)
    if expected is not None:
        assert tiny[0][name] == expected


def test_ddp_matches_ddp_on_the_cpu(runs):
    tiny, cpu = runs
    # DDP keeps the replicas equal: every rank ends with the same parameters
    assert tiny[0]["params"] == tiny[1]["params"]
    for r in range(WORLD):
        torch.testing.assert_close(torch.tensor(tiny[r]["losses"]), torch.tensor(cpu[r]["losses"]),
                                   rtol=1e-5, atol=1e-6)
        for a, b in zip(tiny[r]["params"], cpu[r]["params"]):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b), rtol=1e-5, atol=1e-6)
