// Safetensors reader/writer and Checkpoint: round trips for every dtype, hand-built corrupt files
// (each message must name the file and the tensor), sharded checkpoints, and a seeded fuzz test
// that mutates a valid file thousands of ways and requires open() to fail cleanly or to return
// tensors that lie inside the file.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "io/checkpoint.h"
#include "test_tmp_dir.h"

using namespace qs;
using qs::testing::TmpDir;

namespace {

// A safetensors file from its parts: u64 little-endian header length, header text, data.
std::string raw_file(const std::string& header, const std::string& data, uint64_t header_len) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(header_len >> (8 * i)));
    return out + header + data;
}
std::string raw_file(const std::string& header, const std::string& data) {
    return raw_file(header, data, header.size());
}

std::string random_bytes(std::mt19937_64& rng, size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = char(rng() & 0xff);
    return s;
}

// Either an error naming the file, or tensors that lie inside the mapping, do not overlap, have
// nbytes == numel * dtype_size and can all be read. Returns whether the open succeeded.
bool expect_safe_open(const std::string& path) {
    Result<std::shared_ptr<SafetensorsFile>> r = SafetensorsFile::open(path);
    if (!r.is_ok()) {
        EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
        return false;
    }
    const SafetensorsFile& f = *r.value();
    const uint8_t* lo = f.map_data() + 8;
    const uint8_t* hi = f.map_data() + f.map_bytes();
    std::vector<std::pair<const uint8_t*, size_t>> ranges;
    unsigned sum = 0;
    for (const auto& [name, t] : f.tensors()) {
        EXPECT_EQ(uint64_t(t.nbytes), uint64_t(t.numel()) * dtype_size(t.dtype)) << name;
        EXPECT_GE(t.data, lo) << name;
        EXPECT_LE(t.data + t.nbytes, hi) << name;
        if (t.data < lo || t.data + t.nbytes > hi) return true;  // do not read outside
        for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
        if (t.nbytes) ranges.emplace_back(t.data, t.nbytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i)
        EXPECT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first);
    volatile unsigned sink = sum;
    (void)sink;
    return true;
}

std::string open_error(const std::string& path) {
    Result<std::shared_ptr<SafetensorsFile>> r = SafetensorsFile::open(path);
    EXPECT_FALSE(r.is_ok()) << path;
    return r.is_ok() ? "" : r.status().message();
}

const DType kAllDTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kU8,
                            DType::kI8,  DType::kI32, DType::kI64,  DType::kBool};

}  // namespace

TEST(Safetensors, RoundTripEveryDtype) {
    TmpDir dir;
    std::mt19937_64 rng(1);
    std::vector<std::string> payloads;
    std::vector<TensorToWrite> tensors;
    std::vector<std::vector<int64_t>> shapes = {{2, 3}, {5}, {1, 2, 3}, {}};
    int k = 0;
    for (DType t : kAllDTypes) {
        std::vector<int64_t> shape = shapes[size_t(k) % shapes.size()];
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        payloads.push_back(random_bytes(rng, size_t(n) * dtype_size(t)));
        tensors.push_back({"t." + std::string(dtype_name(t)), t, shape, nullptr});
        ++k;
    }
    for (size_t i = 0; i < tensors.size(); ++i) tensors[i].data = payloads[i].data();
    std::string path = dir.file("all.safetensors");
    ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}, {"who", "test"}}).is_ok());
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

    Result<std::shared_ptr<SafetensorsFile>> r = SafetensorsFile::open(path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    const SafetensorsFile& f = *r.value();
    EXPECT_EQ(f.tensors().size(), tensors.size());
    EXPECT_EQ(f.metadata(),
              (std::map<std::string, std::string>{{"format", "pt"}, {"who", "test"}}));
    for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorInfo* t = f.find(tensors[i].name);
        ASSERT_NE(t, nullptr) << tensors[i].name;
        EXPECT_EQ(t->dtype, tensors[i].dtype);
        EXPECT_EQ(t->shape, tensors[i].shape);
        EXPECT_EQ(t->file, path);
        ASSERT_EQ(t->nbytes, payloads[i].size());
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(t->data), t->nbytes), payloads[i])
            << tensors[i].name;
    }
    EXPECT_EQ(f.find("absent"), nullptr);

    // Header padded to a multiple of 8; data packed in the order given.
    uint64_t n = 0;
    std::memcpy(&n, f.map_data(), 8);
    EXPECT_EQ(n % 8, 0u);
    const uint8_t* prev_end = f.map_data() + 8 + n;
    for (size_t i = 0; i < tensors.size(); ++i) {
        const TensorInfo* t = f.find(tensors[i].name);
        EXPECT_EQ(t->data, prev_end) << tensors[i].name;
        prev_end = t->data + t->nbytes;
    }
    EXPECT_EQ(prev_end, f.map_data() + f.map_bytes());
}

