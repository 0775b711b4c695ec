// Runs the attention lab's correctness cases through the real kernel source (attention_*.cu
// and the launchers) in the host SIMT emulator (emu_prelude.h): no GPU needed, slow (tiny and
// mid-size cases only). Checks index arithmetic, fragment layouts, the cp.async pipeline, barriers
// and the launcher's host logic; says nothing about speed.
// Build and run (repo root; g++ only): sh bench/kernels/emu/run_emu.sh attention [seed] [--real]
// [--dec2] [--only TEXT] [--variant N] [--max-splits N] [--combine-check]
// (compiles every src/backend/cuda/attention_*.cu with this file into build-emu/attention_emu).
#include <chrono>
#include <string>

#include "attention_ref.h"

using namespace attn_lab;
using namespace qs::cuda;

namespace {

int g_decode_version = 1;  // --dec2: every case with GatedAttentionParams::decode_version 2
std::string g_only;        // --only TEXT: only the cases whose label contains TEXT
int g_variant = 0;         // --variant N: GatedAttentionParams::decode_v2_variant (D 256 only)
int g_max_splits = kAttentionMaxSplits;  // --max-splits N (1: no split-K, no workspace)
bool g_combine_check = false;  // --combine-check: combine_version 2 in the two runs, 1 in a third, bitwise

// The vision parity fixture's text attention (tests/data/vision_parity: 4 query and 2 KV heads of
// 32, rotary dim 8, mrope_section {2, 1, 1}) and its prompts' M-RoPE streams (positions.npy, as
// transformers' get_rope_index made them) with their rope deltas, for the bf16 multi-image
// question of docs/VISION.md.
const Shape kVisionFixture{"vision fixture D32 rot8", 4, 2, 32, 8, 16, 1e7, 1e-6f};
const int kTwoImages[3][27] = {
    {0, 1, 2, 3, 4, 4, 4, 4, 4, 4, 7, 8, 9, 10, 11, 12, 13, 13, 13, 13, 15, 16, 17, 18, 19, 20, 21},
    {0, 1, 2, 3, 4, 4, 4, 5, 5, 5, 7, 8, 9, 10, 11, 12, 13, 13, 14, 14, 15, 16, 17, 18, 19, 20, 21},
    {0, 1, 2, 3, 4, 5, 6, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 13, 14, 15, 16, 17, 18, 19, 20, 21}};
const int kThreeImages[3][42] = {
    {0,  1,  2,  3,  4,  5,  5,  5,  5,  5,  5,  8,  9,  10, 11, 12, 13, 13, 13, 13, 13,
     13, 13, 13, 17, 18, 19, 20, 21, 22, 23, 24, 24, 24, 24, 26, 27, 28, 29, 30, 31, 32},
    {0,  1,  2,  3,  4,  5,  5,  5,  6,  6,  6,  8,  9,  10, 11, 12, 13, 13, 14, 14, 15,
     15, 16, 16, 17, 18, 19, 20, 21, 22, 23, 24, 24, 25, 25, 26, 27, 28, 29, 30, 31, 32},
    {0,  1,  2,  3,  4,  5,  6,  7,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 13, 14, 13,
     14, 13, 14, 17, 18, 19, 20, 21, 22, 23, 24, 25, 24, 25, 26, 27, 28, 29, 30, 31, 32}};

// Sets the batch's streams from a prompt's (rows at positions p < len take streams[k][p], later
// ones p + delta in all three), as place_prompt_images does.
template <int N>
void set_prompt_streams(HostBatch& b, const int (&streams)[3][N], int delta) {
    b.rope.resize(size_t(3 * b.T));
    for (int k = 0; k < 3; ++k)
        for (int r = 0; r < b.T; ++r) {
            const int p = b.positions[size_t(r)];
            b.rope[size_t(k * b.T + r)] = p < N ? streams[k][p] : p + delta;
        }
    b.section[0] = 2;
    b.section[1] = 1;
    b.section[2] = 1;
}

// mrope: the batch gets random M-RoPE streams (set_mrope) with the section {2, 1, 1} scaled to
// the rotary half (every stream rotates some frequencies).
// prompt: instead, the streams of one of the fixture's prompts (0 none, 2 or 3 images).
// dec_rows: GatedAttentionParams::decode_max_rows (sequences of up to that many rows on the
// split-K decode kernel).
bool run_case(const char* label, const Shape& sh, DeviceKvDtype dt, const std::vector<SeqSpec>& specs,
              std::mt19937_64& rng, bool mrope = false, int prompt = 0, int dec_rows = 1) {
    if (!g_only.empty() && std::string(label).find(g_only) == std::string::npos) return true;
    Case c = make_case(sh, dt, specs, rng);
    if (mrope) {
        const int half = sh.rot / 2, section[3] = {half - 2 * (half / 4), half / 4, half / 4};
        set_mrope(c.b, section, rng);
    }
    if (prompt == 2) set_prompt_streams(c.b, kTwoImages, -5);
    if (prompt == 3) set_prompt_streams(c.b, kThreeImages, -9);
    const int T = c.b.T;
    struct Run {
        std::vector<uint8_t> k_raw, v_raw;
        std::vector<float> out;
        double secs;
        long switches;
    };
    Run runs[3];
    // lockstep + late cp.async, then greedy warps + early cp.async; with --combine-check a third run
    // (lockstep) with the split-K combine's version 1.
    const int modes = g_combine_check ? 3 : 2;
    for (int mode = 0; mode < modes; ++mode) {
        emu::g_mode = mode == 2 ? 0 : mode;
        Run& r = runs[mode];
        r.k_raw = c.k_raw0;
        r.v_raw = c.v_raw0;
        r.out.assign(size_t(T) * sh.Hq * sh.D, std::nanf(""));
        std::vector<uint8_t> ws(attention_workspace_bytes(T, sh.Hq, sh.D, g_max_splits), 0xff);
        GatedAttentionParams p = make_params(c);
        p.max_splits = g_max_splits;
        p.decode_max_rows = dec_rows;
        p.decode_version = g_decode_version;
        p.decode_v2_variant = g_variant;
        p.combine_version = mode == 2 ? 1 : 2;
        p.qg = c.qg.data();
        p.k = c.k.data();
        p.v = c.v.data();
        p.q_norm_w = c.qn.data();
        p.k_norm_w = c.kn.data();
        p.k_cache = r.k_raw.data();
        p.v_cache = r.v_raw.data();
        p.workspace = ws.empty() ? nullptr : ws.data();
        p.out = r.out.data();
        p.batch = batch_view(c.b, c.b.positions.data(), c.b.row_seq.data(), c.b.seqs.data(), c.b.block_tables.data(),
                             c.b.rope.empty() ? nullptr : c.b.rope.data());
        const auto t0 = std::chrono::steady_clock::now();
        const long sw0 = emu::g_switches;
        launch_gated_attention(p, nullptr);
        r.secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        r.switches = emu::g_switches - sw0;
    }
    reference(c);
    bool ok = true;
    for (int mode = 0; mode < 2; ++mode) {
        char how[64];
        std::snprintf(how, sizeof how, "emu %s %.1fs", mode ? "greedy" : "lockstep", runs[mode].secs);
        ok &= compare(c, label, how, runs[mode].out, runs[mode].k_raw, runs[mode].v_raw);
    }
    if (g_combine_check) {
        const bool same = std::memcmp(runs[0].out.data(), runs[2].out.data(), runs[0].out.size() * 4) == 0;
        std::printf("  %-44s combine v2 against v1: %s\n", label, same ? "bitwise PASS" : "DIFFERS FAIL");
        ok &= same;
    }
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    bool real = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--real") real = true;
        else if (std::string(argv[i]) == "--dec2") g_decode_version = 2;
        else if (std::string(argv[i]) == "--only" && i + 1 < argc) g_only = argv[++i];
        else if (std::string(argv[i]) == "--variant" && i + 1 < argc) g_variant = std::atoi(argv[++i]);
        else if (std::string(argv[i]) == "--max-splits" && i + 1 < argc) g_max_splits = std::atoi(argv[++i]);
        else if (std::string(argv[i]) == "--combine-check") g_combine_check = true;
        else seed = std::strtoull(argv[i], nullptr, 10);
    }
    std::printf("attention_emu seed %llu decode version %d\n", (unsigned long long)seed, g_decode_version);
    std::mt19937_64 rng(seed);
    bool all = true;
    for (DeviceKvDtype dt : {DeviceKvDtype::kBF16, DeviceKvDtype::kFP8E4M3}) {
        all &= run_case("tiny mixed", kTiny, dt, kMixed, rng);
        all &= run_case("tiny decode 12 (splits)", kTiny, dt, decode_specs(12, 0, 700, rng), rng);
        all &= run_case("tiny prefill 3 fresh (n=1,129,64)", kTiny, dt, {{0, 1}, {0, 129}, {0, 64}}, rng);
        all &= run_case(kGenA.name, kGenA, dt, {{70, 1}, {30, 17}, {0, 40}}, rng);
        all &= run_case(kGenB.name, kGenB, dt, {{70, 1}, {30, 17}, {0, 80}}, rng);
        all &= run_case(kGenC.name, kGenC, dt, {{70, 1}, {30, 5}, {0, 9}}, rng);
        all &= run_case(kGenD.name, kGenD, dt, {{40, 1}, {20, 9}, {0, 5}}, rng);
        for (const Shape* sh : {&kFbA, &kFbB, &kFbC, &kFbD})
            all &= run_case(sh->name, *sh, dt, {{300, 1}, {40, 70}, {0, 130}, {5, 1}}, rng);
        all &= run_case("fallback D16 decode 6", kFbA, dt, decode_specs(6, 0, 400, rng), rng);
        all &= run_case("fallback D48 prefill 2 fresh", kFbC, dt, {{0, 129}, {0, 2}}, rng);
        // M-RoPE (images): prefill, decode with splits and mixed batches, tensor-core and fallback.
        all &= run_case("mrope tiny mixed", kTiny, dt, kMixed, rng, true);
        all &= run_case("mrope gen D96 mixed", kGenA, dt, {{70, 1}, {30, 17}, {0, 40}}, rng, true);
        all &= run_case("mrope tiny decode 12 (splits)", kTiny, dt, decode_specs(12, 0, 700, rng), rng, true);
        all &= run_case("mrope fallback D16 rot16", kFbB, dt, {{300, 1}, {40, 70}, {0, 130}, {5, 1}}, rng, true);
        // The vision fixture's two- and three-image prompts: whole, chunked inside an image, and a
        // decode row at position + delta beside them.
        const Shape& vf = kVisionFixture;
        all &= run_case("fixture two images prefill 27", vf, dt, {{0, 27}}, rng, false, 2);
        all &= run_case("fixture two images chunk 5 + decode", vf, dt, {{5, 5}, {27, 1}, {30, 1}}, rng, false, 2);
        all &= run_case("fixture three images prefill 42", vf, dt, {{0, 42}}, rng, false, 3);
        all &= run_case("fixture three images chunks + decode", vf, dt, {{15, 12}, {30, 12}, {42, 1}}, rng, false, 3);
        // Small-T rows on the decode kernel (CudaOptions::attention_decode_rows; an MTP verify):
        // sequences of 2-4 rows with long contexts (splits, the last split holding only the
        // later rows' keys) beside single rows and a prefill chunk that stays on the prefill kernel.
        all &= run_case("tiny verify rows<=4 (decode kernel)", kTiny, dt,
                        {{700, 2}, {300, 1}, {511, 3}, {64, 4}, {100, 9}, {0, 2}}, rng, false, 0, 4);
        all &= run_case("tiny verify 2 rows x 5 (splits)", kTiny, dt, {{650, 2}, {17, 2}, {900, 2}, {1, 2}, {255, 2}},
                        rng, false, 0, 2);
        all &= run_case("gen D128 G32 verify 3 rows (head chunks)", kGenC, dt, {{300, 3}, {40, 1}, {90, 2}}, rng,
                        false, 0, 3);
        all &= run_case("mrope gen D96 verify rows", kGenA, dt, {{70, 2}, {30, 17}, {200, 4}}, rng, true, 0, 4);
        if (real) {
            all &= run_case("real verify 2 rows (decode kernel, splits)", kReal, dt, {{300, 2}, {45, 2}, {120, 1}},
                            rng, false, 0, 2);
            all &= run_case("real small mixed", kReal, dt, {{90, 1}, {40, 13}, {0, 20}}, rng);
            all &= run_case("real decode 3 (splits)", kReal, dt, decode_specs(3, 100, 400, rng), rng);
            all &= run_case("real prefill 70 + chunk (8 warps)", kReal, dt, {{0, 70}, {30, 66}, {50, 1}}, rng);
        }
    }
    std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
    return all ? 0 : 1;
}
