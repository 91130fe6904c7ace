"""A minimal RGB canvas written as PNG with zlib (no plotting library is installed here).

Shared by the experiment scripts that draw line plots.
"""
from __future__ import annotations

import struct
import zlib

_DIGITS = {  # 3x5 glyphs, rows top to bottom
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010",
}


class Canvas:
    """w × h white pixels; dots, (dashed) lines, digit labels; `png()` gives the file's bytes."""

    def __init__(self, w: int, h: int):
        self.w, self.h = w, h
        self.px = bytearray(b"\xff" * (w * h * 3))

    def dot(self, x: int, y: int, rgb: tuple[int, int, int], r: int = 0) -> None:
        for dx in range(-r, r + 1):
            for dy in range(-r, r + 1):
                if 0 <= x + dx < self.w and 0 <= y + dy < self.h:
                    i = ((y + dy) * self.w + x + dx) * 3
                    self.px[i:i + 3] = bytes(rgb)

    def line(self, x0, y0, x1, y1, rgb, dashed: bool = False, r: int = 0) -> None:
        n = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(n + 1):
            if not dashed or (i // 6) % 2 == 0:
                self.dot(round(x0 + (x1 - x0) * i / n), round(y0 + (y1 - y0) * i / n), rgb, r)

    def text(self, x: int, y: int, s: str, scale: int = 2) -> None:
        for j, ch in enumerate(s):
            glyph = _DIGITS.get(ch)
            if glyph is None:
                continue
            for k, bit in enumerate(glyph):
                if bit == "1":
                    for a in range(scale):
                        for b in range(scale):
                            self.dot(x + j * 4 * scale + (k % 3) * scale + a, y + (k // 3) * scale + b, (0, 0, 0))

    def png(self) -> bytes:
        raw = b"".join(b"\x00" + bytes(self.px[y * self.w * 3:(y + 1) * self.w * 3]) for y in range(self.h))
        chunk = lambda tag, data: struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
