"""GPU benchmark: tiny on CUDA against eager CUDA PyTorch and torch.compile.

Rows: an 8-op elementwise chain and a full sum over 2^24 float32, float32 matmuls (1024^3,
4096^3, TF32 off), 4096^3 matmuls on tensor cores (float16, and float32 with TF32 allowed on
both sides), a 3x3 convolution, resnet18 inference (batch 1 and 64), a beautiful-MNIST CNN Adam
step (batch 512) and a resnet18 SGD-momentum step (batch 64 at 224^2).

Each callable is warmed up, then timed as the median over several timed runs of `inner` calls,
each call waited for (see `per_call`), so launch, scheduling and one synchronization per call are
included for every contender. Also printed: kernels per call (tiny: its own counter; PyTorch:
CUDA kernels seen by the profiler), the fraction of a device-to-device copy's bandwidth that the
memory-bound rows reach, and tiny's time inside its kernels (each kernel timed alone by the
trace) beside its time per call. Every result is checked against the eager CUDA one first.
The references run in a child process without tiny (see `Bench`), on the same seeded inputs.
Printed figures only; nothing here is pass/fail.

    python bench/bench_gpu.py [--rows chain,sum,...] [--reps 7] [--no-compile] [--ablate [fma,...]] [--try [async]]

--ablate then runs tiny again, in a fresh process each, with each of its CUDA optimizations
switched off (TINY_CUDA_OFF=fma, lanes, mma, occupancy, shared, tiles, vstage, ldmatrix, balance), against
the same reference results; `--ablate fma,shared` names some of them, `--ablate vstage+ldmatrix`
switches two off in one run. --try likewise runs tiny with each optimization that is not yet on
by default switched on (TINY_CUDA_ON=async: tensor-core chunks by cp.async through a ring of
shared-memory stages), so that it is measured before it becomes the default.
"""
import argparse
import copy
import os
import subprocess
import tempfile
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REFERENCE = "--reference-out" in sys.argv  # the eager-CUDA / torch.compile process: tiny stays out
if not REFERENCE:
    import torch_tiny  # noqa: F401
    from torch_tiny import debug

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from mnist import beautiful_mnist  # noqa: E402  (the example's model, one definition)

N = 1 << 24


def sync(device: str) -> None:
    (torch.tiny if device == "tiny" else torch.cuda).synchronize()


def per_call(fn, device: str, reps: int, inner: int, read_loss: bool = False) -> float:
    """Median seconds per call of `fn` over `reps` timed runs of `inner` calls each.

    Every call waits for its results: tiny builds the same lazy graph for the same call on the
    same inputs and computes it once (hash-consing), so unsynchronized repeats would share one
    computation. Both contenders pay the same wait per call. With `read_loss` a call waits for
    its first result's value only (`.item()`, as a training loop that logs its loss does) and the
    device is synchronized once after the run: what follows the loss may run on behind the host."""
    def wait(out):
        if read_loss:
            out[0].item()
        else:
            sync(device)  # tiny: realizes `out`, then waits for the device
    for _ in range(2):
        wait(fn())
    sync(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = fn()
            wait(out)
        sync(device)
        times.append((time.perf_counter() - t0) / inner)
    del out
    return statistics.median(times)


def cuda_kernels(fn) -> int | None:
    """CUDA kernels one call of `fn` launches, as the profiler sees them (None if it cannot)."""
    try:
        from torch.profiler import ProfilerActivity, profile
        fn()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA
                   and not e.name.startswith(("Memcpy", "Memset", "[memory]")))
    except Exception:  # a profiler that cannot start is no reason to lose the row
        return None


def tiny_kernels(fn) -> tuple[int, float]:
    """Kernels in one call of `fn` on tiny, and their summed time (each run alone), in seconds."""
    out = fn()
    sync("tiny")
    with debug.trace() as t:
        out = fn()
        sync("tiny")
    del out
    return t.kernel_count, sum(k.duration_us for k in t.kernels) * 1e-6


