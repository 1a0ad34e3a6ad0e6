"""Pictures of a build directory: the fused graph as HTML with an inline SVG, and the memory timeline.

Both are drawn from <workdir>/graph.json (and report.json) alone, so a build from another process
or machine can be drawn later. The graph's layout is computed here (layers by longest path from
the inputs, then one barycentre sweep to untangle edges): no JavaScript, no CDN, the file opens
anywhere. Every op that launches is a box coloured by its kernel function (identical kernels share
a colour, so twelve encoder layers read as one pattern, and no two different kernels do); a fused
op is boxed together with the ops it absorbed; views launch nothing and are dashed. Hovering shows
the full details (<title>).
"""
from __future__ import annotations

import colorsys
import json
from pathlib import Path
from typing import Optional, Sequence
from xml.sax.saxutils import escape, quoteattr

W, H, GAP_X, GAP_Y = 190, 40, 24, 46   # kernel box, gaps between boxes and layers
PILL_H, PILL_COLS, MAX_PILLS = 16, 2, 16  # absorbed ops inside a fused group
IO_W, IO_H = 130, 26


def load(workdir) -> tuple[dict, dict]:
    work = Path(workdir)
    desc = json.loads((work / "graph.json").read_text())
    report = json.loads((work / "report.json").read_text()) if (work / "report.json").exists() else {}
    return desc, report


# -- the per-pass table ---------------------------------------------------------------------------

def pass_table(passes: Sequence[dict], start: Optional[dict] = None) -> str:
    """Kernels (ops that launch) and naive activation bytes before the pipeline and after each pass."""
    rows = [("(input)", "", start.get("ops"), start.get("kernels"), start.get("activation_bytes"))] if start else []
    rows += [(p["name"], f"{p.get('seconds', 0) * 1e3:.1f}", p.get("ops_after"), p.get("kernels"),
              p.get("activation_bytes")) for p in passes]
    w = max([len(r[0]) for r in rows] + [4])
    out = [f"{'pass':<{w}}  {'ms':>7}  {'ops':>5}  {'kernels':>7}  {'Δkern':>6}  {'act. bytes':>13}  {'Δbytes':>12}"]
    prev_k = prev_b = None
    for name, ms, ops, k, b in rows:
        dk = "" if prev_k is None or k is None else f"{k - prev_k:+d}"
        db = "" if prev_b is None or b is None else f"{b - prev_b:+,d}"
        out.append(f"{name:<{w}}  {ms:>7}  {_n(ops):>5}  {_n(k):>7}  {dk:>6}  {_n(b, True):>13}  {db:>12}")
        prev_k, prev_b = (k if k is not None else prev_k), (b if b is not None else prev_b)
    return "\n".join(out)


def _n(v, commas: bool = False) -> str:
    return "-" if v is None else (f"{v:,d}" if commas else str(v))


# -- the graph ------------------------------------------------------------------------------------

def kernel_colours(funcs: Sequence[str]) -> dict[str, str]:
    """A pastel colour of its own for each kernel function, in order of first appearance: hues step
    by the golden angle, so no two kernels of one picture share a colour however many there are."""
    out: dict[str, str] = {}
    for f in funcs:
        if f not in out:
            i = len(out)
            r, g, b = colorsys.hls_to_rgb((i * 0.6180339887) % 1.0, 0.78 + 0.06 * (i % 2), 0.75)
            out[f] = "#%02x%02x%02x" % (round(r * 255), round(g * 255), round(b * 255))
    return out


