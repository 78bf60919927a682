"""torch_tiny.debug.trace(): what a traced block ran, which module each kernel's work
came from, why every kernel stores its outputs, and the reports (text, HTML with the
schedule drawn by Graphviz, Chrome trace, the command line)."""
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import IS_TINY

if not IS_TINY:
    pytest.skip("tiny-specific tests (torch_tiny.debug)", allow_module_level=True)

from torch_tiny import debug  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DOCS = os.path.join(ROOT, "docs", "realize_reasons.md")


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("tiny")


def _train_steps(model, opt, n, seed=0):
    g = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(n):
        x = torch.randn(8, 16, generator=g).to("tiny")
        y = torch.randint(0, 4, (8,), generator=g).to("tiny")
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_trace_counts_what_count_kernels_counts():
    model = _mlp()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    _train_steps(model, opt, 1)
    with debug.count_kernels() as c, debug.trace() as t:
        _train_steps(model, opt, 3)
    assert t.kernel_count == c.kernels > 0
    per_step = t.kernels_per_step()
    assert [per_step[s] for s in (1, 2, 3)] == [per_step[1]] * 3  # the same step three times
    assert per_step.get(0, 0) == 0
    # after the first traced step every realize is a schedule-cache hit
    assert all(s.cached for s in t.schedules if s.step >= 2)
    for k in t.kernels:
        assert k.duration_us >= 0 and k.outputs and k.name
        assert k.bytes_written > 0
    # every schedule's kernels are its own, in order
    assert sum(len(s.kernels) for s in t.schedules) == t.kernel_count


def test_trace_matches_untraced_numbers():
    a, b = _mlp(), _mlp()
    oa = torch.optim.SGD(a.parameters(), lr=0.1, momentum=0.9)
    ob = torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
    plain = _train_steps(a, oa, 3)
    with debug.trace():
        traced = _train_steps(b, ob, 3)
    assert plain == traced
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p.cpu(), q.cpu())


def test_backward_work_is_attributed_to_its_module():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with debug.trace() as t:
        _train_steps(model, opt, 1)
    backward = [k for k in t.kernels if "threshold_backward" in k.ops]
    assert backward, [k.ops for k in t.kernels]
    for k in backward:
        assert "Sequential.1" in k.modules, (k.ops, k.modules)
    # the weight gradient of the last Linear (an mm in its backward) is the module's
    mm_grads = [k for k in t.kernels if "mm" in k.ops and "Sequential.2" in k.modules]
    assert mm_grads
    # the optimizer runs outside every module; its work carries no module path
    assert any(k.module == "" for k in t.kernels)


def test_resnet18_modules():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).eval().to("tiny")
    x = torch.randn(1, 3, 64, 64).to("tiny")
    with torch.no_grad():
        for _ in range(2):  # schedule and compile outside the trace
            model(x).cpu()
        with debug.trace() as t:
            model(x).cpu()
    assert t.kernel_count > 0 and t.root_name == "ResNet"
    # a replay of the schedule made before the trace: modules come from this call's nodes
    assert [s.cached for s in t.schedules] == [True]
    assert t.display_module("ResNet.layer1.0.bn1") == "layer1.0.bn1"
    for k in t.kernels:
        assert k.modules, (k.name, k.ops)  # inference: all work happens inside the model
        assert all(m == "ResNet" or m.startswith("ResNet.") for m in k.modules)
    # every kernel holding layer1.0's work is owned by layer1.0 or by an ancestor
    layer10 = [k for k in t.kernels if any(m.startswith("ResNet.layer1.0") for m in k.modules)]
    assert layer10
    for k in layer10:
        assert k.module in ("ResNet", "ResNet.layer1") or k.module.startswith("ResNet.layer1.0"), k.module
        if all(m.startswith("ResNet.layer1.0") for m in k.modules):
            assert k.module.startswith("ResNet.layer1.0")
    assert any(k.module.startswith("ResNet.layer1.0") for k in layer10)
    # the stem: the kernels before layer1's work hold conv1 / bn1 / relu / maxpool only
    first_layer1 = min(k.index for k in t.kernels if any(m.startswith("ResNet.layer1") for m in k.modules))
    stem = [k for k in t.kernels if k.index < first_layer1]
    assert stem
    stem_modules = {m for k in stem for m in k.modules}
    assert stem_modules <= {"ResNet.conv1", "ResNet.bn1", "ResNet.relu", "ResNet.maxpool"}, stem_modules
    assert "ResNet.conv1" in stem_modules
    # the per-module table adds up: top-level rows own every kernel once
    from torch_tiny.debug.report import module_rows
    rows = module_rows(t.result)
    assert sum(r[2] for r in rows if r[1] == 0) == t.kernel_count
    assert t.module_classes["ResNet.layer1.0.bn1"] == "BatchNorm2d"


