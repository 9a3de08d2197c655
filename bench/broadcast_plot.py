"""Plot broadcast time / pair time against N from bench/results/broadcast.csv.

    /usr/bin/python3 bench/broadcast_plot.py CSV SVG LABEL [LABEL ...]

One line per label (the newest row of each N for that label), N on a log2 axis,
the ratio on a linear one, with the 1.3x target and the 1.0x bound drawn. Plain
SVG written by hand: the plot needs no plotting package.
"""

import csv
import math
import sys

W, H, L, R, T, B = 640, 400, 60, 200, 20, 50
COLOURS = ["#c0392b", "#2471a3", "#229954", "#7d3c98", "#b9770e", "#566573"]


def series(path, labels):
    """{label: {n: ratio}}, the newest row winning."""
    out = {lab: {} for lab in labels}
    with open(path) as f:
        for row in csv.DictReader(f):
            if row["label"] in out:
                out[row["label"]][int(row["nodes"])] = float(row["ratio"])
    return {lab: pts for lab, pts in out.items() if pts}


def plot(data, svg):
    ns = sorted({n for pts in data.values() for n in pts})
    ymax = max(2.0, max(r for pts in data.values() for r in pts.values()) * 1.1)
    lo, hi = math.log2(ns[0]), math.log2(ns[-1])

    def x(n):
        return L + (math.log2(n) - lo) / max(hi - lo, 1) * (W - L - R)

    def y(r):
        return H - B - r / ymax * (H - T - B)

    el = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
          'font-family="sans-serif" font-size="12">',
          f'<rect width="{W}" height="{H}" fill="white"/>',
          f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
          f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
          f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">nodes (N)</text>',
          f'<text x="14" y="{(T + H - B) / 2}" transform="rotate(-90 14 {(T + H - B) / 2})" '
          'text-anchor="middle">broadcast time / one pair</text>']
    for n in ns:
        el.append(f'<text x="{x(n)}" y="{H - B + 16}" text-anchor="middle">{n}</text>')
    step = 1 if ymax <= 8 else 2 if ymax <= 16 else 4
    for r in range(0, int(ymax) + 1, step):
        el.append(f'<text x="{L - 6}" y="{y(r) + 4}" text-anchor="end">{r}x</text>')
        el.append(f'<line x1="{L}" y1="{y(r)}" x2="{W - R}" y2="{y(r)}" stroke="#eee"/>')
    for r, what in ((1.0, "bound 1.0x"), (1.3, "target 1.3x")):
        el.append(f'<line x1="{L}" y1="{y(r)}" x2="{W - R}" y2="{y(r)}" stroke="#888" '
                  'stroke-dasharray="4 3"/>')
        el.append(f'<text x="{W - R + 4}" y="{y(r) + 4}" fill="#888">{what}</text>')
    for i, (lab, pts) in enumerate(data.items()):
        col = COLOURS[i % len(COLOURS)]
        xs = sorted(pts)
        path = " ".join(f"{x(n):.1f},{y(pts[n]):.1f}" for n in xs)
        el.append(f'<polyline points="{path}" fill="none" stroke="{col}" stroke-width="2"/>')
        for n in xs:
            el.append(f'<circle cx="{x(n):.1f}" cy="{y(pts[n]):.1f}" r="3" fill="{col}"/>')
        el.append(f'<text x="{W - R + 4}" y="{T + 40 + 16 * i}" fill="{col}">{lab[:30]}</text>')
    el.append("</svg>")
    with open(svg, "w") as f:
        f.write("\n".join(el) + "\n")


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    data = series(sys.argv[1], sys.argv[3:])
    if not data:
        sys.exit("no rows for those labels")
    plot(data, sys.argv[2])


if __name__ == "__main__":
    main()
