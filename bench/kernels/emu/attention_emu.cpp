// Runs the attention lab's correctness cases through the real kernel source (attention_*.cu
// and the launchers) in the host SIMT emulator (emu_prelude.h): no GPU needed, slow (tiny and
// mid-size cases only). Checks index arithmetic, fragment layouts, the cp.async pipeline, barriers
// and the launcher's host logic; says nothing about speed.
// Build and run (repo root; g++ only): sh bench/kernels/emu/run_emu.sh attention [seed] [--real]
// (compiles every src/backend/cuda/attention_*.cu with this file into build-emu/attention_emu).
#include <chrono>
#include <string>

#include "attention_ref.h"

using namespace attn_lab;
using namespace qs::cuda;

namespace {

// mrope: the batch gets random M-RoPE streams (set_mrope) with the section {2, 1, 1} scaled to
// the rotary half (every stream rotates some frequencies).
bool run_case(const char* label, const Shape& sh, DeviceKvDtype dt, const std::vector<SeqSpec>& specs,
              std::mt19937_64& rng, bool mrope = false) {
    Case c = make_case(sh, dt, specs, rng);
    if (mrope) {
        const int half = sh.rot / 2, section[3] = {half - 2 * (half / 4), half / 4, half / 4};
        set_mrope(c.b, section, rng);
    }
    const int T = c.b.T;
    struct Run {
        std::vector<uint8_t> k_raw, v_raw;
        std::vector<float> out;
        double secs;
        long switches;
    };
    Run runs[2];
    for (int mode = 0; mode < 2; ++mode) {  // lockstep + late cp.async, then greedy warps + early cp.async
        emu::g_mode = mode;
        Run& r = runs[mode];
        r.k_raw = c.k_raw0;
        r.v_raw = c.v_raw0;
        r.out.assign(size_t(T) * sh.Hq * sh.D, std::nanf(""));
        std::vector<uint8_t> ws(attention_workspace_bytes(T, sh.Hq, sh.D, kAttentionMaxSplits), 0xff);
        GatedAttentionParams p = make_params(c);
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
    return ok;
}

}  // namespace

int main(int argc, char** argv) {
    uint64_t seed = uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    bool real = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--real") real = true;
        else seed = std::strtoull(argv[i], nullptr, 10);
    }
    std::printf("attention_emu seed %llu\n", (unsigned long long)seed);
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
        if (real) {
            all &= run_case("real small mixed", kReal, dt, {{90, 1}, {40, 13}, {0, 20}}, rng);
            all &= run_case("real decode 3 (splits)", kReal, dt, decode_specs(3, 100, 400, rng), rng);
            all &= run_case("real prefill 70 + chunk (8 warps)", kReal, dt, {{0, 70}, {30, 66}, {50, 1}}, rng);
        }
    }
    std::printf("%s\n", all ? "ALL PASS" : "SOME FAILED");
    return all ? 0 : 1;
}
