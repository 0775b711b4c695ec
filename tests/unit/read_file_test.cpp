// core/read_file: the bytes as written (binary, embedded NULs, no newline translation), and
// errors that name the file with the kind the CLI and server map to exit codes.
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "core/read_file.h"
#include "test_tmp_dir.h"

namespace qs {
namespace {

TEST(ReadFile, ReturnsTheBytesAsWritten) {
    testing::TmpDir dir;
    const std::string bytes = std::string("a\r\nb\0c", 6) + std::string(70000, 'x');  // > one buffer
    std::ofstream(dir.file("f.bin"), std::ios::binary) << bytes;
    auto r = read_file(dir.file("f.bin"));
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(r.value(), bytes);
}

TEST(ReadFile, EmptyFileIsEmptyNotAnError) {
    testing::TmpDir dir;
    std::ofstream(dir.file("empty")).close();
    auto r = read_file(dir.file("empty"));
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r.value(), "");
}

TEST(ReadFile, MissingFileIsNotFoundNamingThePath) {
    testing::TmpDir dir;
    auto r = read_file(dir.file("nope.json"));
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kNotFound);
    EXPECT_NE(r.status().message().find(dir.file("nope.json")), std::string::npos) << r.status().message();
}

TEST(ReadFile, DirectoryIsNotFoundNamingThePath) {
    testing::TmpDir dir;
    auto r = read_file(dir.path());
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kNotFound);
    EXPECT_NE(r.status().message().find("a directory"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace qs