def _layout(desc: dict) -> tuple[dict, dict, dict, int, int]:
    """node id -> (x, y, w, h), node id -> its predecessors, node id -> (row, row top, row bottom),
    and the boxes' width and the picture's height; nodes are "op:i", "in:name" and "out:key".
    Layers: longest path from the inputs first."""
    ops = desc["ops"]
    producer = {t["name"]: i for i, op in enumerate(ops) for t in op["outputs"]}
    inputs = [t["name"] for t in desc["inputs"]]
    layer: dict[str, int] = {f"in:{n}": 0 for n in inputs}
    preds: dict[str, list[str]] = {}
    for i, op in enumerate(ops):
        p = []
        for name in op["inputs"]:
            if name in producer:
                p.append(f"op:{producer[name]}")
            elif name in inputs:
                p.append(f"in:{name}")
        preds[f"op:{i}"] = list(dict.fromkeys(p))
        layer[f"op:{i}"] = 1 + max([layer[q] for q in preds[f"op:{i}"]] + [0])
    # Then as late as their readers allow: a side branch (a shortcut conv, a K projection) sits
    # beside the op that reads it instead of a long edge away.
    succ_layers: dict[str, list[int]] = {}
    for i in reversed(range(len(ops))):
        n = f"op:{i}"
        if succ_layers.get(n) and not any(t["name"] in desc["outputs"].values() for t in ops[i]["outputs"]):
            layer[n] = max(layer[n], min(succ_layers[n]) - 1)
        for q in preds[n]:
            succ_layers.setdefault(q, []).append(layer[n])
    for key, name in desc["outputs"].items():
        src = f"op:{producer[name]}" if name in producer else f"in:{name}"
        preds[f"out:{key}"] = [src]
        layer[f"out:{key}"] = layer[src] + 1
    size = {n: (IO_W, IO_H) if not n.startswith("op:") else (W, _op_height(ops[int(n[3:])])) for n in layer}
    by_layer: dict[int, list[str]] = {}
    for n in layer:  # insertion order: inputs, ops in schedule order, outputs
        by_layer.setdefault(layer[n], []).append(n)
    pos: dict[str, tuple[float, float, float, float]] = {}
    rows: dict[str, tuple[int, float, float]] = {}  # node -> (row, its top, its bottom)
    y, width = 20.0, 0.0
    for row, lv in enumerate(sorted(by_layer)):
        nodes = by_layer[lv]
        if lv:  # barycentre of the predecessors' centres keeps edges short and mostly uncrossed
            def centre(n):
                cs = [pos[q][0] + pos[q][2] / 2 for q in preds.get(n, []) if q in pos]
                return sum(cs) / len(cs) if cs else 0.0
            nodes = sorted(nodes, key=centre)
        x, row_h = 20.0, 0.0
        for n in nodes:
            w, h = size[n]
            pos[n] = (x, y, w, h)
            x += w + GAP_X
            row_h = max(row_h, h)
        width = max(width, x)
        for n in nodes:
            rows[n] = (row, y, y + row_h)
        y += row_h + GAP_Y
    return pos, preds, rows, int(width), int(y) + 20


