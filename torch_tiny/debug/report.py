"""Reports from a Trace: a text summary, one self-contained HTML page with the
schedule drawn by Graphviz, a Chrome/Perfetto timeline."""
from __future__ import annotations

import html
import json
import re
from collections import Counter, OrderedDict

from .trace import Trace, reason_rule

# Pastel fills by top-level module (Graphviz color names need no network).
_PALETTE = ["#cfe2f3", "#d9ead3", "#fff2cc", "#f4cccc", "#d9d2e9", "#fce5cd", "#d0e0e3", "#ead1dc",
            "#c9daf8", "#e6b8af", "#b6d7a8", "#ffe599"]


def _ms(us: float) -> str:
    return f"{us / 1e3:.3f}"


def _mb(b: int) -> str:
    return f"{b / 1e6:.2f}"


def _short(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


def _shape(dtype: str, shape) -> str:
    dt = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "float64": "f64", "int64": "i64", "int32": "i32",
          "int16": "i16", "int8": "i8", "uint8": "u8", "bool": "bool"}.get(dtype, dtype)
    return f"{dt}[{','.join(str(d) for d in shape)}]"


def module_rows(t: Trace) -> list:
    """Per-module totals in tree order: (path, depth, kernels, time_us, bytes_read,
    bytes_written, flops, touching). A module's totals count the kernels its subtree
    owns (a kernel is owned by the innermost module holding all of its work);
    `touching` counts the kernels holding any of its subtree's work."""
    totals: dict = {}
    children: dict = {}

    def add_path(path):
        parts = path.split(".") if path else [""]
        parent = None
        for i in range(1, len(parts) + 1):
            p = ".".join(parts[:i])
            if p not in totals:
                totals[p] = [0, 0.0, 0, 0, 0, 0]
                children.setdefault(parent, []).append(p)
            parent = p
        return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]

    for k in t.kernels:
        for p in add_path(k.module):
            row = totals[p]
            row[0] += 1
            row[1] += k.duration_us
            row[2] += k.bytes_read
            row[3] += k.bytes_written
            row[4] += k.flops
        touched = set()
        for m in k.modules or [""]:
            touched.update(add_path(m))
        for p in touched:
            totals[p][5] += 1
    rows = []
    order = {p: i for i, p in enumerate(t.module_classes)}  # forward call order

    def visit(path, depth):
        rows.append((path, depth, *totals[path]))
        for c in sorted(children.get(path, []), key=lambda c: order.get(c, len(order))):
            visit(c, depth + 1)

    for root in sorted(children.get(None, []), key=lambda p: p == ""):  # "(no module)" last
        visit(root, 0)
    return rows


def _module_label(t: Trace, path: str, depth: int) -> str:
    if not path:
        return "(no module)"
    last = path.split(".")[-1] if depth else t.display_module(path)
    cls = t.module_classes.get(path, "")
    return last + (f" ({cls})" if cls and cls != last else "")


def reason_counts(t: Trace) -> list:
    """[(count, rule, example)] over kernels, the rule's numbers left out."""
    counts: Counter = Counter()
    example = {}
    for k in t.kernels:
        rule = reason_rule(k.why)
        counts[rule] += 1
        example.setdefault(rule, k.why)
    return [(n, rule, example[rule]) for rule, n in counts.most_common()]


