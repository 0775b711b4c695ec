// .npy reader and writer (NumPy format spec, "numpy.lib.format"). Layout of a file:
//   "\x93NUMPY", major, minor, header length (u16 LE for v1.0, u32 LE for v2.0/3.0),
//   header = Python dict literal {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
//   padded with spaces and ending in '\n' so the data starts at a multiple of 64 bytes,
//   then the raw elements.
#include "io/npy.h"

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>

#include "core/read_file.h"

namespace qs {
namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";  // 6 bytes + NUL

struct NpyHeader {
    std::string descr;
    bool fortran_order = false;
    std::vector<int64_t> shape;
    size_t data_offset = 0;
};

// Parses the subset of Python literals an .npy header dict uses: strings, True/False/None,
// integers and tuples of integers.
class DictParser {
public:
    explicit DictParser(std::string_view s) : s_(s) {}

    bool parse(NpyHeader* h) {
        bool have_descr = false, have_fortran = false, have_shape = false;
        if (!eat('{')) return false;
        while (true) {
            if (eat('}')) break;
            std::string key;
            if (!string(&key) || !eat(':')) return false;
            if (key == "descr") {
                if (!string(&h->descr)) return false;
                have_descr = true;
            } else if (key == "fortran_order") {
                if (!boolean(&h->fortran_order)) return false;
                have_fortran = true;
            } else if (key == "shape") {
                if (!tuple(&h->shape)) return false;
                have_shape = true;
            } else {
                return false;  // numpy itself rejects extra keys
            }
            if (!eat(',')) {
                if (!eat('}')) return false;
                break;
            }
        }
        skip_ws();
        return have_descr && have_fortran && have_shape && pos_ == s_.size();
    }

private:
    void skip_ws() {
        while (pos_ < s_.size() &&
               (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\t' || s_[pos_] == '\r'))
            ++pos_;
    }
    bool eat(char c) {
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == c) {
            ++pos_;
            return true;
        }
        return false;
    }
    bool string(std::string* out) {
        skip_ws();
        if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return false;
        char q = s_[pos_++];
        size_t end = s_.find(q, pos_);
        if (end == std::string_view::npos) return false;
        *out = std::string(s_.substr(pos_, end - pos_));
        if (out->find('\\') != std::string::npos) return false;  // no escapes in valid descrs
        pos_ = end + 1;
        return true;
    }
    bool word(std::string_view w) {
        skip_ws();
        if (s_.substr(pos_, w.size()) != w) return false;
        pos_ += w.size();
        return true;
    }
    bool boolean(bool* out) {
        if (word("True")) return *out = true, true;
        if (word("False")) return *out = false, true;
        return false;
    }
    bool integer(int64_t* out) {
        skip_ws();
        size_t start = pos_;
        uint64_t v = 0;
        while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
            v = v * 10 + uint64_t(s_[pos_++] - '0');
            if (v > uint64_t(INT64_MAX)) return false;
        }
        if (pos_ == start) return false;
        if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;  // Python 2 long suffix
        *out = int64_t(v);
        return true;
    }
    bool tuple(std::vector<int64_t>* out) {
        out->clear();
        if (!eat('(')) return false;
        if (eat(')')) return true;
        while (true) {
            int64_t v = 0;
            if (!integer(&v)) return false;
            out->push_back(v);
            if (eat(')')) return true;
            if (!eat(',')) return false;
            if (eat(')')) return true;
        }
    }

