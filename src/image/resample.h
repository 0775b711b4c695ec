// Bicubic resampling of 8-bit RGB exactly as Pillow's Image.resize(size, Image.BICUBIC) does it
// (what transformers' PIL-backend image processors call): a separable convolution with the
// a = -0.5 cubic kernel stretched by the scale when shrinking (antialiasing), coefficients
// normalised per output pixel and rounded to fixed point with 22 fractional bits, one pass into an
// 8-bit intermediate, then the other; each pass rounds and clips to 0..255. The pass order is
// Pillow 13's (vertical first when the height shrinks by more than twice what the width shrinks,
// else horizontal first), which decides the intermediate's rounding. Written from the algorithm's description
// (Pillow's Resample.c documents it), checked bit for bit against Pillow in
// tests/unit/image_preprocess_test.cpp. Any thread; no shared state.
#pragma once

#include "image/image.h"

namespace qs {

RgbImage resize_bicubic_pil(const RgbImage& in, int out_width, int out_height);

}  // namespace qs
