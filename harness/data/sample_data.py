"""A small real-image segmentation set made from scikit-image's bundled sample images (offline).

Task: find the bright objects on a darker background in grayscale photographs and scans: coins
on a tray, stars and galaxies in a Hubble field, cells, the moon's lit surface, the retina's
fundus against the black surround, and printed text (page and text: stored inverted, white ink
on black, so that objects are always the bright side). Each mask is derived, not hand drawn:
Gaussian smoothing (sigma 1.5), Otsu's threshold per picture, holes filled, specks of 30 pixels
or fewer removed. The photographs are cut into overlapping
tiles, and the tiles are written in four of the formats a folder source reads (PNG, JPEG, BMP,
TIFF); masks are PNG, 0/255, so the scan's 0/255 mapping is exercised too.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from harness.errors import ConfigError

# sample image -> stored inverted (its objects are dark: ink on paper)
IMAGES = {
    "coins": False,
    "page": True,
    "text": True,
    "hubble_deep_field": False,
    "cell": False,
    "moon": False,
    "retina": False,
}
FORMATS = (".png", ".jpg", ".bmp", ".tif")


def derive_mask(gray: np.ndarray) -> np.ndarray:
    """Bright objects: smoothed, above Otsu's threshold, holes filled, specks removed."""
    from scipy import ndimage
    from skimage import filters

    smooth = filters.gaussian(gray, sigma=1.5)
    return without_specks(ndimage.binary_fill_holes(smooth > filters.threshold_otsu(smooth)))


def without_specks(objects: np.ndarray, largest: int = 30) -> np.ndarray:
    """`objects` without those of `largest` pixels or fewer, pixels joined by their edges: what
    skimage's `remove_small_objects(objects, max_size=30)` does, a keyword scikit-image 0.26 added
    (0.22-0.25, the versions Python 3.10 gets, take `min_size=31`); counted here, the same masks
    from any version."""
    from scipy import ndimage

    labels, _ = ndimage.label(objects)  # edge-joined components (4-connectivity), as skimage's default
    kept = np.bincount(labels.ravel()) > largest
    kept[0] = False  # label 0 is the background
    return kept[labels]


def check_out_folder(out: Path) -> None:
    """Exit 2 before anything is written: without scikit-image (an extra), or when `out` holds
    files a run of sample-data did not write (the set would be mixed into a user's own images, and
    their README.txt replaced; its own files may be written again)."""
    try:
        import skimage  # noqa: F401
    except ImportError as exc:
        raise ConfigError(f'sample-data needs scikit-image: pip install "harness[examples]" or scikit-image ({exc})') from None
    own = re.compile(rf"^({'|'.join(IMAGES)})_\d{{4}}_\d{{4}}\.(png|jpg|bmp|tif)$")
    found = [p for sub in ("images", "masks") if (Path(out) / sub).is_dir() for p in sorted((Path(out) / sub).iterdir())
             if not p.name.startswith(".") and not own.match(p.name)]
    readme = Path(out) / "README.txt"
    if readme.is_file() and not readme.read_text(encoding="utf-8", errors="replace").startswith(__doc__.strip().splitlines()[0]):
        found.append(readme)
    if found:
        named = ", ".join(str(p) for p in found[:3]) + (f" and {len(found) - 3} more" if len(found) > 3 else "")
        raise ConfigError(f"sample-data: {out} holds {len(found)} file(s) it did not write, which the set would be mixed with "
                          f"or replace ({named}): give an empty or new folder")


def make_sample_data(out: Path, tile: int = 96, stride: int = 48, max_tiles: int = 40) -> dict[str, int]:
    """Write out/images/<name>_<r>_<c>.<ext> and out/masks/<same stem>.png; return tiles per image."""
    from PIL import Image
    from skimage import color, data, util

    images_dir, masks_dir = Path(out) / "images", Path(out) / "masks"
    images_dir.mkdir(parents=True, exist_ok=True)
    masks_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for index, (name, inverted) in enumerate(IMAGES.items()):
        picture = getattr(data, name)()
        if picture.ndim == 3:
            picture = color.rgb2gray(picture[..., :3])
        gray = util.img_as_float(picture)
        gray = 1.0 - gray if inverted else gray
        mask = derive_mask(gray)
        pixels = util.img_as_ubyte(gray)
        places = [(t, l) for t in range(0, gray.shape[0] - tile + 1, stride) for l in range(0, gray.shape[1] - tile + 1, stride)]
        # big pictures would dominate the set: keep at most max_tiles, evenly spread
        places = [places[i] for i in np.linspace(0, len(places) - 1, min(max_tiles, len(places))).round().astype(int)]
        count = 0
        for top, left in places:
            stem = f"{name}_{top:04d}_{left:04d}"
            crop = pixels[top : top + tile, left : left + tile]
            extension = FORMATS[(index + count) % len(FORMATS)]
            Image.fromarray(crop).convert("RGB").save(images_dir / f"{stem}{extension}", **({"quality": 95} if extension == ".jpg" else {}))
            Image.fromarray((mask[top : top + tile, left : left + tile] * 255).astype(np.uint8)).save(masks_dir / f"{stem}.png")
            count += 1
        counts[name] = count
    (Path(out) / "README.txt").write_text(__doc__.strip() + "\n\nTiles per image: " + ", ".join(f"{k} {v}" for k, v in counts.items()) + "\n")
    return counts