def summary(t: Trace, top: int = 10) -> str:
    out = []
    w = out.append
    n_sched = len(t.schedules)
    cached = sum(s.cached for s in t.schedules)
    run_us = sum(k.duration_us for k in t.kernels)
    sched_us = sum(s.schedule_us for s in t.schedules)
    compile_us = sum(s.compile_us for s in t.schedules)
    per_step = t.kernels_per_step()
    steps = list(range(1, t.step_count + 1))
    w(f"torch_tiny trace: {t.kernel_count} kernels in {n_sched} realizes ({cached} from the schedule cache), "
      f"{len(steps)} steps")
    w(f"  time in kernels {_ms(run_us)} ms, scheduling {_ms(sched_us)} ms, compiling {_ms(compile_us)} ms")
    if not t.kernels:
        w("  no kernels ran")
        return "\n".join(out)
    if steps:
        w("kernels per step: " + ", ".join(f"{per_step[s]}" for s in steps)
          + (f"  (and {per_step[0]} before the first step)" if per_step.get(0) else ""))
    w("")
    w("kernels by module: 'kernels' are those the module owns (the innermost module holding all of a kernel's")
    w("work), 'in' those holding any of its work; a row counts its whole subtree")
    w(f"  {'module':<40} {'kernels':>7} {'in':>5} {'time ms':>9} {'MB read':>9} {'MB written':>10} {'MFLOP':>9}")
    for path, depth, n, us, br, bw, fl, touching in module_rows(t):
        label = "  " * depth + _module_label(t, path, depth)
        w(f"  {_short(label, 40):<40} {n:>7} {touching:>5} {_ms(us):>9} {_mb(br):>9} {_mb(bw):>10} "
          f"{fl / 1e6:>9.2f}")
    w("")
    w(f"top {top} kernels by time")
    w(f"  {'#':>4} {'step':>4} {'kernel':<20} {'ms':>8} {'MB':>7}  {'module':<24} why / ops")
    for k in sorted(t.kernels, key=lambda k: -k.duration_us)[:top]:
        w(f"  {k.index:>4} {k.step:>4} {_short(k.name, 20):<20} {_ms(k.duration_us):>8} "
          f"{_mb(k.bytes_read + k.bytes_written):>7}  {_short(t.describe_module(k.module), 24):<24} "
          f"{_short(k.why, 60)} / {_short(','.join(k.ops), 40)}")
    w("")
    w("why kernels store their outputs (realize reasons, by count)")
    for n, rule, ex in reason_counts(t):
        w(f"  {n:>5}  {_short(ex, 110)}")
    w("")
    causes = Counter(s.cause for s in t.schedules)
    w("what forced each realize")
    for cause, n in causes.most_common():
        w(f"  {n:>5}  {cause}")
    misses = [s for s in t.schedules if not s.cached]
    if misses:
        w("")
        w(f"new schedules ({len(misses)}; the others replayed a cached one)")
        for s in misses[:top]:
            w(f"  realize {s.index} (step {s.step}, {len(s.kernels)} kernels, compile {_ms(s.compile_us)} ms): "
              f"{_short(s.miss, 160)}")
        if len(misses) > top:
            w(f"  ... {len(misses) - top} more")
    return "\n".join(out)


def _color(t: Trace, module: str) -> str:
    if not module:
        return "#eeeeee"
    rel = t.display_module(module)
    if rel == module and "." not in module:
        return "#ffffff"  # the model itself (work spanning its children)
    top = rel.split(".")[0]
    return _PALETTE[sum(top.encode()) % len(_PALETTE)]