def _op_height(op: dict) -> int:
    if not op.get("fused"):
        return H
    pills = min(len(op["fused"]), MAX_PILLS + 1)
    return H + 22 + -(-pills // PILL_COLS) * (PILL_H + 4)


def _shape(t: dict) -> str:
    return f"{t['dtype']}[{', '.join(t['shape'])}]"


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[:n - 1] + "…"


def graph_svg(desc: dict) -> tuple[str, dict]:
    """The SVG and counts: kernel boxes, fused groups, views, edges."""
    ops = desc["ops"]
    pos, preds, rows, width, height = _layout(desc)
    shapes = {t["name"]: _shape(t) for t in desc["inputs"] + desc["constants"]}
    shapes.update({t["name"]: _shape(t) for op in ops for t in op["outputs"]})
    out: list[str] = []
    edges = 0
    lanes: dict[str, float] = {}  # a source of edges that skip rows -> its lane right of the boxes
    # Edges first, so boxes paint over their ends.
    for n, ps in preds.items():
        x, y, w, _ = pos[n]
        for p in ps:
            px, py, pw, ph = pos[p]
            x0, y0, x1, y1 = px + pw / 2, py + ph, x + w / 2, y
            if rows[n][0] - rows[p][0] > 1:
                # A long edge (a mask read by every layer, a skip connection) would cut through the
                # boxes between: it leaves in the gap below its source, runs down its own lane and
                # comes in through the gap above its reader.
                lane = lanes.setdefault(p, width + 10 + 12 * len(lanes))
                ya, yb = rows[p][2] + GAP_Y / 3, rows[n][1] - GAP_Y / 3
                d = (f"M{x0:.1f},{y0:.1f} L{x0:.1f},{ya:.1f} L{lane:.1f},{ya:.1f} L{lane:.1f},{yb:.1f} "
                     f"L{x1:.1f},{yb:.1f} L{x1:.1f},{y1 - 3:.1f}")
            else:
                mid = (y0 + y1) / 2
                d = f"M{x0:.1f},{y0:.1f} C{x0:.1f},{mid:.1f} {x1:.1f},{mid:.1f} {x1:.1f},{y1 - 3:.1f}"
            out.append(f'<path class="edge" d="{d}" marker-end="url(#arrow)"/>')
            edges += 1
    width = int(width + 20 + 12 * len(lanes))
    counts = {"kernel_boxes": 0, "fused_groups": 0, "views": 0, "edges": edges}
    colour = kernel_colours([k["func"] for op in ops for k in op["kernels"]])
    for t in desc["inputs"]:
        out.append(_io_box(pos[f"in:{t['name']}"], f"input {t['name']}", _shape(t), "input"))
    for key, name in desc["outputs"].items():
        out.append(_io_box(pos[f"out:{key}"], f"output {key}", shapes.get(name, ""), "output"))
    for i, op in enumerate(ops):
        x, y, w, h = pos[f"op:{i}"]
        tip = _op_title(op, shapes)
        label = _cut(op["kind"] + (f" ×{len(op['kernels'])}" if len(op["kernels"]) > 1 else ""), 26)
        shape_txt = _cut(", ".join(f"[{', '.join(t['shape'])}]" for t in op["outputs"]), 30)
        if not op["kernels"]:
            counts["views"] += 1
            out.append(f'<g class="view"><title>{escape(tip)}</title>'
                       f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6"/>'
                       f'{_text(x + w / 2, y + 16, label, "kind")}{_text(x + w / 2, y + 31, shape_txt, "shape")}</g>')
            continue
        fill = colour[op["kernels"][0]["func"]]
        parts = [f'<g class="kernel" data-op={quoteattr(op["name"] or "")}><title>{escape(tip)}</title>']
        if op.get("fused"):
            counts["fused_groups"] += 1
            parts.insert(0, f'<g class="fused-group"><rect class="group" x="{x - 4}" y="{y - 4}" '
                            f'width="{w + 8}" height="{h + 8}" rx="9"/>')
        parts.append(f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{fill}"/>')
        parts.append(_text(x + w / 2, y + 16, label, "kind"))
        parts.append(_text(x + w / 2, y + 31, shape_txt, "shape"))
        if op.get("fused"):
            n = len(op["fused"])
            parts.append(_text(x + w / 2, y + H + 12, f"absorbed {n} op{'s' if n != 1 else ''}:", "shape"))
            kinds = op["fused"][:MAX_PILLS] + ([f"+{len(op['fused']) - MAX_PILLS} more"]
                                                if len(op["fused"]) > MAX_PILLS else [])
            pw = (w - 12 - 6 * (PILL_COLS - 1)) / PILL_COLS
            for j, k in enumerate(kinds):
                px = x + 6 + (j % PILL_COLS) * (pw + 6)
                py = y + H + 20 + (j // PILL_COLS) * (PILL_H + 4)
                parts.append(f'<rect class="absorbed" x="{px:.1f}" y="{py}" width="{pw:.1f}" height="{PILL_H}" rx="4"/>'
                             + _text(px + pw / 2, py + 12, _cut(k, 14), "pill"))
        parts.append("</g>")
        if op.get("fused"):
            parts.append("</g>")
        out.append("".join(parts))
        counts["kernel_boxes"] += 1
    svg = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}">'
           '<defs><marker id="arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" markerHeight="7" '
           'orient="auto"><path d="M0,0 L8,4 L0,8 z" fill="#777"/></marker></defs>'
           f'<style>{_CSS}</style>'
           + "\n".join(out) + "</svg>")
    return svg, counts


def _io_box(p, title: str, shape: str, cls: str) -> str:
    x, y, w, h = p
    return (f'<g class="{cls}"><title>{escape(title + " " + shape)}</title>'
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="13"/>'
            f'{_text(x + w / 2, y + 17, _cut(title, 20), "io")}</g>')


def _text(x: float, y: float, s: str, cls: str) -> str:
    return f'<text class="{cls}" x="{x:.1f}" y="{y:.1f}">{escape(s)}</text>'


def _op_title(op: dict, shapes: dict) -> str:
    lines = [f"{op['kind']} '{op['name']}' (step {op['step']})"]
    lines += [f"  in  {n}: {shapes.get(n, '?')}" for n in op["inputs"]]
    lines += [f"  out {t['name']}: {_shape(t)}" + (f" ({t['bytes']:,d} bytes)" if "bytes" in t else "")
              for t in op["outputs"]]
    if op.get("fused"):
        lines.append("  absorbed: " + ", ".join(op["fused"]))
    for k in op["kernels"]:
        lines.append(f"  kernel {k['func']} ({k['template']}) {k['label']}")
    if not op["kernels"]:
        lines.append("  launches nothing: " + ("a view of its input's bytes" if op.get("view") else
                                              "folded into its neighbours' reads or writes"))
    if op.get("attrs"):
        lines.append("  attrs " + op["attrs"])
    return "\n".join(lines)


# Inside the <svg>, so the picture keeps its look when cut out of the page.
_CSS = """.edge{fill:none;stroke:#999;stroke-width:1.2}
.kernel rect{stroke:#333;stroke-width:1}
.group{fill:#f4f4f4;stroke:#222;stroke-width:2;stroke-dasharray:6 3}
.absorbed{fill:#fff;stroke:#666;stroke-width:.8}
.view rect{fill:#fff;stroke:#888;stroke-dasharray:4 3}
.input rect{fill:#e8f1ff;stroke:#36c}.output rect{fill:#eaffea;stroke:#393}
text{text-anchor:middle;font-family:sans-serif;font-size:11px;pointer-events:none}
.kind{font-weight:bold;font-size:12px}.shape{fill:#333}.pill{font-size:10px}.io{font-size:11px}"""


def write_graph_html(desc: dict, path, report: Optional[dict] = None) -> dict:
    svg, counts = graph_svg(desc)
    report = report or {}
    calls = sum(len(op["kernels"]) for op in desc["ops"]) + len(desc.get("extra_calls", []))
    funcs = {k["func"] for op in desc["ops"] for k in op["kernels"]}
    head = (f"{escape(desc['name'])}: {len(desc['ops'])} ops, {calls} kernel calls "
            f"({len(funcs)} distinct kernels, one colour each), {counts['fused_groups']} fused groups, "
            f"{counts['views']} views")
    if report.get("activation_bytes") is not None:
        head += (f"; activations {report['activation_bytes']:,d} bytes (lower bound "
                 f"{report.get('activation_lower_bound_bytes', 0):,d}, "
                 f"naive {report.get('activation_naive_bytes', 0):,d})")
    html = ('<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml"><head><meta charset="utf-8"/>'
            f'<title>{escape(desc["name"])} — aitgen graph</title>'
            '<style>body{font-family:sans-serif;margin:12px}</style></head><body>'
            f'<h3>{head}</h3><p>Hover a box for its tensors, kernels and attributes. Dashed: a view '
            '(launches nothing); grey frame: a fused group with the ops it absorbed.</p>\n'
            f'{svg}\n</body></html>\n')
    Path(path).write_text(html, encoding="utf-8")
    return counts


# -- the memory timeline --------------------------------------------------------------------------

def write_memory_png(desc: dict, path) -> dict:
    """x: schedule step, y: arena offset; one rectangle per arena tensor over its lifetime."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    mem = desc.get("memory") or {"tensors": [], "arena_bytes": 0, "lower_bound_bytes": 0, "naive_bytes": 0}
    arena = max(mem["arena_bytes"], 1)
    unit, uname = next(((u, n) for u, n in ((1 << 20, "MiB"), (1 << 10, "KiB")) if arena >= 4 * u), (1, "bytes"))
    steps = max(desc.get("num_steps", 1), 1)
    fig, ax = plt.subplots(figsize=(12, 6), dpi=100)
    cmap = plt.get_cmap("tab20")
    for i, t in enumerate(mem["tensors"]):
        view = "view_of" in t
        ax.add_patch(Rectangle((t["first"], t["offset"] / unit), t["last"] - t["first"] + 1, t["size"] / unit,
                               facecolor="none" if view else cmap(i % 20), edgecolor="black" if not view else "grey",
                               linewidth=0.4, linestyle="--" if view else "-", alpha=0.85))
    ax.axhline(mem["arena_bytes"] / unit, color="red", linewidth=1, label=f"arena {mem['arena_bytes']:,d} B")
    ax.axhline(mem["lower_bound_bytes"] / unit, color="blue", linewidth=0.8, linestyle=":",
               label=f"lower bound {mem['lower_bound_bytes']:,d} B")
    ax.set_xlim(0, steps)
    ax.set_ylim(0, arena / unit * 1.05)
    ax.set_xlabel("schedule step (op index)")
    ax.set_ylabel(f"arena offset ({uname})")
    ax.set_title(f"{desc['name']}: {len(mem['tensors'])} arena tensors; naive {mem['naive_bytes']:,d} B, "
                 f"strategy {mem.get('strategy', '?')}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return {"tensors": len(mem["tensors"]), "arena_bytes": mem["arena_bytes"]}
