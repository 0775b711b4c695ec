// Safetensors reader (read-only mmap, every header field checked before a byte of data is
// touched) and atomic writer. Opened on the loading thread; a SafetensorsFile is immutable after
// open() and may then be read from any thread.
//
// Checks on open, each failing with a message naming the file (and the tensor at fault):
//   file ≥ 8 bytes; header length ≤ kMaxHeaderBytes and ≤ file size − 8; header is a JSON object;
//   `__metadata__` (optional) maps strings to strings; each tensor has a known `dtype`, a `shape`
//   of non-negative integers whose byte size does not overflow, and `data_offsets` [begin, end]
//   with begin ≤ end ≤ data section size and end − begin == numel · dtype_size.
//   Overlapping tensors are rejected, even identical ranges (no writer aliases tensors; two names
//   for the same bytes would be a corrupt file). Gaps between tensors are accepted.
#include "io/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace qs {
namespace {

using json = nlohmann::json;

// Non-negative integer JSON value → uint64, or nullopt.
std::optional<uint64_t> as_u64(const json& v) {
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return uint64_t(v.get<int64_t>());
    return std::nullopt;
}

// Parses one tensor entry of the header into `out` (data pointer filled in by the caller).
Status parse_tensor_entry(const std::string& path, const std::string& name, const json& e,
                          uint64_t data_bytes, TensorInfo* out, uint64_t* begin) {
    auto bad = [&](const std::string& what) {
        return corrupt_data(fmt::format("{}: tensor '{}': {}", path, name, what));
    };
    if (!e.is_object()) return bad("header entry is not an object");
    auto dt = e.find("dtype");
    auto sh = e.find("shape");
    auto off = e.find("data_offsets");
    if (dt == e.end()) return bad("missing dtype");
    if (sh == e.end()) return bad("missing shape");
    if (off == e.end()) return bad("missing data_offsets");
    if (!dt->is_string()) return bad("dtype is not a string");
    std::optional<DType> dtype = dtype_from_safetensors_name(dt->get_ref<const std::string&>());
    if (!dtype)
        return bad(
            fmt::format("unknown or unsupported dtype \"{}\"", dt->get_ref<const std::string&>()));
    if (!sh->is_array()) return bad("shape is not a list");

    out->name = name;
    out->dtype = *dtype;
    out->file = path;
    // Products of the non-zero dims must fit too, so no consumer of the shape can overflow int64.
    uint64_t nonzero_bytes = dtype_size(*dtype);
    bool has_zero = false;
    for (size_t i = 0; i < sh->size(); ++i) {
        const json& d = (*sh)[i];
        if (d.is_number_integer() && !d.is_number_unsigned() && d.get<int64_t>() < 0)
            return bad(fmt::format("negative dimension {} in shape", d.get<int64_t>()));
        std::optional<uint64_t> dim = as_u64(d);
        if (!dim) return bad(fmt::format("shape[{}] is not an integer", i));
        if (*dim > uint64_t(INT64_MAX))
            return bad(fmt::format("shape[{}] = {} is too large", i, *dim));
        has_zero |= *dim == 0;
        if (*dim != 0 && (__builtin_mul_overflow(nonzero_bytes, *dim, &nonzero_bytes) ||
                          nonzero_bytes > uint64_t(INT64_MAX)))
            return bad("shape overflows: numel * dtype size > 2^63");
        out->shape.push_back(int64_t(*dim));
    }
    uint64_t nbytes = has_zero ? 0 : nonzero_bytes;
    if (!off->is_array() || off->size() != 2) return bad("data_offsets is not [begin, end]");
    std::optional<uint64_t> b = as_u64((*off)[0]);
    std::optional<uint64_t> en = as_u64((*off)[1]);
    if (!b || !en) return bad("data_offsets are not non-negative integers");
    if (*b > *en) return bad(fmt::format("data_offsets [{}, {}] has begin > end", *b, *en));
    if (*en > data_bytes)
        return bad(fmt::format("data_offsets end {} is beyond the data section ({} bytes)", *en,
                               data_bytes));
    if (*en - *b != nbytes)
        return bad(fmt::format("data_offsets span {} bytes but {} {} needs {}", *en - *b,
                               dtype_name(*dtype), fmt::join(out->shape, "x"), nbytes));
    out->nbytes = size_t(nbytes);
    *begin = *b;
    return Status::ok();
}

Status write_all(int fd, const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        ssize_t w = ::write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return io_error(std::strerror(errno));
        p += w;
        n -= size_t(w);
    }
    return Status::ok();
}

}  // namespace

int64_t TensorInfo::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

