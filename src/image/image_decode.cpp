#include "image/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <fmt/format.h>
#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>

namespace qs {

const char* image_format_name(ImageFormat f) {
    switch (f) {
        case ImageFormat::kJpeg: return "JPEG";
        case ImageFormat::kPng: return "PNG";
        case ImageFormat::kWebp: return "WebP";
        case ImageFormat::kUnknown: break;
    }
    return "unknown";
}

ImageFormat sniff_image_format(std::string_view b) {
    if (b.size() >= 3 && uint8_t(b[0]) == 0xFF && uint8_t(b[1]) == 0xD8 && uint8_t(b[2]) == 0xFF) {
        return ImageFormat::kJpeg;
    }
    if (b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
    if (b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0) {
        return ImageFormat::kWebp;
    }
    return ImageFormat::kUnknown;
}

namespace {

Status check_size(const char* fmt_name, int64_t w, int64_t h, const DecodeLimits& limits) {
    if (w <= 0 || h <= 0) {
        return invalid_argument(fmt::format("{} image has an empty size {}x{}", fmt_name, w, h));
    }
    if (w * h > limits.max_pixels) {
        return invalid_argument(fmt::format("{} image is {}x{} = {} pixels, more than the limit of {}",
                                            fmt_name, w, h, w * h, limits.max_pixels));
    }
    return Status::ok();
}

// ---- JPEG (libjpeg-turbo). libjpeg reports errors by calling error_exit, which must not
// return: it longjmps back here. Nothing with a destructor is created between setjmp and the
// end of the decode, so the jump skips no destructor (the output vector is sized before).
struct JpegErr {
    jpeg_error_mgr mgr;
    std::jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
    auto* err = reinterpret_cast<JpegErr*>(cinfo->err);
    (*cinfo->err->format_message)(cinfo, err->message);
    std::longjmp(err->jump, 1);
}

void jpeg_silent(j_common_ptr, int) {}

// Returns false with err.message set on a libjpeg error. Phase 1 reads the header into w/h/cs;
// phase 2 (out != nullptr) decodes into out.
bool jpeg_run(std::string_view bytes, JpegErr& err, int* w, int* h, J_COLOR_SPACE* cs, uint8_t* out) {
    jpeg_decompress_struct cinfo;
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = jpeg_error_exit;
    err.mgr.emit_message = jpeg_silent;
    if (setjmp(err.jump)) {
        jpeg_destroy_decompress(&cinfo);
        return false;
    }
    jpeg_create_decompress(&cinfo);
    jpeg_mem_src(&cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
    jpeg_read_header(&cinfo, TRUE);
    *w = int(cinfo.image_width);
    *h = int(cinfo.image_height);
    *cs = cinfo.jpeg_color_space;
    if (out == nullptr) {
        jpeg_destroy_decompress(&cinfo);
        return true;
    }
    // PIL's defaults: JDCT_ISLOW, fancy upsampling, no scaling.
    cinfo.out_color_space = JCS_RGB;
    cinfo.dct_method = JDCT_ISLOW;
    cinfo.do_fancy_upsampling = TRUE;
    jpeg_start_decompress(&cinfo);
    const size_t stride = size_t(cinfo.output_width) * 3;
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW row = out + size_t(cinfo.output_scanline) * stride;
        jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    return true;
}

Result<RgbImage> decode_jpeg(std::string_view bytes, const DecodeLimits& limits) {
    JpegErr err{};
    int w = 0, h = 0;
    J_COLOR_SPACE cs = JCS_UNKNOWN;
    if (!jpeg_run(bytes, err, &w, &h, &cs, nullptr)) {
        return invalid_argument(fmt::format("corrupt JPEG image: {}", err.message));
    }
    QS_RETURN_IF_ERROR(check_size("JPEG", w, h, limits));
    if (cs == JCS_CMYK || cs == JCS_YCCK) {
        return unsupported("CMYK/YCCK JPEG images are not supported; send an RGB or grayscale JPEG");
    }
    RgbImage img;
    img.width = w;
    img.height = h;
    img.rgb.resize(size_t(w) * size_t(h) * 3);
    if (!jpeg_run(bytes, err, &w, &h, &cs, img.rgb.data())) {
        return invalid_argument(fmt::format("corrupt JPEG image: {}", err.message));
    }
    return img;
}

// ---- PNG (libpng, low-level API so that no gamma or alpha compositing is applied: PIL
// applies neither). Errors longjmp as for JPEG.
struct PngSrc {
    const uint8_t* data;
    size_t size;
    size_t pos;
};

void png_read_mem(png_structp png, png_bytep out, png_size_t n) {
    auto* src = static_cast<PngSrc*>(png_get_io_ptr(png));
    if (n > src->size - src->pos) png_error(png, "truncated data");
    std::memcpy(out, src->data + src->pos, n);
    src->pos += n;
}

struct PngErr {
    char message[256];
};

void png_err_fn(png_structp png, png_const_charp msg) {
    auto* err = static_cast<PngErr*>(png_get_error_ptr(png));
    std::snprintf(err->message, sizeof(err->message), "%s", msg);
    png_longjmp(png, 1);
}

void png_warn_fn(png_structp, png_const_charp) {}

// Phase 1 (rows == nullptr): header only. Phase 2: decode into rows (RGB 8-bit).
bool png_run(std::string_view bytes, PngErr& err, uint32_t* w, uint32_t* h, png_bytepp rows) {
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &err, png_err_fn, png_warn_fn);
    if (png == nullptr) {
        std::snprintf(err.message, sizeof(err.message), "out of memory");
        return false;
    }
    png_infop info = png_create_info_struct(png);
    PngSrc src{reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), 0};
    if (info == nullptr || setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, nullptr);
        return false;
    }
    png_set_read_fn(png, &src, png_read_mem);
    // Large images are refused by our own pixel limit, not libpng's 1M-pixel default.
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    png_read_info(png, info);
    *w = png_get_image_width(png, info);
    *h = png_get_image_height(png, info);
    if (rows == nullptr) {
        png_destroy_read_struct(&png, &info, nullptr);
        return true;
    }
    const int color = png_get_color_type(png, info);
    const int depth = png_get_bit_depth(png, info);
    if (depth == 16) png_set_strip_16(png);  // the high byte, as PIL's ;16B unpackers
    if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != size_t(*w) * 3) png_error(png, "unexpected row layout");
    png_read_image(png, rows);
    png_read_end(png, nullptr);
    png_destroy_read_struct(&png, &info, nullptr);
    return true;
}