# --- every realize rule the scheduler has, provoked


def _scatter():
    z = torch.zeros(10, device="tiny")
    return z.index_add(0, torch.tensor([1, 2, 1], device="tiny"), torch.ones(3, device="tiny"))


def _partial_write():
    x = torch.randn(8, 8).to("tiny") * 2
    x[2:4] = 1.0
    return x


def _partial_write_read():
    y = torch.randn(8, 8).to("tiny") * 2
    y[2:4] = 1.0
    return y.sum(0)  # y is gone by the sync: its write is stored because it is partial


def _bitcast():
    return (torch.randn(64).to("tiny") * 2).view(torch.int16) + 1


def _repeated_reduce():
    x = torch.randn(64, 64).to("tiny")
    return x - x.sum(0)  # column sums read along the inner loop: 64 evaluations each


def _expensive_value():
    x = torch.randn(64, 1).to("tiny").exp()
    return (x @ torch.ones(1, 64, device="tiny")).sum(0) + x.sum()  # exp read 64x through the matmul


def _nested_reduce():
    a, b = torch.randn(32, 64).to("tiny"), torch.randn(64, 32).to("tiny")
    return (a @ b).softmax(1)


def _reduce_read_across():
    # the weight gradient reads grad_output channels-last, and grad_output (2 y) is computed
    # from the convolution's output y: y gets a kernel of its own, in its own order
    x = torch.randn(2, 16, 16, 16, device="tiny")
    w = torch.randn(16, 16, 3, 3, device="tiny", requires_grad=True)
    F.conv2d(x, w, padding=1).square().sum().backward()
    return w.grad


def _product_beside_other_reduces():
    # two products added (over reduces too long to join into one): one kernel would run
    # both in plain loops, neither tiled
    a, c = (torch.randn(64, 128, device="tiny") for _ in range(2))
    b, d = (torch.randn(128, 64, device="tiny") for _ in range(2))
    return a @ b + c @ d


def _recurrence_state():
    # c is never requested: each step's kernel (after its product) would recompute every
    # earlier step's c from their gates
    w, g = torch.randn(8, 8, device="tiny") * 0.1, torch.randn(6, 4, 8, device="tiny")
    h, c = torch.full((4, 8), 0.5, device="tiny"), torch.zeros(4, 8, device="tiny")
    for t in range(6):
        f = torch.sigmoid(h @ w)
        c = f * c + (1 - f) * g[t]
        h = torch.tanh(c)
    return h


def _permuted_weight_grad():
    x = torch.randn(2, 16, 32, 32, device="tiny")
    w = torch.randn(32, 16, 3, 3, device="tiny", requires_grad=True)
    F.conv2d(x, w, padding=1).sum().backward()
    return w.grad


def _conv_operand():
    x = torch.randn(1, 8, 64, 64).to("tiny").relu()
    return F.conv2d(x, torch.randn(8, 8, 3, 3).to("tiny"), padding=1)


def _reshape():
    return (torch.randn(8, 8).to("tiny") * 3).sum(1)


