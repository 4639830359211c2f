"""Derive every icon Hearth ships from one source image, icons/source.png.

App icons (PNG sizes Tauri's bundler and window use) are scaled from the source. Tray icons
show the source with a status dot: idle (green), generating (blue), throttled or hot
(amber), error (red). Run `.venv/bin/python scripts/icons.py` after changing the source;
`--draw-source` redraws the source itself (the hearth mark, drawn in code so it has no
outside origin). The outputs are committed, so builds need no Python.
"""
import sys
from pathlib import Path

from PIL import Image, ImageDraw

ROOT = Path(__file__).resolve().parent.parent
ICONS = ROOT / "icons"
SOURCE = ICONS / "source.png"

APP_SIZES = {"32x32.png": 32, "64x64.png": 64, "128x128.png": 128, "128x128@2x.png": 256, "icon.png": 512}
TRAY_SIZE = 64
TRAY_STATES = {
    "tray-idle.png": (46, 160, 67),
    "tray-generating.png": (33, 120, 220),
    "tray-hot.png": (240, 160, 0),
    "tray-error.png": (210, 40, 40),
}


def draw_source(size: int = 1024) -> Image.Image:
    """A rounded ember-orange tile with a white flame: the hearth."""
    img = Image.new("RGBA", (size, size), (0, 0, 0, 0))
    d = ImageDraw.Draw(img)
    pad = size // 16
    d.rounded_rectangle([pad, pad, size - pad, size - pad], radius=size // 5, fill=(214, 88, 28, 255))
    s = size / 1024
    flame = [(512, 190), (640, 360), (700, 520), (680, 660), (600, 770), (512, 810), (424, 770),
             (344, 660), (324, 520), (384, 400), (440, 470), (460, 330)]
    d.polygon([(x * s, y * s) for x, y in flame], fill=(255, 244, 230, 255))
    inner = [(512, 520), (580, 620), (590, 700), (548, 760), (512, 772), (476, 760), (434, 700),
             (444, 620)]
    d.polygon([(x * s, y * s) for x, y in inner], fill=(246, 168, 60, 255))
    d.rectangle([300 * s, 840 * s, 724 * s, 880 * s], fill=(255, 244, 230, 255))
    return img


def main() -> None:
    if "--draw-source" in sys.argv or not SOURCE.exists():
        draw_source().save(SOURCE)
    src = Image.open(SOURCE).convert("RGBA")
    for name, size in APP_SIZES.items():
        src.resize((size, size), Image.LANCZOS).save(ICONS / name)
    for name, color in TRAY_STATES.items():
        tray = src.resize((TRAY_SIZE, TRAY_SIZE), Image.LANCZOS)
        d = ImageDraw.Draw(tray)
        r = TRAY_SIZE // 5
        x0, y0 = TRAY_SIZE - 2 * r - 1, TRAY_SIZE - 2 * r - 1
        d.ellipse([x0 - 2, y0 - 2, x0 + 2 * r + 2, y0 + 2 * r + 2], fill=(255, 255, 255, 255))
        d.ellipse([x0, y0, x0 + 2 * r, y0 + 2 * r], fill=color + (255,))
        tray.save(ICONS / name)
    print("icons written to", ICONS)


if __name__ == "__main__":
    main()
