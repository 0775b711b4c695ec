// .npy reader/writer: round trips, byte-exact comparison with files built by hand from the NPY
// format specification (what numpy.save writes), and errors that name the file.
#include "io/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "test_tmp_dir.h"

using namespace qs;
using qs::testing::TmpDir;

namespace {

// Preamble + header for format `major`.0: magic, version, little-endian length, dict padded with
// spaces and a final '\n' so the data starts at a multiple of 64 bytes.
std::string npy_preamble(const std::string& dict, int major = 1) {
    size_t len_bytes = major == 1 ? 2 : 4;
    size_t unpadded = 6 + 2 + len_bytes + dict.size() + 1;
    std::string header = dict + std::string((64 - unpadded % 64) % 64, ' ') + "\n";
    std::string out = "\x93NUMPY";
    out += char(major);
    out += '\0';
    for (size_t i = 0; i < len_bytes; ++i) out += char((header.size() >> (8 * i)) & 0xff);
    return out + header;
}

template <typename T>
std::string le_bytes(std::initializer_list<T> values) {
    std::string s;
    for (T v : values) {
        char b[sizeof(T)];
        std::memcpy(b, &v, sizeof(T));  // the host is little-endian (static_assert in npy.cpp)
        s.append(b, sizeof(T));
    }
    return s;
}

std::string read_all(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST(Npy, FloatRoundTrip) {
    TmpDir dir;
    const std::vector<std::vector<int64_t>> shapes = {{2, 3}, {5}, {}, {0, 4}, {2, 1, 3}};
    for (const auto& shape : shapes) {
        int64_t n = 1;
        for (int64_t d : shape) n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float(i) * 0.5f - 1e30f * float(i % 2);
        std::string path = dir.file("f.npy");
        ASSERT_TRUE(write_npy(path, v.data(), shape).is_ok());
        EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
        Result<NpyFloatArray> r = read_npy_float(path);
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(r.value().shape, shape);
        EXPECT_EQ(r.value().data, v);
        EXPECT_EQ(read_all(path).size() % 64, size_t(n * 4) % 64);  // data starts 64-aligned
    }
}

TEST(Npy, IntRoundTrip) {
    TmpDir dir;
    std::vector<int64_t> v = {0, -1, INT64_MAX, INT64_MIN, 248046, 7};
    std::string path = dir.file("ids.npy");
    ASSERT_TRUE(write_npy(path, v.data(), {3, 2}).is_ok());
    Result<NpyIntArray> r = read_npy_int(path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r.value().shape, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(r.value().data, v);
    EXPECT_EQ(r.value().numel(), 6);
}

TEST(Npy, WriterMatchesHandBuiltBytes) {
    TmpDir dir;
    float f[6] = {0, 1, 2, 3, 4, 5};
    ASSERT_TRUE(write_npy(dir.file("a.npy"), f, {2, 3}).is_ok());
    std::string want = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
                       "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" +
                       std::string(58, ' ') + "\n" + le_bytes<float>({0, 1, 2, 3, 4, 5});
    EXPECT_EQ(read_all(dir.file("a.npy")), want);

    int64_t i[3] = {1, 2, 3};
    ASSERT_TRUE(write_npy(dir.file("b.npy"), i, {3}).is_ok());
    want = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
           "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }" + std::string(60, ' ') +
           "\n" + le_bytes<int64_t>({1, 2, 3});
    EXPECT_EQ(read_all(dir.file("b.npy")), want);

    float s = 2.5f;
    ASSERT_TRUE(write_npy(dir.file("c.npy"), &s, {}).is_ok());
    want = std::string("\x93NUMPY\x01\x00\x76\x00", 10) +
           "{'descr': '<f4', 'fortran_order': False, 'shape': (), }" + std::string(62, ' ') + "\n" +
           le_bytes<float>({2.5f});
    EXPECT_EQ(read_all(dir.file("c.npy")), want);
}

TEST(Npy, ReadsHandBuiltFiles) {
    TmpDir dir;
    // <i4, C order, version 1.0.
    std::string p = dir.write(
        "i4.npy", npy_preamble("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }") +
                      le_bytes<int32_t>({1, -2, 3, -4}));
    Result<NpyIntArray> ri = read_npy_int(p);
    ASSERT_TRUE(ri.is_ok()) << ri.status().message();
    EXPECT_EQ(ri.value().shape, (std::vector<int64_t>{2, 2}));
    EXPECT_EQ(ri.value().data, (std::vector<int64_t>{1, -2, 3, -4}));

    // <f8, version 2.0 (4-byte header length), keys in another order, no trailing comma.
    p = dir.write("f8.npy",
                  npy_preamble("{'shape': (3,), 'fortran_order': False, 'descr': '<f8'}", 2) +
                      le_bytes<double>({0.1, -2.0, 1e300}));
    Result<NpyFloatArray> rf = read_npy_float(p);
    ASSERT_TRUE(rf.is_ok()) << rf.status().message();
    EXPECT_EQ(rf.value().data, (std::vector<float>{0.1f, -2.0f, float(1e300)}));

    // <f4 with fortran_order True is the same bytes for one dimension.
    p = dir.write("f4.npy",
                  npy_preamble("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }") +
                      le_bytes<float>({1.5f, 2.5f}));
    rf = read_npy_float(p);
    ASSERT_TRUE(rf.is_ok()) << rf.status().message();
    EXPECT_EQ(rf.value().data, (std::vector<float>{1.5f, 2.5f}));

    // <i8 read as int.
    p = dir.write("i8.npy",
                  npy_preamble("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }") +
                      le_bytes<int64_t>({-5}));
    ri = read_npy_int(p);
    ASSERT_TRUE(ri.is_ok()) << ri.status().message();
    EXPECT_EQ(ri.value().data, std::vector<int64_t>{-5});
}

TEST(Npy, ErrorsNameTheFile) {
    TmpDir dir;
    const std::string f4_2x2 = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
    struct Case {
        std::string bytes;
        std::string expect;
    };
    const Case cases[] = {
        {"", "not an .npy file (bad magic)"},
        {"PK\x03\x04 not npy at all", "not an .npy file (bad magic)"},
        {npy_preamble(f4_2x2) + le_bytes<float>({1, 2, 3}),
         "data section is 12 bytes but shape and dtype '<f4' need 16"},
        {npy_preamble(f4_2x2) + le_bytes<float>({1, 2, 3, 4, 5}), "data section is 20 bytes"},
        {npy_preamble(f4_2x2).substr(0, 40), "header length 118 exceeds the file size"},
        {npy_preamble("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }") + "abcd",
         "big-endian dtype '>f4' is unsupported"},
        {npy_preamble("{'descr': '<u2', 'fortran_order': False, 'shape': (1,), }") + "ab",
         "dtype '<u2' is unsupported (<f4, <f8, <i4 or <i8)"},
        {npy_preamble("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }") +
             le_bytes<float>({1, 2, 3, 4}),
         "Fortran-order arrays are unsupported"},
        {npy_preamble("{'descr': '<f4', 'shape': (1,), }") + "abcd", "malformed header"},
        {npy_preamble("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }"),
         "malformed header"},
        {npy_preamble("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'extra': 1, }") +
             "abcd",
         "malformed header"},
        {std::string("\x93NUMPY\x09\x00\x00\x00", 10), "unsupported .npy format version 9"},
        {npy_preamble("{'descr': '<i4', 'fortran_order': False, 'shape': (1,), }") + "abcd",
         "dtype '<i4' is an integer type; read it with read_npy_int"},
    };
    int i = 0;
    for (const Case& c : cases) {
        std::string path = dir.write("bad" + std::to_string(i++) + ".npy", c.bytes);
        Result<NpyFloatArray> r = read_npy_float(path);
        ASSERT_FALSE(r.is_ok()) << c.expect;
        EXPECT_EQ(r.status().message().rfind(path + ": ", 0), 0u) << r.status().message();
        EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
    }
    std::string fpath = dir.write(
        "float.npy", npy_preamble("{'descr': '<f8', 'fortran_order': False, 'shape': (), }") +
                         le_bytes<double>({1.0}));
    Result<NpyIntArray> ri = read_npy_int(fpath);
    ASSERT_FALSE(ri.is_ok());
    EXPECT_EQ(ri.status().message(),
              fpath + ": dtype '<f8' is a float type; read it with read_npy_float");

    Result<NpyFloatArray> missing = read_npy_float(dir.file("none.npy"));
    ASSERT_FALSE(missing.is_ok());
    EXPECT_EQ(missing.status().kind(), ErrorKind::kNotFound);
    EXPECT_NE(missing.status().message().find(dir.file("none.npy")), std::string::npos);
}

TEST(Npy, FailedWriteLeavesNoFile) {
    TmpDir dir;
    float v[2] = {1, 2};
    std::string path = dir.file("missing_dir/x.npy");
    Status s = write_npy(path, v, {2});
    ASSERT_FALSE(s.is_ok());
    EXPECT_NE(s.message().find("missing_dir/x.npy"), std::string::npos) << s.message();
    EXPECT_FALSE(write_npy(dir.file("neg.npy"), v, {-2}).is_ok());
    EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
}
