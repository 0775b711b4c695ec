// Sweep grid: knob names come from the serve options (unknown ones are rejected with the list),
// --grid specs and both grid-file forms parse to the same axes, the cartesian product is in
// odometer order with the serve arguments of each point, and serve arguments that would fight
// the grid are refused.
#include "bench/sweep_grid.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

namespace qs::bench {
namespace {

std::string tmp(const std::string& name) {
    return ::testing::TempDir() + "qs_sweep_grid_" + std::to_string(::getpid()) + "_" + name;
}

TEST(BenchSweepGrid, KnobsAreTheServeOptions) {
    for (const char* name :
         {"max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "num_speculative_tokens",
          "cache_memory_mb", "prefix_caching", "chunked_prefill"})
        EXPECT_TRUE(find_knob(name).is_ok()) << name;
    EXPECT_EQ(find_knob("max-num-seqs").value()->flag, "max-num-seqs");
    EXPECT_EQ(find_knob("enable_prefix_caching").value()->name, "prefix_caching");
    auto gpu = find_knob("tensor_parallel_size");
    ASSERT_FALSE(gpu.is_ok());
    EXPECT_NE(gpu.status().message().find("unknown knob 'tensor_parallel_size'"),
              std::string::npos);
    EXPECT_NE(gpu.status().message().find("max_num_seqs"), std::string::npos);  // the list
}

TEST(BenchSweepGrid, SpecsExpandToTheCartesianProduct) {
    Grid g;
    ASSERT_TRUE(add_grid_spec(g, "max_num_seqs=8,16").is_ok());
    ASSERT_TRUE(add_grid_spec(g, "kv_cache_dtype=bf16,fp8_e4m3").is_ok());
    ASSERT_TRUE(add_grid_spec(g, "prefix_caching=true,off").is_ok());
    EXPECT_EQ(g.num_points(), 8);
    auto pts = expand_grid(g);
    ASSERT_EQ(pts.size(), 8u);
    EXPECT_EQ(pts[0].label, "max_num_seqs=8,kv_cache_dtype=bf16,prefix_caching=on");
    EXPECT_EQ(pts[1].label, "max_num_seqs=8,kv_cache_dtype=bf16,prefix_caching=off");
    EXPECT_EQ(pts[2].label, "max_num_seqs=8,kv_cache_dtype=fp8_e4m3,prefix_caching=on");
    EXPECT_EQ(pts[7].label, "max_num_seqs=16,kv_cache_dtype=fp8_e4m3,prefix_caching=off");
    EXPECT_EQ(pts[0].serve_args,
              (std::vector<std::string>{"--max-num-seqs", "8", "--kv-cache-dtype", "bf16"}));
    EXPECT_EQ(pts[1].serve_args,
              (std::vector<std::string>{"--max-num-seqs", "8", "--kv-cache-dtype", "bf16",
                                        "--no-prefix-caching"}));
    ASSERT_EQ(pts[7].knobs.size(), 3u);
    EXPECT_EQ(pts[7].knobs[2], (std::pair<std::string, std::string>{"prefix_caching", "off"}));

    Grid empty;
    auto one = expand_grid(empty);
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].label, "default");
    EXPECT_TRUE(one[0].serve_args.empty());
}

TEST(BenchSweepGrid, BadSpecsAreErrors) {
    Grid g;
    EXPECT_FALSE(add_grid_spec(g, "max_num_seqs").is_ok());          // no '='
    EXPECT_FALSE(add_grid_spec(g, "max_num_seqs=").is_ok());         // empty value
    EXPECT_FALSE(add_grid_spec(g, "max_num_seqs=8,8").is_ok());      // repeated value
    EXPECT_FALSE(add_grid_spec(g, "prefix_caching=maybe").is_ok());  // not on/off
    EXPECT_FALSE(add_grid_spec(g, "tensor_parallel_size=0.9").is_ok());
    ASSERT_TRUE(add_grid_spec(g, "max_num_seqs=8").is_ok());
    auto twice = add_grid_spec(g, "max-num-seqs=16");
    ASSERT_FALSE(twice.is_ok());
    EXPECT_NE(twice.message().find("twice"), std::string::npos);
    // Values of valued knobs are not checked here: serve checks them (and the point fails).
    EXPECT_TRUE(add_grid_spec(g, "num_speculative_tokens=9").is_ok());
}

TEST(BenchSweepGrid, GridFilesJsonAndLines) {
    std::string js = tmp("g.json"), ln = tmp("g.txt");
    std::ofstream(js) << R"({"max_num_seqs": [8, 16], "prefix_caching": [true, false],
                            "kv_cache_dtype": "bf16"})";
    std::ofstream(ln) << "# the same grid\nmax_num_seqs = 8, 16\n\nprefix_caching = on, off  # x\n"
                         "kv_cache_dtype=bf16\n";
    Grid a, b;
    ASSERT_TRUE(read_grid_file(a, js).is_ok());
    ASSERT_TRUE(read_grid_file(b, ln).is_ok());
    auto pa = expand_grid(a), pb = expand_grid(b);
    ASSERT_EQ(pa.size(), 4u);
    ASSERT_EQ(pb.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(pa[i].label, pb[i].label);
    EXPECT_EQ(pa[3].label, "max_num_seqs=16,prefix_caching=off,kv_cache_dtype=bf16");

    std::ofstream(ln) << "max_num_seqs = 8\ntensor_parallel_size = 0.9, 0.95\n";
    Grid c;
    auto bad = read_grid_file(c, ln);
    ASSERT_FALSE(bad.is_ok());
    EXPECT_NE(bad.message().find(":2"), std::string::npos) << bad.message();  // names the line
    EXPECT_NE(bad.message().find("tensor_parallel_size"), std::string::npos);
    Grid d;
    EXPECT_FALSE(read_grid_file(d, tmp("missing")).is_ok());
    std::remove(js.c_str()), std::remove(ln.c_str());
}

TEST(BenchSweepGrid, ServeArgsMustNotFightTheGrid) {
    Grid g;
    ASSERT_TRUE(add_grid_spec(g, "max_num_seqs=8,16").is_ok());
    ASSERT_TRUE(add_grid_spec(g, "prefix_caching=on,off").is_ok());
    EXPECT_TRUE(check_serve_args(g, {"--fake-engine", "--max-num-batched-tokens", "512"}).is_ok());
    EXPECT_FALSE(check_serve_args(g, {"--max-num-seqs", "4"}).is_ok());
    EXPECT_FALSE(check_serve_args(g, {"--max-num-seqs=4"}).is_ok());
    EXPECT_FALSE(check_serve_args(g, {"--no-prefix-caching"}).is_ok());
    EXPECT_FALSE(check_serve_args(g, {"--port", "8000"}).is_ok());
    EXPECT_FALSE(check_serve_args(g, {"--model=x"}).is_ok());
}

}  // namespace
}  // namespace qs::bench
