// `--model ORG/NAME` in the local Hugging Face cache (io/hf_cache.h), on a fake cache tree laid
// out as huggingface_hub lays it out: hub/models--ORG--NAME/refs/main holds the revision, and
// hub/models--ORG--NAME/snapshots/<revision>/ the files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include "io/hf_cache.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

// Sets or clears an environment variable for one test and restores it after.
class ScopedEnv {
public:
    ScopedEnv(const char* name, std::optional<std::string> value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        if (value) ::setenv(name, value->c_str(), 1);
        else ::unsetenv(name);
    }
    ~ScopedEnv() {
        if (old_) ::setenv(name_, old_->c_str(), 1);
        else ::unsetenv(name_);
    }

private:
    const char* name_;
    std::optional<std::string> old_;
};

class HfCache : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("qs_hf_cache_" + std::to_string(::getpid()));
        fs::remove_all(root_);
        fs::create_directories(root_);
    }
    void TearDown() override { fs::remove_all(root_); }

    // Writes hub/models--ORG--NAME with refs/main = rev (plus `ref_suffix`) and, if `snapshot`,
    // snapshots/rev/config.json. Returns the snapshot directory.
    fs::path make_repo(const fs::path& hub, const std::string& org, const std::string& name, const std::string& rev,
                       bool snapshot = true, const std::string& ref_suffix = "\n") {
        const fs::path repo = hub / ("models--" + org + "--" + name);
        fs::create_directories(repo / "refs");
        std::ofstream(repo / "refs" / "main") << rev << ref_suffix;
        const fs::path snap = repo / "snapshots" / rev;
        if (snapshot) {
            fs::create_directories(snap);
            std::ofstream(snap / "config.json") << "{}";
        }
        return snap;
    }

    fs::path root_;
};

}  // namespace

TEST(HfModelId, WhatCountsAsAnId) {
    EXPECT_TRUE(is_hf_model_id("Qwen/Qwen3.6-35B-A3B"));
    EXPECT_TRUE(is_hf_model_id("org_1/model.v2"));
    EXPECT_FALSE(is_hf_model_id("models/qwen36-tiny/x"));  // two slashes: a path
    EXPECT_FALSE(is_hf_model_id("/abs/path"));
    EXPECT_FALSE(is_hf_model_id("./local"));
    EXPECT_FALSE(is_hf_model_id("../up"));
    EXPECT_FALSE(is_hf_model_id("builtin:tiny"));
    EXPECT_FALSE(is_hf_model_id("plain"));
    EXPECT_FALSE(is_hf_model_id("org/"));
    EXPECT_FALSE(is_hf_model_id("~/model"));
}

TEST_F(HfCache, CacheDirFollowsHfHubCacheThenHfHomeThenHome) {
    ScopedEnv hub("HF_HUB_CACHE", "/x/hub-cache");
    ScopedEnv home("HF_HOME", "/y/hf-home");
    ScopedEnv user("HOME", "/z/user");
    EXPECT_EQ(hf_hub_cache_dir(), "/x/hub-cache");
    ::unsetenv("HF_HUB_CACHE");
    EXPECT_EQ(hf_hub_cache_dir(), "/y/hf-home/hub");
    ::unsetenv("HF_HOME");
    EXPECT_EQ(hf_hub_cache_dir(), "/z/user/.cache/huggingface/hub");
}

TEST_F(HfCache, ResolvesRefsMainToItsSnapshot) {
    const fs::path hub = root_ / "hub";
    make_repo(hub, "Qwen", "Other", "1111");
    const fs::path snap = make_repo(hub, "Qwen", "Qwen3.6-35B-A3B", "0123456789abcdef");
    ScopedEnv env("HF_HUB_CACHE", hub.string());
    auto r = resolve_model_path("Qwen/Qwen3.6-35B-A3B");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(fs::path(*r), snap);
    EXPECT_TRUE(fs::exists(fs::path(*r) / "config.json"));
}

TEST_F(HfCache, HfHomeAndHomeAreSearchedToo) {
    ScopedEnv no_hub("HF_HUB_CACHE", std::nullopt);
    {
        const fs::path snap = make_repo(root_ / "hf_home" / "hub", "A", "B", "rev1");
        ScopedEnv env("HF_HOME", (root_ / "hf_home").string());
        auto r = resolve_model_path("A/B");
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(fs::path(*r), snap);
    }
    {
        const fs::path snap = make_repo(root_ / "user" / ".cache" / "huggingface" / "hub", "C", "D", "rev2");
        ScopedEnv no_home("HF_HOME", std::nullopt);
        ScopedEnv env("HOME", (root_ / "user").string());
        auto r = resolve_model_path("C/D");
        ASSERT_TRUE(r.is_ok()) << r.status().message();
        EXPECT_EQ(fs::path(*r), snap);
    }
}

TEST_F(HfCache, AbsentModelNamesThePathAndTheDownloadCommand) {
    ScopedEnv env("HF_HUB_CACHE", (root_ / "empty-hub").string());
    auto r = resolve_model_path("Qwen/Qwen3.6-35B-A3B");
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().kind(), ErrorKind::kNotFound);
    const std::string& m = r.status().message();
    EXPECT_NE(m.find((root_ / "empty-hub" / "models--Qwen--Qwen3.6-35B-A3B" / "refs" / "main").string()),
              std::string::npos) << m;
    EXPECT_NE(m.find("hf download Qwen/Qwen3.6-35B-A3B"), std::string::npos) << m;
}

TEST_F(HfCache, MissingSnapshotOfARefIsNamed) {
    const fs::path hub = root_ / "hub";
    make_repo(hub, "Org", "Half", "abc", /*snapshot=*/false);
    ScopedEnv env("HF_HUB_CACHE", hub.string());
    auto r = resolve_model_path("Org/Half");
    ASSERT_FALSE(r.is_ok());
    EXPECT_NE(r.status().message().find((hub / "models--Org--Half" / "snapshots" / "abc").string()), std::string::npos)
        << r.status().message();
    EXPECT_NE(r.status().message().find("hf download Org/Half"), std::string::npos);
}

TEST_F(HfCache, ARefWithoutNewlineOrWithSpacesStillResolves) {
    const fs::path hub = root_ / "hub";
    const fs::path snap = make_repo(hub, "Org", "NoNl", "deadbeef", true, "");
    ScopedEnv env("HF_HUB_CACHE", hub.string());
    auto r = resolve_model_path("Org/NoNl");
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    EXPECT_EQ(fs::path(*r), snap);
}

TEST_F(HfCache, ALocalDirectoryOfThatNameWins) {
    const fs::path hub = root_ / "hub";
    make_repo(hub, "Org", "Model", "rev");
    fs::create_directories(root_ / "Org" / "Model");
    ScopedEnv env("HF_HUB_CACHE", hub.string());
    const fs::path cwd = fs::current_path();
    fs::current_path(root_);
    auto r = resolve_model_path("Org/Model");
    fs::current_path(cwd);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(*r, "Org/Model");
}

TEST_F(HfCache, PathsAndBuiltinsPassThrough) {
    ScopedEnv env("HF_HUB_CACHE", (root_ / "empty-hub").string());
    for (const std::string m : {"builtin:tiny", "/no/such/dir", "models/qwen36-tiny/sub"}) {
        auto r = resolve_model_path(m);
        ASSERT_TRUE(r.is_ok()) << m;
        EXPECT_EQ(*r, m);
    }
}
