#!/usr/bin/env python3
"""Draws a trace that `mlt-run --trace` wrote as an SVG picture, headlessly
(the standard library only): a row per (process, stream) track, as Perfetto
lays them out (every measured rank, then every "predicted rank R"), each
launch a box coloured by its kernel, a time axis in milliseconds and a key
of the kernels that take the most time.

  trace_render.py TRACE OUT.svg [--width PIXELS] [--title TEXT]

Convert to PNG with any SVG renderer (ImageMagick: `convert OUT.svg OUT.png`).
"""
import argparse
import collections
import html
import json

PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948",
           "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac", "#1f77b4", "#8c564b"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace")
    parser.add_argument("out")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    events = json.load(open(args.trace))["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events
                 if e["ph"] == "M" and e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    launches = [e for e in events if e["ph"] == "X"]
    tracks = sorted({(e["pid"], e["tid"]) for e in launches})
    end = max(e["ts"] + e["dur"] for e in launches)
    time_by_kernel = collections.Counter()
    for e in launches:
        time_by_kernel[e["name"]] += e["dur"]
    colours = {k: PALETTE[i % len(PALETTE)]
               for i, (k, _) in enumerate(time_by_kernel.most_common())}

    label_w, row_h, top = 260, 22, 40
    plot_w = args.width - label_w - 20
    key_rows = (min(len(colours), 12) + 3) // 4
    height = top + row_h * len(tracks) + 40 + 18 * key_rows + 10
    x = lambda us: label_w + plot_w * us / end
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{args.width}" '
           f'height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="100%" height="100%" fill="white"/>']
    if args.title:
        out.append(f'<text x="10" y="20" font-size="15">'
                   f'{html.escape(args.title)}</text>')
    for row, (pid, tid) in enumerate(tracks):
        y = top + row * row_h
        name = f"{processes.get(pid, pid)}: {threads.get((pid, tid), tid)}"
        out.append(f'<rect x="{label_w}" y="{y}" width="{plot_w}" '
                   f'height="{row_h - 4}" fill="#f4f4f4"/>')
        out.append(f'<text x="6" y="{y + row_h - 9}">{html.escape(name)}</text>')
    row_of = {track: row for row, track in enumerate(tracks)}
    for e in launches:
        y = top + row_of[(e["pid"], e["tid"])] * row_h
        w = max(plot_w * e["dur"] / end, 0.3)
        out.append(f'<rect x="{x(e["ts"]):.2f}" y="{y}" width="{w:.2f}" '
                   f'height="{row_h - 4}" fill="{colours[e["name"]]}">'
                   f'<title>{html.escape(e["name"])} {e["dur"] / 1e3:.3f} ms</title></rect>')
    axis_y = top + row_h * len(tracks) + 5
    out.append(f'<line x1="{label_w}" y1="{axis_y}" x2="{label_w + plot_w}" '
               f'y2="{axis_y}" stroke="black"/>')
    step_ms = end / 1e3
    tick = next(t for t in (0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500,
                            1000, 2000, 5000) if step_ms / t <= 12)
    t = 0.0
    while t <= step_ms + 1e-9:
        tx = x(t * 1e3)
        out.append(f'<line x1="{tx:.1f}" y1="{axis_y}" x2="{tx:.1f}" '
                   f'y2="{axis_y + 5}" stroke="black"/>')
        out.append(f'<text x="{tx:.1f}" y="{axis_y + 18}" '
                   f'text-anchor="middle">{t:g} ms</text>')
        t += tick
    key_y = axis_y + 36
    for i, (kernel, _) in enumerate(time_by_kernel.most_common(12)):
        kx = label_w + (i % 4) * (plot_w / 4)
        ky = key_y + (i // 4) * 18
        out.append(f'<rect x="{kx:.1f}" y="{ky - 10}" width="12" height="12" '
                   f'fill="{colours[kernel]}"/>')
        out.append(f'<text x="{kx + 16:.1f}" y="{ky}">{html.escape(kernel)}</text>')
    out.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"wrote {args.out}: {len(tracks)} tracks, {len(launches)} launches, "
          f"{step_ms:.2f} ms")


if __name__ == "__main__":
    main()