# rule (as the docs name it) -> code that provokes it
RULES = {
    "requested": lambda: torch.randn(4).to("tiny") + 1,
    "requested (as a reshape)": _reshape,
    "requested (through a permutation)": _permuted_weight_grad,
    "contiguous copy": _permuted_weight_grad,  # grad_output stored channels-last
    "contiguous copy (convolution operand)": _conv_operand,
    "partial write": _partial_write_read,
    "copy of the base of a partial write": _partial_write,
    "scatter": _scatter,
    "copy of the base of a scatter": _scatter,
    "source of a bitcast to another itemsize": _bitcast,
    "reduce would be computed": _repeated_reduce,
    "expensive value would be computed": _expensive_value,
    "reduce inside another reduce's loop": _nested_reduce,
    "reduce read across its own order": _reduce_read_across,
    "product beside other reduces in one kernel": _product_beside_other_reduces,
    "recurrence state would be recomputed": _recurrence_state,
}
# how each rule reads in a kernel's reason
PATTERN = {
    "requested": r"^requested by (?!.*\((as a reshape|through a permutation)\))",
    "requested (as a reshape)": r"requested by .*\(as a reshape\)",
    "requested (through a permutation)": r"requested by .*\(through a permutation\)",
    "contiguous copy": r"contiguous copy of \d+ elements, asked by (?!convolution \(its)",
    "contiguous copy (convolution operand)": r"contiguous copy of \d+ elements, asked by convolution \(its operand",
    "partial write": r"partial write of \d+ of a storage's \d+ elements",
    "copy of the base of a partial write": r"copy of the base of a partial write",
    "scatter": r"(scatter of \d+ values into \d+ elements|requested by)",
    "copy of the base of a scatter": r"copy of the base of a scatter",
    "source of a bitcast to another itemsize": r"source of a bitcast to another itemsize",
    "reduce would be computed": r"reduce would be computed \d+(\.\d)?x per element",
    "expensive value would be computed": r"expensive value would be computed \d+(\.\d)?x per element",
    "reduce inside another reduce's loop": r"reduce inside another reduce's loop",
    "reduce read across its own order": r"reduce read across its own order",
    "product beside other reduces in one kernel": r"product beside other reduces in one kernel",
    "recurrence state would be recomputed": r"recurrence state would be recomputed by \d+ kernels",
}


@pytest.mark.parametrize("rule", list(RULES))
def test_every_realize_rule_is_provoked_and_named(rule):
    with debug.trace() as t:
        out = RULES[rule]()
        for v in out if isinstance(out, tuple) else (out,):
            v.cpu()
    reasons = [k.why for k in t.kernels]
    assert any(re.search(PATTERN[rule], r) for r in reasons), reasons


def test_every_rule_is_documented_and_tested():
    """docs/realize_reasons.md explains each rule; each has a test above."""
    doc = open(DOCS).read()
    documented = re.findall(r"^### `([^`]+)`", doc, re.M)
    assert sorted(documented) == sorted(RULES)


def test_cause_names_what_forced_the_realize():
    x = torch.randn(16).to("tiny")
    with debug.trace() as t:
        (x * 2).sum().item()
        (x + 1).cpu()
        y = x * 3
        torch.tiny.synchronize()
    causes = [s.cause for s in t.schedules]
    assert causes[0].startswith(".item()")
    assert causes[1].startswith("a copy to the host")
    assert causes[2] == "torch.tiny.synchronize()"
    assert y.device.type == "tiny"


def test_cache_hits_and_misses():
    x = torch.randn(64, 16).to("tiny")
    w = torch.randn(16, 8).to("tiny")
    torch.tiny.synchronize()
    (x[0:8] @ w).sum().item()
    with debug.trace() as t:
        (x[0:8] @ w).sum().item()          # the same graph: a cache hit
        (x[8:16] @ w).sum().item()         # a window of stored x elsewhere: the same graph too
        ((x * 2)[8:16] @ w).sum().item()   # a window of a computed value: the offset is in the graph
        ((x * 2)[16:24] @ w).sum().item()  # so another offset is a new schedule
        (x[0:4] @ w).sum().item()          # another shape
    s = t.schedules
    assert [r.cached for r in s] == [True, True, False, False, False]
    assert s[0].miss == "" and s[1].miss == ""
    assert s[3].miss.startswith("a new view offset"), s[3].miss
    assert "off=256" in s[3].miss
    assert s[4].miss.startswith("a new shape"), s[4].miss


def test_nested_traces_are_refused():
    with debug.trace():
        with pytest.raises(RuntimeError, match="already recording"):
            with debug.trace():
                pass


def test_steps_limit_stops_recording():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _train_steps(model, opt, 1)
    with debug.trace(steps=2) as t:
        _train_steps(model, opt, 4)
    assert sorted(s for s in t.kernels_per_step() if s > 0) == [1, 2]


# --- reports


def _traced_mnist_step():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from mnist import beautiful_mnist
    torch.manual_seed(0)
    model = beautiful_mnist().to("tiny")
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 1, 28, 28).to("tiny"), torch.randint(0, 10, (16,)).to("tiny")

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    step()
    torch.tiny.synchronize()
    with debug.trace() as t:
        step()
        step()
    return t


@pytest.fixture(scope="module")
def mnist_trace():
    return _traced_mnist_step()