TEST(Safetensors, WriterRejectsBadInputAndLeavesNoFile) {
    TmpDir dir;
    float x[2] = {1, 2};
    std::string path = dir.file("w.safetensors");
    Status s = write_safetensors(path, {{"a", DType::kF32, {2}, x}, {"a", DType::kF32, {2}, x}});
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("duplicate"), std::string::npos);
    s = write_safetensors(path, {{"a", DType::kF32, {-2}, x}});
    ASSERT_FALSE(s.is_ok());
    s = write_safetensors(dir.file("no/such/dir/w.safetensors"), {{"a", DType::kF32, {2}, x}});
    ASSERT_FALSE(s.is_ok());
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
    // An existing file is replaced whole.
    ASSERT_TRUE(write_safetensors(path, {{"a", DType::kF32, {2}, x}}).is_ok());
    ASSERT_TRUE(write_safetensors(path, {{"b", DType::kF32, {1}, x}}).is_ok());
    auto f = SafetensorsFile::open(path);
    ASSERT_TRUE(f.is_ok());
    EXPECT_EQ(f.value()->tensors().size(), 1u);
    EXPECT_NE(f.value()->find("b"), nullptr);
}

TEST(Safetensors, CorruptFilesNameFileAndTensor) {
    TmpDir dir;
    const std::string t = "model.layers.0.bad";
    auto entry = [&](const std::string& body) { return "{\"" + t + "\":" + body + "}"; };
    struct Case {
        std::string bytes;
        std::string expect;  // substring after "PATH: "
        bool names_tensor;
    };
    const std::string ok_data(64, 'x');
    const Case cases[] = {
        {"abc", "file is 3 bytes, shorter than the 8-byte header length field", false},
        {"", "file is 0 bytes", false},
        {raw_file("{}", "", SafetensorsFile::kMaxHeaderBytes + 1), "exceeds the limit", false},
        {raw_file("{}", "", ~0ull), "exceeds the limit", false},
        {raw_file("{}", "", 1000),
         "header length 1000 exceeds the file size (2 bytes after the length field)", false},
        {raw_file("{not json", ""), "header is not valid JSON", false},
        {raw_file("[1,2]", ""), "header is not a JSON object", false},
        {raw_file("{\"__metadata__\":{\"k\":1}}", ""), "__metadata__ value for 'k' is not a string",
         false},
        {raw_file("{\"__metadata__\":[]}", ""), "__metadata__ is not an object", false},
        {raw_file(entry("5"), ok_data), "header entry is not an object", true},
        {raw_file(entry(R"({"shape":[2],"data_offsets":[0,8]})"), ok_data), "missing dtype", true},
        {raw_file(entry(R"({"dtype":"F32","data_offsets":[0,8]})"), ok_data), "missing shape",
         true},
        {raw_file(entry(R"({"dtype":"F32","shape":[2]})"), ok_data), "missing data_offsets", true},
        {raw_file(entry(R"({"dtype":"F64","shape":[2],"data_offsets":[0,16]})"), ok_data),
         "unknown or unsupported dtype \"F64\"", true},
        {raw_file(entry(R"({"dtype":7,"shape":[2],"data_offsets":[0,8]})"), ok_data),
         "dtype is not a string", true},
        {raw_file(entry(R"({"dtype":"F32","shape":2,"data_offsets":[0,8]})"), ok_data),
         "shape is not a list", true},
        {raw_file(entry(R"({"dtype":"F32","shape":[2,-3],"data_offsets":[0,8]})"), ok_data),
         "negative dimension -3 in shape", true},
        {raw_file(entry(R"({"dtype":"F32","shape":[2.5],"data_offsets":[0,8]})"), ok_data),
         "shape[0] is not an integer", true},
        {raw_file(entry(R"({"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]})"),
                  ok_data),
         "shape overflows", true},
        {raw_file(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[0]})"), ok_data),
         "data_offsets is not [begin, end]", true},
        {raw_file(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[-8,0]})"), ok_data),
         "data_offsets are not non-negative integers", true},
        {raw_file(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[16,8]})"), ok_data),
         "data_offsets [16, 8] has begin > end", true},
        {raw_file(entry(R"({"dtype":"F32","shape":[2],"data_offsets":[60,68]})"), ok_data),
         "data_offsets end 68 is beyond the data section (64 bytes)", true},
        {raw_file(entry(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,8]})"), ok_data),
         "data_offsets span 8 bytes but F32 2x3 needs 24", true},
        {raw_file(
             std::string("{\"other\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},") +
                 "\"" + t + "\":" + R"({"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
             ok_data),
         "overlaps tensor", true},
        {raw_file(std::string("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},") +
                      "\"" + t + "\":" + R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
                  ok_data),
         "overlaps tensor", true},
    };
    int i = 0;
    for (const Case& c : cases) {
        std::string path = dir.write("corrupt" + std::to_string(i++) + ".safetensors", c.bytes);
        std::string msg = open_error(path);
        EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
        EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
        if (c.names_tensor) {
            EXPECT_NE(msg.find("'" + t + "'"), std::string::npos) << msg;
        }
    }
    Result<std::shared_ptr<SafetensorsFile>> missing =
        SafetensorsFile::open(dir.file("none.safetensors"));
    ASSERT_FALSE(missing.is_ok());
    EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
    EXPECT_NE(missing.status().message().find(dir.file("none.safetensors")), std::string::npos);
}

