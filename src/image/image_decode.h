// Decoding of JPEG (libjpeg-turbo), PNG (libpng) and WebP (libwebp) bytes to 8-bit RGB, as
// transformers sees them after PIL's Image.open(...).convert("RGB"):
//   - grayscale is replicated to R=G=B, palettes are looked up, alpha is dropped (not composited);
//   - 16-bit PNG samples keep their high byte (PIL's 16-bit RGB unpacker; PIL clips 16-bit
//     grayscale instead, a documented difference in docs/VISION.md);
//   - CMYK/YCCK JPEGs, animated WebP and other formats are refused (kUnsupported);
//   - EXIF orientation is not applied (the processor does not apply it either).
// The pixel limit is checked from the header, before any pixel is decoded. Every error names
// the format and the problem; corrupt data is kInvalidArgument (a bad request, not a bad file of
// ours). Any thread; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"
#include "image/image.h"

namespace qs {

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };

const char* image_format_name(ImageFormat f);

// From the magic bytes only.
ImageFormat sniff_image_format(std::string_view bytes);

struct DecodeLimits {
    int64_t max_pixels = int64_t(1) << 26;  // width × height before any resize
};

Result<RgbImage> decode_image(std::string_view bytes, const DecodeLimits& limits = {});

}  // namespace qs