SafetensorsFile::~SafetensorsFile() {
    if (map_) ::munmap(map_, map_bytes_);
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

Result<std::shared_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
    // O_NONBLOCK: opening a FIFO must not hang (fstat then rejects anything not a regular file).
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        int err = errno;
        std::string msg = fmt::format("{}: cannot open: {}", path, std::strerror(err));
        return err == ENOENT ? not_found(msg) : io_error(msg);
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int err = errno;
        ::close(fd);
        return io_error(fmt::format("{}: cannot stat: {}", path, std::strerror(err)));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return corrupt_data(fmt::format("{}: not a regular file", path));
    }
    uint64_t file_bytes = uint64_t(st.st_size);
    if (file_bytes < 8) {
        ::close(fd);
        return corrupt_data(fmt::format(
            "{}: file is {} bytes, shorter than the 8-byte header length field", path, file_bytes));
    }
    void* map = ::mmap(nullptr, size_t(file_bytes), PROT_READ, MAP_PRIVATE, fd, 0);
    int map_err = errno;
    ::close(fd);  // the mapping keeps the file alive
    if (map == MAP_FAILED)
        return io_error(fmt::format("{}: mmap failed: {}", path, std::strerror(map_err)));

    std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    f->map_ = map;
    f->map_bytes_ = size_t(file_bytes);
    const uint8_t* base = static_cast<const uint8_t*>(map);

    uint64_t header_bytes = 0;
    for (int i = 7; i >= 0; --i) header_bytes = (header_bytes << 8) | base[i];  // little-endian u64
    if (header_bytes > kMaxHeaderBytes)
        return corrupt_data(fmt::format("{}: header length {} exceeds the limit of {} bytes", path,
                                        header_bytes, kMaxHeaderBytes));
    if (header_bytes > file_bytes - 8)
        return corrupt_data(fmt::format(
            "{}: header length {} exceeds the file size ({} bytes after the length field)", path,
            header_bytes, file_bytes - 8));
    const char* header = reinterpret_cast<const char*>(base + 8);
    json h = json::parse(header, header + header_bytes, nullptr, /*allow_exceptions=*/false);
    if (h.is_discarded()) return corrupt_data(fmt::format("{}: header is not valid JSON", path));
    if (!h.is_object()) return corrupt_data(fmt::format("{}: header is not a JSON object", path));

    uint64_t data_offset = 8 + header_bytes;
    uint64_t data_bytes = file_bytes - data_offset;
    std::vector<std::pair<uint64_t, const TensorInfo*>>
        ranges;  // (begin, tensor) of non-empty tensors
    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string& name = it.key();
        if (name == "__metadata__") {
            if (!it->is_object())
                return corrupt_data(fmt::format("{}: __metadata__ is not an object", path));
            for (auto m = it->begin(); m != it->end(); ++m) {
                if (!m->is_string())
                    return corrupt_data(fmt::format(
                        "{}: __metadata__ value for '{}' is not a string", path, m.key()));
                f->metadata_[m.key()] = m->get<std::string>();
            }
            continue;
        }
        TensorInfo info;
        uint64_t begin = 0;
        QS_RETURN_IF_ERROR(parse_tensor_entry(path, name, *it, data_bytes, &info, &begin));
        info.data = base + data_offset + begin;
        auto [pos, inserted] = f->tensors_.emplace(name, std::move(info));
        QS_CHECK(inserted);  // JSON object keys are unique after parsing
        if (pos->second.nbytes > 0) ranges.emplace_back(begin, &pos->second);
    }

    std::sort(ranges.begin(), ranges.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 1; i < ranges.size(); ++i) {
        const auto& [prev_begin, prev] = ranges[i - 1];
        if (ranges[i].first < prev_begin + prev->nbytes)
            return corrupt_data(
                fmt::format("{}: tensor '{}' overlaps tensor '{}' in the data section", path,
                            ranges[i].second->name, prev->name));
    }
    return f;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
    // The header keeps the tensors in the order given (ordered_json); data is packed back to back
    // in that order. The header is padded with spaces so the data section starts 8-byte aligned;
    // gaps between tensors are NOT inserted, because the reference safetensors library rejects
    // them ("invalid offset"). Callers wanting every tensor aligned order them by dtype size.
    nlohmann::ordered_json h = nlohmann::ordered_json::object();
    if (!metadata.empty()) h["__metadata__"] = metadata;
    std::set<std::string> seen;
    uint64_t offset = 0;
    std::vector<uint64_t> sizes;  // [num tensors] bytes of each
    for (const TensorToWrite& t : tensors) {
        auto bad = [&](const std::string& what) {
            return invalid_argument(fmt::format("{}: tensor '{}': {}", path, t.name, what));
        };
        if (t.name.empty() || t.name == "__metadata__") return bad("invalid tensor name");
        if (!seen.insert(t.name).second) return bad("duplicate tensor name");
        uint64_t nbytes = dtype_size(t.dtype);
        for (int64_t d : t.shape) {
            if (d < 0) return bad("negative dimension");
            if (__builtin_mul_overflow(nbytes, uint64_t(d), &nbytes)) return bad("shape overflows");
        }
        if (nbytes > 0 && t.data == nullptr) return bad("null data");
        h[t.name] = {{"dtype", std::string(dtype_name(t.dtype))},
                     {"shape", t.shape},
                     {"data_offsets", {offset, offset + nbytes}}};
        offset += nbytes;
        sizes.push_back(nbytes);
    }
    std::string header = h.dump();
    header.append((8 - header.size() % 8) % 8, ' ');
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));

    // Atomic: everything goes to path.tmp, which is renamed over path only when complete.
    std::string tmp = path + ".tmp";
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return io_error(fmt::format("{}: cannot create: {}", tmp, std::strerror(errno)));
    Status s = write_all(fd, len, 8);
    if (s.is_ok()) s = write_all(fd, header.data(), header.size());
    for (size_t i = 0; i < tensors.size() && s.is_ok(); ++i)
        if (sizes[i] > 0) s = write_all(fd, tensors[i].data, size_t(sizes[i]));
    if (s.is_ok() && ::fsync(fd) != 0) s = io_error(std::strerror(errno));
    if (::close(fd) != 0 && s.is_ok()) s = io_error(std::strerror(errno));
    if (s.is_ok() && std::rename(tmp.c_str(), path.c_str()) != 0)
        s = io_error(std::strerror(errno));
    if (!s.is_ok()) {
        ::unlink(tmp.c_str());
        return s.with_context(fmt::format("{}: write failed", path));
    }
    return Status::ok();
}

}  // namespace qs