def schedule_graph(t: Trace, step: int | None = None):
    """A graphviz.Digraph of one step's kernels: a cluster per realize, kernels as
    boxes colored by module, buffers as edges (inputs from before the step as notes)."""
    import graphviz

    if step is None:
        step = max((k.step for k in t.kernels), default=0)
    kernels = [k for k in t.kernels if k.step == step]
    g = graphviz.Digraph(f"step{step}", graph_attr={"rankdir": "TB", "fontname": "Helvetica", "fontsize": "10"},
                         node_attr={"shape": "box", "style": "rounded,filled", "fontname": "Helvetica",
                                    "fontsize": "9"},
                         edge_attr={"fontname": "Helvetica", "fontsize": "8", "color": "#666666"})
    writer: dict = {}
    edges = []
    earlier: dict = {}  # kernel -> inputs computed before the step
    for k in kernels:
        for o in k.inputs:
            src = writer.get(o.buffer)
            if src is None:
                earlier[k.index] = earlier.get(k.index, 0) + 1
            else:
                edges.append((src, f"k{k.index}", _shape(o.dtype, o.shape)))
        for o in k.outputs:
            writer[o.buffer] = f"k{k.index}"
    by_schedule: "OrderedDict[int, list]" = OrderedDict()
    for k in kernels:
        by_schedule.setdefault(k.schedule, []).append(k)
    for si, ks in by_schedule.items():
        s = t.schedules[si]
        with g.subgraph(name=f"cluster_s{si}") as c:
            c.attr(label=f"realize {si}: {_short(s.cause, 60)} ({'cached' if s.cached else 'new schedule'})",
                   style="dashed", color="#999999")
            for k in ks:
                label = [f"{k.name}  {_ms(k.duration_us)} ms", _short(",".join(k.ops), 40),
                         _short(t.describe_module(k.module), 40), _short(k.why, 44)]
                if earlier.get(k.index):
                    label.append(f"+{earlier[k.index]} inputs from before the step")
                tip = (f"kernel {k.index}: {k.name}\nmodule: {t.describe_module(k.module)}\nwhy: {k.why}\n"
                       f"ops: {', '.join(k.ops)}\ninputs: {' '.join(_shape(o.dtype, o.shape) for o in k.inputs)}\n"
                       f"outputs: {' '.join(_shape(o.dtype, o.shape) for o in k.outputs)}\n"
                       f"time: {_ms(k.duration_us)} ms, read {_mb(k.bytes_read)} MB, "
                       f"written {_mb(k.bytes_written)} MB, {k.flops / 1e6:.2f} MFLOP")
                c.node(f"k{k.index}", label="\n".join(label), tooltip=tip, fillcolor=_color(t, k.module))
    for src, dst, label in edges:
        g.edge(src, dst, tooltip=label)
    return g


def save_graph(t: Trace, path: str, step: int | None = None) -> None:
    fmt = path.rsplit(".", 1)[-1].lower()
    data = schedule_graph(t, step).pipe(format=fmt)
    with open(path, "wb") as f:
        f.write(data)


def _table(headers, rows) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


_CSS = """
body { font-family: -apple-system, Helvetica, Arial, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; } h2 { font-size: 16px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 12px; margin: 8px 0; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f3f3f3; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.graph { overflow: auto; border: 1px solid #ddd; padding: 8px; max-height: 1200px; }
.note { color: #666; font-size: 12px; } code { font-size: 12px; }
"""