TEST(Safetensors, AcceptsZeroSizeTensorsAndGaps) {
    TmpDir dir;
    // Zero-size tensors at any in-range offset, a scalar, and a gap before "b".
    std::string path = dir.write(
        "ok.safetensors", raw_file(R"({"e":{"dtype":"F32","shape":[0,3],"data_offsets":[4,4]},)"
                                   R"("s":{"dtype":"I32","shape":[],"data_offsets":[0,4]},)"
                                   R"("b":{"dtype":"U8","shape":[2],"data_offsets":[6,8]}})",
                                   std::string("\x01\x00\x00\x00zzAB", 8)));
    Result<std::shared_ptr<SafetensorsFile>> r = SafetensorsFile::open(path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r.value()->find("e")->nbytes, 0u);
    EXPECT_EQ(r.value()->find("e")->numel(), 0);
    EXPECT_EQ(r.value()->find("s")->numel(), 1);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(r.value()->find("b")->data), 2), "AB");
}

TEST(Safetensors, FuzzedFilesNeverCrash) {
    TmpDir dir;
    // QS_FUZZ_SEED=N reruns the same mutations from another seed (for longer local fuzzing).
    const char* seed_env = std::getenv("QS_FUZZ_SEED");
    std::mt19937_64 rng(seed_env ? std::strtoull(seed_env, nullptr, 10) : 20240611);
    float a[6] = {1, 2, 3, 4, 5, 6};
    uint8_t b[5] = {1, 2, 3, 4, 5};
    uint16_t c[4] = {0x3f80, 0x4000, 0x4040, 0x4080};
    std::string base_path = dir.file("base.safetensors");
    ASSERT_TRUE(
        write_safetensors(
            base_path,
            {{"a", DType::kF32, {2, 3}, a}, {"b", DType::kU8, {5}, b}, {"c", DType::kBF16, {4}, c}},
            {{"format", "pt"}})
            .is_ok());
    std::string base;
    {
        std::ifstream in(base_path, std::ios::binary);
        base.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    uint64_t header_len = 0;
    std::memcpy(&header_len, base.data(), 8);
    const std::string header = base.substr(8, size_t(header_len));
    const std::string data = base.substr(8 + size_t(header_len));
    const std::string path = dir.file("fuzz.safetensors");
    int num_ok = 0, num_failed = 0;
    auto attempt = [&](const std::string& bytes) {
        // Unlink first: rewriting a file via truncation makes ext4 flush it on close (slow).
        std::filesystem::remove(path);
        dir.write("fuzz.safetensors", bytes);
        (expect_safe_open(path) ? num_ok : num_failed)++;
    };
    const char kJsonish[] = "0123456789-+.eE{}[]\",: \\\x00\xff";

    // Byte substitutions inside the header, biased to characters that keep it JSON-like.
    for (int iter = 0; iter < 1500 && !HasFailure(); ++iter) {
        std::string m = base;
        int flips = 1 + int(rng() % 4);
        for (int f = 0; f < flips; ++f) {
            size_t pos = 8 + size_t(rng() % header_len);
            m[pos] = rng() % 2 ? kJsonish[rng() % (sizeof(kJsonish) - 1)] : char(rng() & 0xff);
        }
        attempt(m);
    }
    // Truncation at every length.
    for (size_t len = 0; len <= base.size() && !HasFailure(); ++len) attempt(base.substr(0, len));
    // Header-length field: edge values and random ones.
    std::vector<uint64_t> lens = {0,
                                  1,
                                  2,
                                  7,
                                  8,
                                  header_len - 1,
                                  header_len + 1,
                                  header_len + data.size(),
                                  header_len + data.size() + 1,
                                  SafetensorsFile::kMaxHeaderBytes,
                                  SafetensorsFile::kMaxHeaderBytes + 1,
                                  1ull << 63,
                                  ~0ull,
                                  ~0ull - 7};
    for (int k = 0; k < 200; ++k) lens.push_back(rng() % 2 ? rng() : rng() % (base.size() + 16));
    for (uint64_t len : lens) {
        if (HasFailure()) break;
        attempt(raw_file(header, data, len));
    }
    // Random tensor entries: dtypes, shapes and offsets drawn from edge values.
    const char* dtypes[] = {"F32", "F16", "BF16", "F8_E4M3", "U8", "I8",
                            "I32", "I64", "BOOL", "F64",     "X"};
    const char* nums[] = {"0",
                          "1",
                          "2",
                          "3",
                          "4",
                          "8",
                          "24",
                          "-1",
                          "-8",
                          "33",
                          "9223372036854775807",
                          "9223372036854775808",
                          "18446744073709551615",
                          "18446744073709551616",
                          "1e3",
                          "2.0",
                          "null"};
    auto num = [&]() {
        if (rng() % 3 == 0) return std::to_string(rng() % (data.size() + 4));
        return std::string(nums[rng() % std::size(nums)]);
    };
    for (int iter = 0; iter < 1500 && !HasFailure(); ++iter) {
        std::string h = "{";
        int n = int(rng() % 4);
        for (int e = 0; e < n; ++e) {
            std::string shape;
            int rank = int(rng() % 4);
            for (int d = 0; d < rank; ++d) shape += (d ? "," : "") + num();
            h += (e ? ",\"t" : "\"t") + std::to_string(e) + "\":{\"dtype\":\"" +
                 dtypes[rng() % std::size(dtypes)] + "\",\"shape\":[" + shape +
                 "],\"data_offsets\":[" + num() + "," + num() + "]}";
        }
        h += "}";
        attempt(raw_file(h, data.substr(0, size_t(rng() % (data.size() + 1)))));
    }
    // Insertions and deletions inside the header (the length field is kept consistent).
    for (int iter = 0; iter < 500 && !HasFailure(); ++iter) {
        std::string h = header;
        size_t pos = size_t(rng() % h.size());
        if (rng() % 2)
            h.erase(pos, 1 + size_t(rng() % 4));
        else
            h.insert(pos, 1, kJsonish[rng() % (sizeof(kJsonish) - 1)]);
        attempt(raw_file(h, data));
    }
    // Both outcomes must be exercised, or the mutations are not testing much.
    EXPECT_GT(num_ok, 300) << num_failed;
    EXPECT_GT(num_failed, 1000) << num_ok;
    std::printf("fuzz: %d opened, %d rejected\n", num_ok, num_failed);
}

TEST(Checkpoint, SingleFileAndDirectFile) {
    TmpDir dir;
    float x[3] = {1, 2, 3};
    ASSERT_TRUE(
        write_safetensors(dir.file("model.safetensors"), {{"w", DType::kF32, {3}, x}}).is_ok());
    dir.write("config.json", "{}");
    for (const std::string& p : {dir.path(), dir.file("model.safetensors")}) {
        Result<std::shared_ptr<Checkpoint>> ck = Checkpoint::open(p);
        ASSERT_TRUE(ck.is_ok()) << ck.status().message();
        EXPECT_EQ(ck.value()->num_tensors(), 1u);
        ASSERT_NE(ck.value()->find("w"), nullptr);
        EXPECT_EQ(ck.value()->find("w")->shape, std::vector<int64_t>{3});
        EXPECT_EQ(ck.value()->find("nope"), nullptr);
    }
}

namespace {

// Two shards and an index: a, b in shard 1; c in shard 2.
void write_sharded(const TmpDir& dir, const std::string& index_json) {
    float x[4] = {1, 2, 3, 4};
    int64_t y[2] = {7, 8};
    ASSERT_TRUE(write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                                  {{"a", DType::kF32, {4}, x}, {"b", DType::kI64, {2}, y}})
                    .is_ok());
    ASSERT_TRUE(write_safetensors(dir.file("model-00002-of-00002.safetensors"),
                                  {{"c", DType::kF32, {2, 2}, x}})
                    .is_ok());
    dir.write("model.safetensors.index.json", index_json);
}

const char* kGoodIndex = R"({"metadata":{"total_size":64},"weight_map":{
    "a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
    "c":"model-00002-of-00002.safetensors"}})";

