#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Python reference for tests/datasets/native_image_test.cc.

    python3 native_image_reference.py CASES

CASES is a text file, one case a line:

  resize H W FACTOR MIN_PIXELS MAX_PIXELS OUT_FILE
      appends a line to OUT_FILE: "h_bar w_bar", or "error <message>", from
      smart_resize as transformers publishes it
      (models/qwen2_vl/image_processing_qwen2_vl.py).

  patches PATCH MERGE TEMPORAL MIN_PIXELS MAX_PIXELS CHANNELS OUT_FILE FRAME...
      FRAME is "H,W,C,RAW_FILE": RAW_FILE holds H*W*C uint8 pixels, (H, W, C)
      row-major. Each frame is resized to smart_resize of the FIRST frame's
      size with torch.nn.functional.interpolate(mode="bilinear",
      antialias=True, align_corners=False) in float64 (see below), rescaled
      by 1/255 and
      normalised with OpenAI CLIP's mean and std (HF's rescale / normalize),
      the frames padded to a multiple of TEMPORAL with copies of the last one,
      then cut into patches with Qwen2VLImageProcessor._preprocess's
      reshape / transpose / reshape. OUT_FILE gets the patches as float32,
      (grid_t * grid_h * grid_w, C * TEMPORAL * PATCH * PATCH) row-major,
      followed by nothing else; the grid is implied.

Why float64: torch's float32 antialiased resize computes each tap's centre
and weights in float32, which shifts taps by up to ~1e-5 pixel on a 500-pixel
axis; on the test's sawtooth patterns (255-level jumps) that alone is ~5e-5
after normalisation. In float64 torch's own rounding vanishes, so the test's
1e-5 bound measures the C++ (float32 accumulation, float64 weights).

Written from transformers' published code, not from the C++
(datasets/native_image.cc). Exits 3 when torch or numpy cannot be imported
(the test's fixture then tries the next python3).
"""
import math
import sys

NO_TORCH_EXIT_CODE = 3  # tests/fixtures/python3.h knows it

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # pragma: no cover
    print(f"cannot import torch / numpy: {e}")
    sys.exit(NO_TORCH_EXIT_CODE)

OPENAI_CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
OPENAI_CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


def smart_resize(height, width, factor=28, min_pixels=56 * 56, max_pixels=14 * 14 * 4 * 1280):
    """transformers' smart_resize (Qwen2-VL image processing)."""
    if max(height, width) / min(height, width) > 200:
        raise ValueError(
            f"absolute aspect ratio must be smaller than 200, got {max(height, width) / min(height, width)}"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def load_frame(spec, channels):
    h, w, c, path = spec.split(",", 3)
    h, w, c = int(h), int(w), int(c)
    hwc = np.fromfile(path, dtype=np.uint8).reshape(h, w, c)
    if c == 1 and channels == 3:
        hwc = np.repeat(hwc, 3, axis=2)
    elif c == 3 and channels == 1:
        # PIL convert("L"): fixed-point BT.601 luma.
        v = hwc.astype(np.uint32)
        hwc = ((v[..., 0] * 19595 + v[..., 1] * 38470 + v[..., 2] * 7471 + 0x8000) >> 16).astype(np.uint8)[..., None]
    return hwc


def resize_normalize(hwc, h_bar, w_bar, channels):
    chw = torch.from_numpy(np.ascontiguousarray(hwc.transpose(2, 0, 1))).double()[None]
    resized = F.interpolate(chw, size=(h_bar, w_bar), mode="bilinear", antialias=True, align_corners=False)[0]
    # HF rescale: float64 multiply, back to float32; normalize: (x - mean) / std.
    image = (resized.numpy() * (1 / 255)).astype(np.float32)
    mean = np.array(OPENAI_CLIP_MEAN[:channels], dtype=np.float32)[:, None, None]
    std = np.array(OPENAI_CLIP_STD[:channels], dtype=np.float32)[:, None, None]
    return ((image - mean) / std).astype(np.float32)


def patches_case(args):
    patch, merge, temporal, min_pixels, max_pixels, channels = (int(a) for a in args[:6])
    out_file = args[6]
    frames = [load_frame(f, channels) for f in args[7:]]
    height, width = frames[0].shape[:2]
    factor = patch * merge
    h_bar, w_bar = smart_resize(height, width, factor, min_pixels, max_pixels)
    processed = np.stack([resize_normalize(f, h_bar, w_bar, channels) for f in frames])
    # Qwen2VLImageProcessor._preprocess from here on.
    patches = processed
    if patches.shape[0] % temporal != 0:
        repeats = np.repeat(patches[-1][np.newaxis], temporal - (patches.shape[0] % temporal), axis=0)
        patches = np.concatenate([patches, repeats], axis=0)
    channel = patches.shape[1]
    grid_t = patches.shape[0] // temporal
    grid_h, grid_w = h_bar // patch, w_bar // patch
    patches = patches.reshape(
        grid_t, temporal, channel, grid_h // merge, merge, patch, grid_w // merge, merge, patch
    )
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    flatten = patches.reshape(grid_t * grid_h * grid_w, channel * temporal * patch * patch)
    np.ascontiguousarray(flatten, dtype=np.float32).tofile(out_file)


def resize_case(args):
    h, w, factor, min_pixels, max_pixels = (int(a) for a in args[:5])
    out_file = args[5]
    try:
        h_bar, w_bar = smart_resize(h, w, factor, min_pixels, max_pixels)
        text = f"{h_bar} {w_bar}\n"
    except ValueError as e:
        text = f"error {e}\n"
    with open(out_file, "a") as f:
        f.write(text)


def main():
    with open(sys.argv[1]) as f:
        for line in f:
            words = line.split()
            if not words:
                continue
            if words[0] == "resize":
                resize_case(words[1:])
            elif words[0] == "patches":
                patches_case(words[1:])
            else:
                raise SystemExit(f"unknown case {words[0]!r}")


if __name__ == "__main__":
    main()
