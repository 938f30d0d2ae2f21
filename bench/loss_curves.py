#!/usr/bin/env python3
"""Two training runs' loss curves side by side, as an SVG, and how far apart.

  loss_curves.py BASE.jsonl OTHER.jsonl OUT.svg [--labels bf16,fp8] [--window 50]

Reads two `mlt-run --log-json` logs (one JSON object per step: step, loss),
draws both losses (a 10-step moving average over the faint raw values, log
scale) and, below, OTHER's loss against BASE's over windows of `window`
steps (the windows' mean losses, in percent), and prints the windows'
relative differences: the largest, and the largest after the warmup's first
three windows. Standard library only.
"""
import argparse
import json
import math


def load(path):
    steps = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                steps[int(record["step"])] = float(record["loss"])
    return steps


def moving(values, n):
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - n + 1):i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("other")
    ap.add_argument("out")
    ap.add_argument("--labels", default="bf16,fp8")
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    base, other = load(args.base), load(args.other)
    steps = sorted(set(base) & set(other))
    if not steps:
        raise SystemExit("loss_curves: the logs share no step")
    labels = args.labels.split(",")
    b = [base[s] for s in steps]
    o = [other[s] for s in steps]

    windows = []
    for start in range(0, len(steps), args.window):
        bw = b[start:start + args.window]
        ow = o[start:start + args.window]
        mb, mo = sum(bw) / len(bw), sum(ow) / len(ow)
        windows.append((steps[start], steps[start + len(bw) - 1], mb, mo,
                        (mo - mb) / mb))
    for first, last, mb, mo, rel in windows:
        print(f"steps {first:5d}-{last:5d}: {labels[0]} {mb:.4f} "
              f"{labels[1]} {mo:.4f} ({rel * 100:+.2f}%)")
    worst = max(windows, key=lambda w: abs(w[4]))
    later = max(windows[3:], key=lambda w: abs(w[4])) if len(windows) > 3 else worst
    print(f"largest window difference {worst[4] * 100:+.2f}% (steps "
          f"{worst[0]}-{worst[1]}); after step {windows[2][1]}: "
          f"{later[4] * 100:+.2f}% (steps {later[0]}-{later[1]})")

    # The SVG: two panels.
    width, height, left, right = 900, 620, 70, 20
    top1, h1, top2, h2 = 40, 360, 450, 130
    x0, x1 = steps[0], steps[-1]
    lo = math.log10(min(min(b), min(o)) * 0.9)
    hi = math.log10(max(max(b), max(o)) * 1.1)

    def sx(step):
        return left + (step - x0) / max(1, x1 - x0) * (width - left - right)

    def sy(loss):
        return top1 + (hi - math.log10(loss)) / (hi - lo) * h1

    rel_max = max(0.01, max(abs(w[4]) for w in windows) * 1.2)

    def sr(rel):
        return top2 + h2 / 2 - rel / rel_max * (h2 / 2)

    def path(xs, ys):
        return " ".join(f"{'M' if i == 0 else 'L'}{x:.1f},{y:.1f}"
                        for i, (x, y) in enumerate(zip(xs, ys)))

    colors = ["#1f77b4", "#d62728"]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
             f'height="{height}" font-family="sans-serif" font-size="12">',
             f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<text x="{left}" y="22" font-size="14">{args.title}</text>']
    # Axes and grid: decades and their 2x, 5x of the loss; steps.
    for e in range(math.floor(lo), math.ceil(hi) + 1):
        for m in (1, 2, 5):
            value = m * 10 ** e
            if lo <= math.log10(value) <= hi:
                y = sy(value)
                parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" '
                             f'y2="{y:.1f}" stroke="#ddd"/>')
                parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" '
                             f'text-anchor="end">{value:g}</text>')
    tick = 10 ** math.floor(math.log10(max(1, x1 - x0)))
    for s in range(0, x1 + 1, tick):
        if s >= x0:
            x = sx(s)
            for top, h in ((top1, h1), (top2, h2)):
                parts.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" '
                             f'y2="{top + h}" stroke="#eee"/>')
            parts.append(f'<text x="{x:.1f}" y="{top2 + h2 + 16}" '
                         f'text-anchor="middle">{s}</text>')
    parts.append(f'<text x="{(left + width - right) / 2}" y="{height - 8}" '
                 f'text-anchor="middle">step</text>')
    parts.append(f'<text x="16" y="{top1 + h1 / 2}" transform="rotate(-90 16 '
                 f'{top1 + h1 / 2})" text-anchor="middle">loss (log scale)</text>')
    xs = [sx(s) for s in steps]
    for i, values in enumerate((b, o)):
        parts.append(f'<path d="{path(xs, [sy(v) for v in values])}" '
                     f'fill="none" stroke="{colors[i]}" stroke-opacity="0.15"/>')
        parts.append(f'<path d="{path(xs, [sy(v) for v in moving(values, 10)])}" '
                     f'fill="none" stroke="{colors[i]}" stroke-width="1.5"/>')
        parts.append(f'<rect x="{width - right - 150}" y="{top1 + 10 + 18 * i}" '
                     f'width="14" height="3" fill="{colors[i]}"/>')
        parts.append(f'<text x="{width - right - 130}" y="{top1 + 15 + 18 * i}">'
                     f'{labels[i]}</text>')
    # The relative difference per window.
    for value in (-rel_max, 0, rel_max):
        y = sr(value)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" '
                     f'y2="{y:.1f}" stroke="{"#999" if value == 0 else "#ddd"}"/>')
        parts.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
                     f'{value * 100:+.1f}%</text>')
    for first, last, _, _, rel in windows:
        xa, xb = sx(first), sx(last)
        y = sr(rel)
        parts.append(f'<rect x="{xa:.1f}" y="{min(y, sr(0)):.1f}" '
                     f'width="{max(1.0, xb - xa):.1f}" height="{abs(y - sr(0)):.1f}" '
                     f'fill="{colors[1]}" fill-opacity="0.5"/>')
    parts.append(f'<text x="{left}" y="{top2 - 8}">{labels[1]} against '
                 f'{labels[0]}: mean loss over {args.window} steps</text>')
    parts.append("</svg>")
    with open(args.out, "w") as f:
        f.write("\n".join(parts) + "\n")
    print(f"loss_curves: wrote {args.out}")


if __name__ == "__main__":
    main()