std::string checkpoint_error(const std::string& dir) {
    Result<std::shared_ptr<Checkpoint>> ck = Checkpoint::open(dir);
    EXPECT_FALSE(ck.is_ok());
    return ck.is_ok() ? "" : ck.status().message();
}

}  // namespace

TEST(Checkpoint, ShardedViaIndex) {
    TmpDir dir;
    write_sharded(dir, kGoodIndex);
    Result<std::shared_ptr<Checkpoint>> ck = Checkpoint::open(dir.path());
    ASSERT_TRUE(ck.is_ok()) << ck.status().message();
    EXPECT_EQ(ck.value()->names(), (std::vector<std::string>{"a", "b", "c"}));
    EXPECT_EQ(ck.value()->files().size(), 2u);
    const TensorInfo* c = ck.value()->find("c");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->file, dir.file("model-00002-of-00002.safetensors"));
    EXPECT_EQ(c->shape, (std::vector<int64_t>{2, 2}));
    int64_t b1 = 0;
    std::memcpy(&b1, ck.value()->find("b")->data + 8, 8);
    EXPECT_EQ(b1, 8);
    EXPECT_EQ(ck.value()->find("d"), nullptr);
}

TEST(Checkpoint, IndexErrorsNameShardAndTensor) {
    {
        TmpDir dir;
        write_sharded(
            dir,
            R"({"weight_map":{"a":"model-00001-of-00002.safetensors","z":"missing.safetensors"}})");
        std::string msg = checkpoint_error(dir.path());
        EXPECT_NE(msg.find("shard 'missing.safetensors' listed in the index does not exist"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
    }
    {
        TmpDir dir;
        // "q" is listed for shard 2, which does not hold it.
        write_sharded(
            dir,
            R"({"weight_map":{"q":"model-00002-of-00002.safetensors","c":"model-00002-of-00002.safetensors"}})");
        std::string msg = checkpoint_error(dir.path());
        EXPECT_NE(msg.find("tensor 'q' is mapped to shard 'model-00002-of-00002.safetensors' but"),
                  std::string::npos)
            << msg;
    }
    {
        TmpDir dir;
        write_sharded(dir, kGoodIndex);
        float x[1] = {0};
        // A third shard, listed in the index, that also holds "a".
        ASSERT_TRUE(
            write_safetensors(dir.file("extra.safetensors"), {{"a", DType::kF32, {1}, x}}).is_ok());
        dir.write(
            "model.safetensors.index.json",
            R"({"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00001-of-00002.safetensors",
                      "c":"model-00002-of-00002.safetensors","e":"extra.safetensors"}})");
        std::string msg = checkpoint_error(dir.path());
        EXPECT_NE(msg.find("tensor 'a' is present in two files"), std::string::npos) << msg;
        EXPECT_NE(msg.find("extra.safetensors"), std::string::npos) << msg;
    }
    {
        TmpDir dir;
        write_sharded(dir, R"({"weight_map":{"a":"../model-00001-of-00002.safetensors"}})");
        EXPECT_NE(checkpoint_error(dir.path()).find("not a file name inside the checkpoint"),
                  std::string::npos);
        dir.write("model.safetensors.index.json", R"({"metadata":{}})");
        EXPECT_NE(checkpoint_error(dir.path()).find("missing field weight_map"), std::string::npos);
        dir.write("model.safetensors.index.json", R"({"weight_map":)");
        EXPECT_NE(checkpoint_error(dir.path()).find("not valid JSON"), std::string::npos);
    }
}