def check(name, got, want, atol, rtol):
    for g, w in zip(got, want):
        g, w = g.float().cpu(), w.float().cpu()
        if not torch.allclose(g, w, atol=atol, rtol=rtol):
            err = (g - w).abs().max().item()
            raise RuntimeError(f"{name}: tiny differs from eager CUDA (max abs error {err:.3g})")


class Bench:
    """Rows run in two processes: the reference one (eager CUDA and torch.compile, with tiny not
    loaded) saves its times, kernel counts and first results; then tiny runs in this one and
    compares. PyTorch cannot run them together: once a PrivateUse1 backend is registered it
    becomes torch's accelerator, and a CUDA backward trips the autograd engine's
    `opt_ready_stream && opt_parent_stream` assert (pytorch/pytorch#161129)."""

    def __init__(self, args, reference=None):
        self.args = args
        self.reference = reference  # None: this is the reference process; else {row: results}
        self.results = {}
        self.copy_bw = None

    def row(self, name, make, *, bytes_moved=0, flops=0, inner=1, atol=1e-4, rtol=1e-4, read_loss=False):
        """`make(device)` returns a callable that runs the work on `device` and returns its tensors."""
        a = self.args
        if self.reference is None:
            r = {"t": {}, "k": {}}
            fn = make("cuda")
            r["out"] = [o.cpu() for o in fn()]
            r["t"]["cuda"], r["k"]["cuda"] = per_call(fn, "cuda", a.reps, inner, read_loss), cuda_kernels(fn)
            if not a.no_compile:
                try:
                    fn = make("compile")
                    r["t"]["compile"] = per_call(fn, "cuda", a.reps, inner, read_loss)
                    r["k"]["compile"] = cuda_kernels(fn)
                except Exception as e:  # say why, keep the other columns
                    print(f"  ({name}: torch.compile failed: {type(e).__name__}: {str(e).splitlines()[0][:100]})")
            self.results[name] = r
            return
        r = self.reference.get(name)
        if r is None:
            print(f"{name}: no reference results")
            return
        fn = make("tiny")
        check(name, fn(), r["out"], atol, rtol)
        t, kernels = dict(r["t"]), dict(r["k"])
        t["tiny"] = per_call(fn, "tiny", a.reps, inner, read_loss)
        kernels["tiny"], tiny_kernel_s = tiny_kernels(fn)
        cols = []
        for d in ("cuda", "compile", "tiny"):
            if d in t:
                k = kernels.get(d)
                cols.append(f"{d} {t[d] * 1e6:9.1f} us ({'?' if k is None else k} k)")
        line = f"{name:30s} " + "  ".join(cols)
        line += f" | tiny/eager {t['tiny'] / t['cuda']:5.2f}x"
        if "compile" in t:
            line += f"  tiny/compile {t['tiny'] / t['compile']:5.2f}x"
        line += f"  tiny in kernels {tiny_kernel_s * 1e6:.1f} us"
        if bytes_moved and self.copy_bw:
            line += f"  {bytes_moved / t['tiny'] / 1e12:.2f} TB/s = {bytes_moved / t['tiny'] / self.copy_bw:.0%} of copy"
        if flops:
            line += f"  {flops / t['tiny'] / 1e12:.2f} TFLOP/s (eager {flops / t['cuda'] / 1e12:.2f})"
        print(line, flush=True)

    # -- rows -----------------------------------------------------------------------------------
    def copy_bandwidth(self):
        if self.reference is not None:
            self.copy_bw = self.reference["copy_bw"]
            print(f"device-to-device copy of 1 GiB: {self.copy_bw / 1e12:.2f} TB/s (read + write)")
            return
        src = torch.empty(1 << 28, device="cuda")  # 1 GiB
        dst = torch.empty_like(src)
        s = per_call(lambda: dst.copy_(src), "cuda", self.args.reps, 1)
        self.results["copy_bw"] = 2 * src.numel() * 4 / s

    @staticmethod
    def on(device):
        return "cuda" if device == "compile" else device

    def chain(self):
        torch.manual_seed(0)
        xc = torch.randn(N)

        def make(device):
            x = xc.to(self.on(device))
            f = lambda x: ((((x * 1.5 + 0.5).relu() - 0.25) * x).exp2().sqrt() + 1.0).tanh()
            if device == "compile":
                f = torch.compile(f)
            return lambda: [f(x)]
        self.row("elementwise chain, 2^24 f32", make, bytes_moved=8 * N, inner=10, atol=1e-5, rtol=1e-5)

    def total(self):
        torch.manual_seed(0)
        xc = torch.randn(N)

        def make(device):
            x = xc.to(self.on(device))
            f = torch.compile(torch.sum) if device == "compile" else torch.sum
            return lambda: [f(x)]
        self.row("x.sum(), 2^24 f32", make, bytes_moved=4 * N, inner=10, atol=1e-2, rtol=1e-4)

    def matmul(self, m, dtype=torch.float32, tf32=False):
        """`tf32`: float32 factors may round to TF32 (PyTorch's switch, read by both contenders
        when the op is called); float16 runs on tensor cores either way."""
        torch.manual_seed(0)
        ac, bc = torch.randn(m, m, dtype=dtype), torch.randn(m, m, dtype=dtype)

        def make(device):
            a, b = ac.to(self.on(device)), bc.to(self.on(device))
            f = torch.compile(torch.mm) if device == "compile" else torch.mm

            def call():
                torch.backends.cuda.matmul.allow_tf32 = tf32
                try:
                    return [f(a, b)]
                finally:
                    torch.backends.cuda.matmul.allow_tf32 = False
            return call
        exact = dtype == torch.float32 and not tf32
        name = f"matmul {m}^3 " + ("f32" if exact else "f32, TF32" if tf32 else str(dtype).split(".")[-1])
        # a float16 result rounds to 11 bits; TF32 keeps 11 bits of each factor
        tol = 1e-3 * m ** 0.5 if exact else 2e-2 * m ** 0.5
        self.row(name, make, flops=2 * m ** 3, inner=1 if m > 2048 else 5, atol=tol, rtol=1e-4 if exact else 1e-2)

    def conv(self):
        torch.manual_seed(0)
        xc, wc = torch.randn(1, 64, 56, 56), torch.randn(64, 64, 3, 3) * 0.05

        def make(device):
            x, w = xc.to(self.on(device)), wc.to(self.on(device))
            f = lambda x, w: F.conv2d(x, w, padding=1)
            if device == "compile":
                f = torch.compile(f)
            return lambda: [f(x, w)]
        self.row("conv 3x3 64->64, 1x64x56x56", make, flops=2 * 64 * 56 * 56 * 64 * 9, inner=5, atol=1e-3)

    def resnet18_infer(self, batch):
        import torchvision
        torch.manual_seed(0)
        model = torchvision.models.resnet18().eval()
        xc = torch.randn(batch, 3, 224, 224)

        def make(device):
            m, x = copy.deepcopy(model).to(self.on(device)), xc.to(self.on(device))
            if device == "compile":
                m = torch.compile(m)

            def fwd():
                with torch.no_grad():
                    return [m(x)]
            return fwd
        self.row(f"resnet18 inference, batch {batch}", make, inner=3, atol=2e-3, rtol=2e-3)

    def train_step(self, name, model, x_cpu, y_cpu, make_opt, inner, read_loss=False):
        def make(device):
            m = copy.deepcopy(model).to(self.on(device))
            opt = make_opt(m.parameters())
            x, y = x_cpu.to(self.on(device)), y_cpu.to(self.on(device))

            def step(x, y):
                opt.zero_grad()
                loss = F.cross_entropy(m(x), y)
                loss.backward()
                opt.step()
                return loss.detach()
            if device == "compile":
                step = torch.compile(step)
            return lambda: [step(x, y)]
        # every call trains further, so the check compares the first step's losses
        self.row(name + (", loss.item()" if read_loss else ""), make, inner=inner, atol=5e-3, rtol=5e-3,
                 read_loss=read_loss)

    def mnist_step(self, read_loss=False):
        torch.manual_seed(0)
        self.train_step("MNIST CNN Adam step, batch 512", beautiful_mnist(), torch.randn(512, 1, 28, 28),
                        torch.randint(0, 10, (512,)), lambda p: torch.optim.Adam(p, lr=1e-3), inner=3,
                        read_loss=read_loss)

    def resnet18_step(self, read_loss=False):
        import torchvision
        torch.manual_seed(0)
        self.train_step("resnet18 SGD step, batch 64", torchvision.models.resnet18(),
                        torch.randn(64, 3, 224, 224), torch.randint(0, 1000, (64,)),
                        lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9), inner=3 if read_loss else 1,
                        read_loss=read_loss)


