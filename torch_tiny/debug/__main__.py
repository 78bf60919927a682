"""python -m torch_tiny.debug [--html out.html] [--trace out.json] [--graph out.svg] [--steps N] script.py args...

Runs a script with a trace on and prints the trace's summary when the script
ends (or when N steps have run: a step begins with each call of the first
top-level module the script runs).
"""
import argparse
import os
import runpy
import sys


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m torch_tiny.debug", description=__doc__.split("\n\n")[1])
    ap.add_argument("--html", help="write the HTML report here")
    ap.add_argument("--trace", help="write a Chrome/Perfetto trace (JSON) here")
    ap.add_argument("--graph", help="draw the last step's schedule here (.svg or .png)")
    ap.add_argument("--steps", type=int, help="trace only the first N steps")
    ap.add_argument("--top", type=int, default=10, help="kernels in the summary's top list")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)

    import torch_tiny  # noqa: F401  (registers the device before the script runs)
    from torch_tiny.debug import trace

    sys.argv = [a.script] + a.args
    sys.path.insert(0, os.path.dirname(os.path.abspath(a.script)))
    t = trace(steps=a.steps)
    code = 0
    with t:
        try:
            runpy.run_path(a.script, run_name="__main__")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    t.summary(top=a.top)
    if a.html:
        t.save_html(a.html)
        print(f"wrote {a.html}")
    if a.trace:
        t.save_chrome_trace(a.trace)
        print(f"wrote {a.trace}")
    if a.graph:
        t.save_graph(a.graph)
        print(f"wrote {a.graph}")
    return code


if __name__ == "__main__":
    sys.exit(main())
