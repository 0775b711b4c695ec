// The trained test model (models/qwen36-tiny, made by tools/train_tiny_model.py): the CPU backend
// reproduces the logits and MTP draft logits transformers computed for it (ref_*.npy, float32 on
// the saved bf16 weights).
#include <gtest/gtest.h>

#include <filesystem>

#include "backend/cpu/cpu_ops.h"
#include "io/npy.h"
#include "model/single_sequence.h"
#include "test_util.h"

using namespace qs;

TEST(TrainedModel, MatchesTransformersLogitsAndMtp) {
    const std::string dir = test::source_path("models/qwen36-tiny");
    auto w = load_model_dir(dir);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    ASSERT_TRUE(w->mtp.present);
    auto ids64 = read_npy_int(dir + "/ref_ids.npy");
    ASSERT_TRUE(ids64.is_ok()) << ids64.status().message();
    const std::vector<int32_t> ids(ids64->data.begin(), ids64->data.end());
    auto ref = read_npy_float(dir + "/ref_logits.npy");
    auto ref_mtp = read_npy_float(dir + "/ref_mtp_logits.npy");
    ASSERT_TRUE(ref.is_ok() && ref_mtp.is_ok());

    CpuOps ops;
    Qwen36Model model(*w, ops);
    SingleSequence seq(model, int64_t(ids.size()));
    const std::vector<float> logits = seq.feed(ids, /*all_rows=*/true);
    EXPECT_LE(test::max_abs_diff(logits, ref->data), 1e-3f);
    EXPECT_LE(test::max_abs_diff(seq.mtp_over_history(0), ref_mtp->data), 1e-3f);
}