# TINY_CUDA_OFF's names: fused multiply-adds, vector lanes, tensor cores, the 8 x 8 tiles' register
# cap, shared-memory and register tiles, 16-byte staging loads, ldmatrix fragments, balanced splits
ABLATIONS = ("fma", "lanes", "mma", "occupancy", "shared", "tiles", "vstage", "ldmatrix", "balance")
# TINY_CUDA_ON's names: optimizations off by default until a GPU has measured them
TRIALS = ("async",)

ROWS = {
    "chain": Bench.chain, "sum": Bench.total, "mm1024": lambda b: b.matmul(1024),
    "mm4096": lambda b: b.matmul(4096), "mm4096h": lambda b: b.matmul(4096, torch.float16),
    "mm4096tf32": lambda b: b.matmul(4096, tf32=True), "conv": Bench.conv, "r18": lambda b: b.resnet18_infer(1),
    "r18b64": lambda b: b.resnet18_infer(64), "mnist": Bench.mnist_step, "r18train": Bench.resnet18_step,
    # training loops that read each step's loss: the rest of a step may overlap the next one's host work
    "mnistloop": lambda b: b.mnist_step(read_loss=True), "r18trainloop": lambda b: b.resnet18_step(read_loss=True),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated: " + ",".join(ROWS))
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--ablate", nargs="?", const=",".join(ABLATIONS), metavar="fma,lanes,...",
                    help="also run tiny with each CUDA optimization off in turn (default: all of "
                         + ", ".join(ABLATIONS) + ")")
    ap.add_argument("--try", dest="trials", nargs="?", const=",".join(TRIALS), metavar="async",
                    help="also run tiny with each optimization not yet on by default switched on in turn (default: all "
                         "of " + ", ".join(TRIALS) + ")")
    ap.add_argument("--reference-out", help=argparse.SUPPRESS)  # internal: the reference process
    ap.add_argument("--reference-in", help=argparse.SUPPRESS)  # internal: an ablation run's reference
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = args.rows.split(",")
    if REFERENCE:
        b = Bench(args)
        b.copy_bandwidth()
        for r in rows:
            try:
                ROWS[r](b)
            except Exception as e:
                print(f"{r}: reference failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        torch.save(b.results, args.reference_out)
        return
    if torch.tiny.get_backend() != "cuda":
        raise SystemExit(f"bench_gpu needs tiny on a GPU (tiny computes on {torch.tiny.get_backend()})")
    switches = "".join(f", {v}={os.environ[v]}" for v in ("TINY_CUDA_OFF", "TINY_CUDA_ON") if os.environ.get(v))
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}; tiny on {torch.tiny.get_device_name()}{switches}")
    with tempfile.TemporaryDirectory() as tmp:
        out = args.reference_in or os.path.join(tmp, "reference.pt")
        if not args.reference_in:
            env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--reference-out", out], env=env, check=True)
        b = Bench(args, torch.load(out))
        b.copy_bandwidth()
        for r in rows:
            try:
                ROWS[r](b)
            except Exception as e:  # one failing row should not hide the others
                print(f"{r}: failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
        variants = [("TINY_CUDA_OFF", n) for n in (args.ablate or "").split(",") if n]
        variants += [("TINY_CUDA_ON", n) for n in (args.trials or "").split(",") if n]
        # the same rows again, without --ablate, --try and their lists of names
        argv = [a for a in sys.argv[1:] if not a.startswith(("--ablate", "--try")) and a not in (args.ablate, args.trials)]
        for var, names in variants:
            names = names.replace("+", ",")
            print(f"\n== tiny with {var}={names} ==", flush=True)
            subprocess.run([sys.executable, __file__, *argv, "--reference-in", out],
                           env=dict(os.environ, **{var: names}), check=False)


if __name__ == "__main__":
    main()
