"""The engine's caches as a user sees them: a repeated graph is not scheduled or
compiled again, and a second process compiles nothing the first one compiled."""
import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from conftest import DEV, requires_tiny

SCRIPT = textwrap.dedent(
    """
    import torch, torch_tiny
    x = torch.arange(4096, dtype=torch.float32).reshape(64, 64).to("tiny")
    y = ((x * 0.5).sin() @ x.t()).softmax(1).sum(0)
    torch.tiny.synchronize()
    c = torch_tiny.debug.counters()
    print("RESULT", c["compiles"], c["disk_cache_hits"], float(y.cpu().sum()))
    """
)


def run(cache_dir):
    env = dict(os.environ, TINY_CACHE_DIR=str(cache_dir), TINY_STRICT="0")
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    line = [l for l in out.stdout.splitlines() if l.startswith("RESULT")][0].split()
    return int(line[1]), int(line[2]), float(line[3])


def test_second_process_compiles_nothing(tmp_path):
    requires_tiny()
    compiles1, hits1, value1 = run(tmp_path)
    compiles2, hits2, value2 = run(tmp_path)
    assert compiles1 > 0 and hits1 == 0
    assert compiles2 == 0 and hits2 == compiles1
    assert value1 == value2


def test_repeated_step_is_a_cache_hit():
    requires_tiny()
    import torch_tiny

    w = torch.randn(32, 32).to(DEV)
    x = torch.randn(8, 32).to(DEV)
    torch.tiny.synchronize()

    def step():
        return ((x @ w).relu() - 0.5).sum()

    expected = ((x.cpu() @ w.cpu()).relu() - 0.5).sum()
    step().item()
    c0 = torch_tiny.debug.counters()
    for _ in range(3):
        torch.testing.assert_close(step().cpu(), expected, rtol=1e-5, atol=1e-4)
    c1 = torch_tiny.debug.counters()
    assert c1["schedules"] == c0["schedules"]
    assert c1["schedule_cache_hits"] >= c0["schedule_cache_hits"] + 3
    assert c1["compiles"] == c0["compiles"]


def test_dropout_reuses_programs_with_new_seeds():
    requires_tiny()
    import torch_tiny

    x = torch.ones(1000).to(DEV)
    torch.tiny.synchronize()
    a = torch.nn.functional.dropout(x, 0.5).cpu()
    c0 = torch_tiny.debug.counters()
    b = torch.nn.functional.dropout(x, 0.5).cpu()
    c1 = torch_tiny.debug.counters()
    assert c1["compiles"] == c0["compiles"]  # the random keys are launch parameters
    assert not torch.equal(a, b)  # ...and they differ between draws
    assert set(torch.unique(a).tolist()) <= {0.0, 2.0}


@pytest.mark.parametrize("make_opt", [
    lambda ps: torch.optim.Adam(ps, lr=1e-2),
    lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False),
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
], ids=["adam", "adamw_single_tensor", "sgd_lr_schedule"])
def test_training_steps_reuse_schedule_and_programs(make_opt):
    """Adam's bias corrections and a scheduled learning rate change every step; they are
    launch parameters, so from the second step on a step is neither scheduled nor compiled
    (and its numbers stay the CPU's)."""
    requires_tiny()
    import torch_tiny
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    dev_model = copy.deepcopy(model).to(DEV)
    opt, dev_opt = make_opt(model.parameters()), make_opt(dev_model.parameters())
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.7)
    dev_sched = torch.optim.lr_scheduler.StepLR(dev_opt, 1, gamma=0.7)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    xd, yd = x.to(DEV), y.to(DEV)
    for step in range(5):
        if step == 2:
            c0 = torch_tiny.debug.counters()
        for m, o, s, a, b in ((model, opt, sched, x, y), (dev_model, dev_opt, dev_sched, xd, yd)):
            o.zero_grad()
            loss = torch.nn.functional.cross_entropy(m(a), b)
            loss.backward()
            o.step()
            s.step()
            loss.item()
    c1 = torch_tiny.debug.counters()
    assert c1["compiles"] == c0["compiles"]
    assert c1["schedules"] == c0["schedules"]
    for p, pd in zip(model.parameters(), dev_model.parameters()):
        torch.testing.assert_close(pd.detach().cpu(), p.detach(), rtol=1e-5, atol=1e-6)