    std::string_view s_;
    size_t pos_ = 0;
};

// Parses and checks the preamble and header; leaves the element count in *numel.
Result<NpyHeader> parse_header(const std::string& path, const std::string& bytes, size_t* itemsize,
                               uint64_t* numel) {
    auto bad = [&](const std::string& what) {
        return corrupt_data(fmt::format("{}: {}", path, what));
    };
    if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
        return bad("not an .npy file (bad magic)");
    uint8_t major = uint8_t(bytes[6]);
    size_t len_bytes = major == 1 ? 2 : (major == 2 || major == 3) ? 4 : 0;
    if (len_bytes == 0)
        return unsupported(fmt::format("{}: unsupported .npy format version {}", path, major));
    if (bytes.size() < 8 + len_bytes) return bad("truncated header");
    uint64_t header_len = 0;
    for (size_t i = 0; i < len_bytes; ++i) header_len |= uint64_t(uint8_t(bytes[8 + i])) << (8 * i);
    NpyHeader h;
    h.data_offset = 8 + len_bytes + size_t(header_len);
    if (h.data_offset > bytes.size())
        return bad(fmt::format("header length {} exceeds the file size", header_len));
    std::string_view text(bytes.data() + 8 + len_bytes, size_t(header_len));
    if (!DictParser(text).parse(&h))
        return bad(fmt::format("malformed header: {}", std::string(text)));

    const std::string& d = h.descr;
    if (d.size() == 3 && d[0] == '>')
        return unsupported(fmt::format("{}: big-endian dtype '{}' is unsupported", path, d));
    if (d != "<f4" && d != "<f8" && d != "<i4" && d != "<i8")
        return unsupported(
            fmt::format("{}: dtype '{}' is unsupported (<f4, <f8, <i4 or <i8)", path, d));
    *itemsize = size_t(d[2] - '0');
    if (h.fortran_order && h.shape.size() > 1)
        return unsupported(fmt::format("{}: Fortran-order arrays are unsupported", path));
    uint64_t n = 1, nbytes = 0;
    for (int64_t dim : h.shape) {
        if (__builtin_mul_overflow(n, uint64_t(dim), &n)) return bad("shape overflows");
    }
    if (__builtin_mul_overflow(n, uint64_t(*itemsize), &nbytes)) return bad("shape overflows");
    uint64_t have = bytes.size() - h.data_offset;
    if (have != nbytes)
        return bad(fmt::format("data section is {} bytes but shape and dtype '{}' need {}", have, d,
                               nbytes));
    *numel = n;
    return h;
}

template <typename Out, typename In>
void convert(const char* src, uint64_t n, std::vector<Out>* out) {
    out->resize(size_t(n));
    for (uint64_t i = 0; i < n; ++i) {
        In v;
        std::memcpy(&v, src + i * sizeof(In), sizeof(In));
        (*out)[size_t(i)] = static_cast<Out>(v);
    }
}

Status write_npy_impl(const std::string& path, const char* descr, const void* data, size_t itemsize,
                      const std::vector<int64_t>& shape) {
    uint64_t numel = 1;
    std::string dims;
    for (int64_t d : shape) {
        if (d < 0) return invalid_argument(fmt::format("{}: negative dimension {}", path, d));
        if (__builtin_mul_overflow(numel, uint64_t(d), &numel))
            return invalid_argument(fmt::format("{}: shape overflows", path));
        dims += fmt::format("{}, ", d);
    }
    // numpy spells a 1-tuple "(3,)" and longer ones "(2, 3)".
    if (shape.size() > 1)
        dims.resize(dims.size() - 2);
    else if (shape.size() == 1)
        dims.resize(dims.size() - 1);
    std::string header =
        fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({}), }}", descr, dims);
    size_t total = 10 + header.size() + 1;  // preamble + dict + '\n'
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    if (header.size() > 65535)
        return invalid_argument(fmt::format("{}: too many dimensions for a v1.0 header", path));
    std::string pre(kMagic, 6);
    pre += '\x01';
    pre += '\x00';
    pre += char(header.size() & 0xff);
    pre += char(header.size() >> 8);

    std::string tmp = path + ".tmp";
    std::FILE* f = std::fopen(tmp.c_str(), "wb");
    if (!f) return io_error(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
    size_t nbytes = size_t(numel) * itemsize;
    bool ok = std::fwrite(pre.data(), 1, pre.size(), f) == pre.size() &&
              std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
              (nbytes == 0 || std::fwrite(data, 1, nbytes, f) == nbytes);
    int err = errno;
    if (std::fclose(f) != 0 && ok) ok = false, err = errno;
    if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false, err = errno;
    if (!ok) {
        std::remove(tmp.c_str());
        return io_error(fmt::format("{}: write failed: {}", path, std::strerror(err)));
    }
    return Status::ok();
}

}  // namespace

Status write_npy(const std::string& path, const float* data, const std::vector<int64_t>& shape) {
    return write_npy_impl(path, "<f4", data, 4, shape);
}

Status write_npy(const std::string& path, const int64_t* data, const std::vector<int64_t>& shape) {
    return write_npy_impl(path, "<i8", data, 8, shape);
}

Result<NpyFloatArray> read_npy_float(const std::string& path) {
    QS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
    size_t itemsize = 0;
    uint64_t n = 0;
    QS_ASSIGN_OR_RETURN(NpyHeader h, parse_header(path, bytes, &itemsize, &n));
    if (h.descr[1] != 'f')
        return invalid_argument(fmt::format(
            "{}: dtype '{}' is an integer type; read it with read_npy_int", path, h.descr));
    NpyFloatArray a;
    a.shape = h.shape;
    const char* src = bytes.data() + h.data_offset;
    if (itemsize == 4)
        convert<float, float>(src, n, &a.data);
    else
        convert<float, double>(src, n, &a.data);
    return a;
}

Result<NpyIntArray> read_npy_int(const std::string& path) {
    QS_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
    size_t itemsize = 0;
    uint64_t n = 0;
    QS_ASSIGN_OR_RETURN(NpyHeader h, parse_header(path, bytes, &itemsize, &n));
    if (h.descr[1] != 'i')
        return invalid_argument(fmt::format(
            "{}: dtype '{}' is a float type; read it with read_npy_float", path, h.descr));
    NpyIntArray a;
    a.shape = h.shape;
    const char* src = bytes.data() + h.data_offset;
    if (itemsize == 4)
        convert<int64_t, int32_t>(src, n, &a.data);
    else
        convert<int64_t, int64_t>(src, n, &a.data);
    return a;
}

}  // namespace qs