def test_summary(mnist_trace):
    text = mnist_trace.summary(file=open(os.devnull, "w"))
    assert f"{mnist_trace.kernel_count} kernels" in text
    assert "kernels by module" in text and "Conv2d" in text and "BatchNorm2d" in text
    assert "why kernels store their outputs" in text
    per_step = mnist_trace.kernels_per_step()
    assert f"kernels per step: {per_step[1]}, {per_step[2]}" in text


def test_html_report(mnist_trace, tmp_path):
    if shutil.which("dot") is None:
        if os.environ.get("TINY_DEVICE") == "cuda":  # the GPU machine has no package registry
            pytest.skip("Graphviz's dot is not installed")
        pytest.fail("Graphviz's dot is needed for the HTML report's graph (scripts/setup.sh installs graphviz)")
    path = tmp_path / "report.html"
    mnist_trace.save_html(str(path))
    page = path.read_text()
    assert "http://" not in page.replace("http://www.w3.org", "")  # self-contained (SVG namespaces aside)
    assert "<script src" not in page and "<link" not in page
    svgs = re.findall(r"<svg.*?</svg>", page, re.S)
    assert len(svgs) == 2  # one per step
    per_step = mnist_trace.kernels_per_step()
    for step, svg in zip((1, 2), svgs):
        root = ET.fromstring(svg)
        ns = {"s": "http://www.w3.org/2000/svg"}
        titles = [g.find("s:title", ns).text for g in root.iter("{http://www.w3.org/2000/svg}g")
                  if g.get("class") == "node"]
        assert len([x for x in titles if x.startswith("k")]) == per_step[step]
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("chromium is not installed (scripts/test.sh installs it)")
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                        "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "torch_tiny trace" in r.stdout
    console = [line for line in r.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert console == []


def test_chrome_trace(mnist_trace, tmp_path):
    path = tmp_path / "trace.json"
    mnist_trace.save_chrome_trace(str(path))
    events = json.loads(path.read_text())
    assert isinstance(events, list) and events
    for e in events:
        assert e["ph"] == "X" and e["dur"] >= 0 and e["ts"] >= 0 and e["name"]
    kernels = [e for e in events if e["cat"] == "kernel"]
    assert len(kernels) == mnist_trace.kernel_count
    assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)


def test_command_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import sys, torch, torch.nn as nn\n"
        "import torch_tiny\n"
        "m = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 2)).to('tiny')\n"
        "opt = torch.optim.SGD(m.parameters(), lr=0.1)\n"
        "for i in range(int(sys.argv[1])):\n"
        "    opt.zero_grad(); loss = m(torch.ones(4, 8, device='tiny')).square().mean()\n"
        "    loss.backward(); opt.step()\n"
        "    print('loss', loss.item())\n")
    html, tr = tmp_path / "out.html", tmp_path / "out.json"
    r = subprocess.run([sys.executable, "-m", "torch_tiny.debug", "--html", str(html), "--trace", str(tr),
                        "--steps", "3", str(script), "5"], capture_output=True, text=True, timeout=600,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("loss") >= 5  # the script ran to its end (steps beyond 3 untraced)
    assert "kernels by module" in r.stdout and "Linear" in r.stdout and "Tanh" in r.stdout
    m = re.search(r"kernels per step: ([\d, ]+)", r.stdout)
    assert m and len(m.group(1).split(",")) == 3
    assert html.exists() and json.loads(tr.read_text())


def test_lstm_replay_names_its_modules():
    # An LSTM's steps run as subgraph calls, expanded when a schedule is made: in a replay, the
    # kernels computing a call's insides are still named after the module that made the call.
    torch.manual_seed(0)

    class Tagger(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = torch.nn.LSTM(4, 8, batch_first=True)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, x):
            return self.head(self.rnn(x)[0])

    model = Tagger().to("tiny")
    x = torch.randn(2, 6, 4).to("tiny")
    with torch.no_grad():
        for _ in range(2):
            model(x).cpu()
        with debug.trace() as t:
            model(x).cpu()
    assert [s.cached for s in t.schedules] == [True]
    # (kernels that read windows compute nodes the scheduler made: those stand for the graph's)
    computing = [k for k in t.kernels if not k.reason.startswith("contiguous copy")]  # (a copy holds no work)
    assert len(computing) > 12
    for k in computing:
        assert k.modules, (k.name, k.ops)
    assert sum(1 for k in computing if "Tagger.rnn" in k.modules) >= 12  # the steps