def save_html(t: Trace, path: str, max_graph_steps: int = 4) -> None:
    esc = html.escape
    num = lambda v: f'<span class="n">{v}</span>'  # noqa: E731
    parts = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>torch_tiny trace</title>"
             f"<style>{_CSS}</style></head><body>", "<h1>torch_tiny trace</h1>",
             "<pre>" + esc("\n".join(summary(t).splitlines()[:2])) + "</pre>"]
    per_step = t.kernels_per_step()
    steps = list(range(1, t.step_count + 1))
    if steps:
        parts.append("<h2>Kernels per step</h2>")
        parts.append(_table(["step", "kernels", "time ms", "realizes"],
                            [(s, num(per_step[s]), num(_ms(sum(k.duration_us for k in t.kernels if k.step == s))),
                              num(sum(1 for r in t.schedules if r.step == s))) for s in steps]))
    parts.append("<h2>Kernels by module</h2><p class='note'>A kernel is owned by the innermost module holding "
                 "all of its work (fused work of several modules goes to their common parent); <i>in kernels</i> "
                 "counts the kernels holding any of a module's work. A row counts its whole subtree.</p>")
    rows = []
    for p, depth, n, us, br, bw, fl, touching in module_rows(t):
        label = "&nbsp;" * (4 * depth) + esc(_module_label(t, p, depth))
        rows.append((f"<span style='background:{_color(t, p)}'>{label}</span>", num(n), num(touching),
                     num(_ms(us)), num(_mb(br)), num(_mb(bw)), num(f"{fl / 1e6:.2f}")))
    parts.append(_table(["module", "kernels owned", "in kernels", "time ms", "MB read", "MB written", "MFLOP"],
                        rows))
    parts.append("<h2>Why kernels store their outputs</h2>")
    parts.append(_table(["kernels", "reason (an example with its numbers)"],
                        [(num(n), esc(ex)) for n, _, ex in reason_counts(t)]))
    parts.append("<h2>Realizes</h2>")
    parts.append(_table(["#", "step", "cause", "kernels", "schedule", "compile ms", "graph"],
                        [(s.index, s.step, esc(s.cause), num(len(s.kernels)),
                          "cached" if s.cached else "new", num(_ms(s.compile_us)),
                          esc(s.miss)) for s in t.schedules]))
    drawn = [s for s in steps if per_step[s]][-max_graph_steps:] or ([0] if per_step.get(0) else [])
    if drawn:
        parts.append("<h2>Schedules</h2><p class='note'>One box per kernel (hover for details), grouped by the "
                     "realize that ran it; edges are buffers; notes are buffers computed before the step.</p>")
    for s in drawn:
        parts.append(f"<h3>step {s}</h3>")
        try:
            svg = schedule_graph(t, s).pipe(format="svg").decode()
            svg = re.sub(r'<svg width="[^"]*" height="[^"]*"', '<svg style="max-width:100%;height:auto"',
                         svg[svg.find("<svg"):], count=1)
            parts.append("<div class='graph'>" + svg + "</div>")
        except Exception as e:  # graphviz's dot missing
            parts.append(f"<p class='note'>Graphviz could not draw the schedule ({esc(str(e))}); install "
                         f"Graphviz (<code>apt install graphviz</code>).</p>")
    parts.append("<h2>All kernels</h2>")
    parts.append(_table(
        ["#", "step", "kernel", "ms", "module", "why", "ops", "inputs", "outputs", "MB r/w", "MFLOP"],
        [(k.index, k.step, esc(k.name), num(_ms(k.duration_us)), esc(t.describe_module(k.module)), esc(k.why),
          esc(", ".join(k.ops)), esc(" ".join(_shape(o.dtype, o.shape) for o in k.inputs)),
          esc(" ".join(_shape(o.dtype, o.shape) for o in k.outputs)),
          num(f"{_mb(k.bytes_read)}/{_mb(k.bytes_written)}"), num(f"{k.flops / 1e6:.2f}")) for k in t.kernels]))
    parts.append("</body></html>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))


def chrome_events(t: Trace) -> list:
    """Complete ("X") events: kernels on thread 1, scheduling and compiling on
    thread 2, steps on thread 0; times in microseconds."""
    ev = []
    for s in t.schedules:
        ev.append({"name": "schedule lookup" if s.cached else "schedule", "cat": "host", "ph": "X", "pid": 1,
                   "tid": 2, "ts": s.start_us, "dur": s.schedule_us,
                   "args": {"cause": s.cause, "miss": s.miss, "kernels": len(s.kernels)}})
        if s.compile_us:
            ev.append({"name": "compile", "cat": "host", "ph": "X", "pid": 1, "tid": 2,
                       "ts": s.start_us + s.schedule_us, "dur": s.compile_us, "args": {}})
    for k in t.kernels:
        ev.append({"name": k.name, "cat": "kernel", "ph": "X", "pid": 1, "tid": 1, "ts": k.start_us,
                   "dur": k.duration_us,
                   "args": {"module": t.display_module(k.module), "why": k.why, "ops": ",".join(k.ops),
                            "bytes_read": k.bytes_read, "bytes_written": k.bytes_written, "flops": k.flops,
                            "step": k.step}})
    for step in sorted({k.step for k in t.kernels}):
        ks = [k for k in t.kernels if k.step == step]
        ss = [s for s in t.schedules if s.step == step]
        start = min([k.start_us for k in ks] + [s.start_us for s in ss])
        end = max([k.start_us + k.duration_us for k in ks] + [s.end_us for s in ss])
        ev.append({"name": f"step {step}", "cat": "step", "ph": "X", "pid": 1, "tid": 0, "ts": start,
                   "dur": end - start, "args": {"kernels": len(ks)}})
    return sorted(ev, key=lambda e: e["ts"])


def save_chrome_trace(t: Trace, path: str) -> None:
    with open(path, "w") as f:
        json.dump(chrome_events(t), f)
