"""Write the example card's PNG from its JSON, as SillyTavern stores a card: a small
image with the card's JSON, base64-encoded, in a ``chara`` tEXt chunk.

    python scripts/make_example_card.py    # examples/cards/*.json -> *.png

Needs Pillow (the ``dev`` extra); ctxledger itself reads the chunk without it. The image
is a drawn pattern (a clock face), the same bytes on every run.
"""

from __future__ import annotations

import base64
import json
import math
import sys
from pathlib import Path

from PIL import Image
from PIL.PngImagePlugin import PngInfo

ROOT = Path(__file__).resolve().parent.parent
CARDS = ROOT / "examples" / "cards"
SIZE = 64


def face() -> Image.Image:
    """A 64x64 clock face: a brass ring, a dark dial, twelve marks and two hands."""
    image = Image.new("RGB", (SIZE, SIZE), (34, 52, 70))
    centre = (SIZE - 1) / 2
    for y in range(SIZE):
        for x in range(SIZE):
            dx, dy = x - centre, y - centre
            radius = math.hypot(dx, dy)
            angle = math.degrees(math.atan2(dx, -dy)) % 360
            if 26 <= radius <= 30:
                image.putpixel((x, y), (184, 134, 61))
            elif radius < 26:
                mark = 20 <= radius <= 24 and min(angle % 30, 30 - angle % 30) < 4
                minute = radius < 22 and abs(angle - 60) < 5   # ten past two
                hour = radius < 14 and abs(angle - 65) < 8
                image.putpixel((x, y), (230, 214, 170) if mark or minute or hour
                               else (58, 40, 32))
    return image


def write_png(card_json: Path) -> Path:
    """``card_json`` as ``<same name>.png``: the image, and the card in a ``chara`` chunk."""
    card = json.loads(card_json.read_text(encoding="utf-8"))
    info = PngInfo()
    compact = json.dumps(card, ensure_ascii=False, separators=(",", ":"))
    info.add_text("chara", base64.b64encode(compact.encode("utf-8")).decode("ascii"))
    out = card_json.with_suffix(".png")
    face().save(out, pnginfo=info, optimize=False, compress_level=9)
    return out


def main() -> int:
    """Write a PNG beside every card JSON of examples/cards."""
    for path in sorted(CARDS.glob("*.json")):
        print(f"wrote {write_png(path).relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
