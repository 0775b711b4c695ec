// The CPU forward against transformers 5.17 (tests/data/parity, made by
// tools/make_parity_fixtures.py): full prefill, prefill + one-token decode, and the MTP block,
// max |diff| <= 1e-3 on every fixture, including the bf16, per-expert and sharded/flat copies.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "io/npy.h"
#include "model/single_sequence.h"
#include "test_util.h"

using namespace qs;
namespace fs = std::filesystem;

namespace {

constexpr float kTolerance = 1e-3f;

struct Fixture {
    std::string dir;
    std::string refs;  // directory holding the reference .npy files
    int64_t incremental_from = 0;
};
// gtest prints a parameter in failure messages and test listings; without this, a byte dump.
void PrintTo(const Fixture& f, std::ostream* os) { *os << f.dir; }

std::vector<Fixture> fixtures() {
    std::vector<Fixture> out;
    const fs::path root = test::source_path("tests/data/parity");
    for (const auto& e : fs::directory_iterator(root)) {
        if (!fs::exists(e.path() / "reference.json")) continue;
        std::ifstream f(e.path() / "reference.json");
        nlohmann::json j = nlohmann::json::parse(f);
        out.push_back({e.path().string(), (e.path() / j.at("refs_dir").get<std::string>()).string(),
                       j.at("incremental_from").get<int64_t>()});
    }
    std::sort(out.begin(), out.end(), [](const Fixture& a, const Fixture& b) { return a.dir < b.dir; });
    return out;
}

std::vector<float> read_floats(const std::string& path) {
    auto r = read_npy_float(path);
    EXPECT_TRUE(r.is_ok()) << r.status().message();
    return r.is_ok() ? r->data : std::vector<float>();
}

class TransformersParity : public ::testing::TestWithParam<Fixture> {};

}  // namespace

TEST(TransformersParityFixtures, AllPresent) {
    // Three base configs plus the bf16, per-expert and text-prefix/sharded copies.
    EXPECT_GE(fixtures().size(), 6u);
}

TEST_P(TransformersParity, PrefillIncrementalAndMtp) {
    const Fixture& fx = GetParam();
    auto weights = load_model_dir(fx.dir);
    ASSERT_TRUE(weights.is_ok()) << weights.status().message();
    ASSERT_TRUE(weights->mtp.present);
    const int64_t V = weights->config.vocab_size;
    auto ids_npy = read_npy_int(fx.refs + "/ids.npy");
    ASSERT_TRUE(ids_npy.is_ok()) << ids_npy.status().message();
    const std::vector<int32_t> ids(ids_npy->data.begin(), ids_npy->data.end());
    const int64_t T = int64_t(ids.size()), K = fx.incremental_from;
    ASSERT_GT(T, 64);  // longer than the reference's GDN chunk

    CpuOps ops;
    Qwen36Model model(*weights, ops);

    // Full prefill + MTP over the whole sequence.
    SingleSequence whole(model, T);
    const std::vector<float> prefill = whole.feed(ids, /*all_rows=*/true);
    const std::vector<float> ref_prefill = read_floats(fx.refs + "/logits_prefill.npy");
    ASSERT_EQ(prefill.size(), size_t(T * V));
    EXPECT_LE(test::max_abs_diff(prefill, ref_prefill), kTolerance) << fx.dir;

    const std::vector<float> mtp = whole.mtp_over_history(0);
    EXPECT_LE(test::max_abs_diff(mtp, read_floats(fx.refs + "/mtp_logits.npy")), kTolerance) << fx.dir;

    // Prefill [0, K) then one token at a time: rows K-1..T-1.
    SingleSequence inc(model, T);
    std::vector<float> rows = inc.feed(std::vector<int32_t>(ids.begin(), ids.begin() + K), false);
    for (int64_t t = K; t < T; ++t) {
        auto row = inc.feed({ids[size_t(t)]}, false);
        rows.insert(rows.end(), row.begin(), row.end());
    }
    EXPECT_LE(test::max_abs_diff(rows, read_floats(fx.refs + "/logits_incremental.npy")), kTolerance) << fx.dir;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, TransformersParity, ::testing::ValuesIn(fixtures()),
                         [](const ::testing::TestParamInfo<Fixture>& info) {
                             std::string name = fs::path(info.param.dir).filename().string();
                             for (char& c : name)
                                 if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                             return name;
                         });