Result<RgbImage> decode_png(std::string_view bytes, const DecodeLimits& limits) {
    PngErr err{};
    uint32_t w = 0, h = 0;
    if (!png_run(bytes, err, &w, &h, nullptr)) {
        return invalid_argument(fmt::format("corrupt PNG image: {}", err.message));
    }
    QS_RETURN_IF_ERROR(check_size("PNG", w, h, limits));
    RgbImage img;
    img.width = int(w);
    img.height = int(h);
    img.rgb.resize(size_t(w) * size_t(h) * 3);
    std::vector<png_bytep> rows(h);
    for (uint32_t y = 0; y < h; ++y) rows[y] = img.rgb.data() + size_t(y) * w * 3;
    if (!png_run(bytes, err, &w, &h, rows.data())) {
        return invalid_argument(fmt::format("corrupt PNG image: {}", err.message));
    }
    return img;
}

// ---- WebP (libwebp). Still images only.
Result<RgbImage> decode_webp(std::string_view bytes, const DecodeLimits& limits) {
    const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
    WebPBitstreamFeatures feat;
    if (WebPGetFeatures(data, bytes.size(), &feat) != VP8_STATUS_OK) {
        return invalid_argument("corrupt WebP image: the header does not parse");
    }
    if (feat.has_animation) return unsupported("animated WebP images are not supported");
    QS_RETURN_IF_ERROR(check_size("WebP", feat.width, feat.height, limits));
    RgbImage img;
    img.width = feat.width;
    img.height = feat.height;
    img.rgb.resize(size_t(img.width) * size_t(img.height) * 3);
    if (WebPDecodeRGBInto(data, bytes.size(), img.rgb.data(), img.rgb.size(), img.width * 3) == nullptr) {
        return invalid_argument("corrupt WebP image: the picture data does not decode");
    }
    return img;
}

}  // namespace

Result<RgbImage> decode_image(std::string_view bytes, const DecodeLimits& limits) {
    switch (sniff_image_format(bytes)) {
        case ImageFormat::kJpeg: return decode_jpeg(bytes, limits);
        case ImageFormat::kPng: return decode_png(bytes, limits);
        case ImageFormat::kWebp: return decode_webp(bytes, limits);
        case ImageFormat::kUnknown: break;
    }
    return unsupported("unsupported image format: only JPEG, PNG and WebP are accepted (by their magic bytes)");
}

}  // namespace qs
