"""RSS over time of every operator process of a soak, as a PNG, with the standard library.

    python benches/soak/plot.py RESULT.json docs/img/soak-rss.png

No plotting stack is needed (the soak runs where matplotlib is not installed): the image is
a small raster written with ``zlib``. Time runs left to right over the whole run, RSS
(0 to the highest sample, rounded up to 50 MB) bottom to top; light grid lines every 5
minutes and every 50 MB; one colour per slot (blue: replica 0, orange: replica 1, a darker
shade for each restart); red vertical lines mark the faults, and a short black tick at the
top marks each takeover (a process starting to lead: its RSS is judged per role, from
there). The figures are in docs/benchmarks.md.
"""

from __future__ import annotations

import itertools
import json
import struct
import sys
import zlib
from pathlib import Path
from typing import Any

W, H, PAD = 900, 360, 20
PALETTES = {0: [(31, 119, 180), (20, 80, 130), (10, 50, 90)], 1: [(255, 127, 14), (190, 90, 0)]}
MB = 2**20


def png(pixels: list[bytearray]) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + bytes(row) for row in pixels)
    header = struct.pack(">IIBBBBB", W, H, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 9))
        + chunk(b"IEND", b"")
    )


def draw(res: dict[str, Any]) -> bytes:
    pixels = [bytearray(b"\xff" * (W * 3)) for _ in range(H)]

    def dot(x: int, y: int, rgb: tuple[int, int, int]) -> None:
        if 0 <= x < W and 0 <= y < H:
            pixels[y][3 * x : 3 * x + 3] = bytes(rgb)

    series = [(p["name"], p["rss"]) for p in res["processes"] if p["rss"]]
    t0 = min(s[0][0] for _, s in series)
    t1 = max(s[-1][0] for _, s in series)
    top = max(rss for _, s in series for _, rss in s)
    top_mb = 50 * (int(top / MB) // 50 + 1)

    def x_of(t: float) -> int:
        return PAD + int((t - t0) / (t1 - t0) * (W - 2 * PAD))

    def y_of(rss: float) -> int:
        return H - PAD - int(rss / (top_mb * MB) * (H - 2 * PAD))

    for mb in range(0, top_mb + 1, 50):
        for x in range(PAD, W - PAD):
            dot(x, y_of(mb * MB), (220, 220, 220))
    for minute in range(0, int((t1 - t0) / 60) + 1, 5):
        for y in range(PAD, H - PAD):
            dot(x_of(t0 + 60 * minute), y, (220, 220, 220))
    for fault in res["faults"]:
        for y in range(PAD, H - PAD, 2):
            dot(x_of(fault["mono"]), y, (214, 39, 40))
    for verdict in res["rss"].values():
        leading = verdict.get("leading_since")
        if leading is not None and t0 <= leading <= t1:
            for y in range(PAD, PAD + 24):
                dot(x_of(leading), y, (0, 0, 0))
    for name, samples in series:
        slot, serial = (int(part) for part in name.removeprefix("op").split("."))
        palette = PALETTES.get(slot, [(80, 80, 80)])
        rgb = palette[min(serial, len(palette) - 1)]
        points = [(x_of(t), y_of(rss)) for t, rss in samples]
        for (xa, ya), (xb, yb) in itertools.pairwise(points):
            steps = max(abs(xb - xa), abs(yb - ya), 1)
            for i in range(steps + 1):
                x, y = xa + (xb - xa) * i // steps, ya + (yb - ya) * i // steps
                for dy in (0, 1):
                    dot(x, y + dy, rgb)
    return png(pixels)


def main() -> None:
    res = json.loads(Path(sys.argv[1]).read_text())
    Path(sys.argv[2]).write_bytes(draw(res))


if __name__ == "__main__":
    main()