TEST(Checkpoint, DirectoryWithoutIndexOpensEveryFile) {
    TmpDir dir;
    write_sharded(dir, "");
    std::filesystem::remove(dir.file("model.safetensors.index.json"));
    dir.write("notes.txt", "not a tensor file");
    Result<std::shared_ptr<Checkpoint>> ck = Checkpoint::open(dir.path());
    ASSERT_TRUE(ck.is_ok()) << ck.status().message();
    EXPECT_EQ(ck.value()->num_tensors(), 3u);

    float x[1] = {0};
    ASSERT_TRUE(
        write_safetensors(dir.file("dup.safetensors"), {{"c", DType::kF32, {1}, x}}).is_ok());
    std::string msg = checkpoint_error(dir.path());
    EXPECT_NE(msg.find("tensor 'c' is present in two files"), std::string::npos) << msg;

    TmpDir empty;
    Result<std::shared_ptr<Checkpoint>> none = Checkpoint::open(empty.path());
    ASSERT_FALSE(none.is_ok());
    EXPECT_EQ(none.status().kind(), ErrorKind::kNotFound);
    EXPECT_FALSE(Checkpoint::open(empty.file("nowhere")).is_ok());

    // A corrupt shard's error names the shard.
    TmpDir bad;
    std::string p = bad.write("model.safetensors", "short");
    msg = checkpoint_error(bad.path());
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
}
