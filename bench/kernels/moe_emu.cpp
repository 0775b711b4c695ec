// CPU emulation test of the MoE kernels: compiles the real kernel source
// (src/backend/cuda/moe_*.cu) as host C++ with the emulation shim (moe_emu_shim.h) and runs
// the five stages, with the launch plan built by the same host code as on the GPU, on the tiny
// model's shapes; compares y with the float64 reference (moe_ref.h). No GPU needed; slow (one OS
// thread per CUDA thread), so only small T. Build (from the repository root; ASan catches
// out-of-bounds accesses of the kernels, whose "device" buffers are host allocations):
//   g++ -O1 -g -std=c++20 -fsanitize=address -x c++ -Isrc -Ibench/kernels -I/usr/local/cuda/include \
//       bench/kernels/moe_emu.cpp -o build-gpu/moe_emu -lpthread
// Run: build-gpu/moe_emu [seed [--quick | --no-real | --small-real | --v2 [--no-real|--real|--bf16|--fp8] | --v2-quick |
//                             --dec2 [--no-real] | --down-global | --down-slots [--no-real|--one] | --prefetch-down [--no-real] | --int4 [--real] | --nvfp4 [--real|--quick] | --int4-dec [--real]]]
// (--no-real: skips the small-T path's real-shape cases, which take most of the time; --small-real:
// only those; --v2: the small-T path's version 2 only; --v2-quick: two of its cases, for mutations;
// --dec2: the decode grouped GEMMs' version 2 (MoeParams::decode_version), each case also run with v1
// and with its down GEMM launched with programmatic dependent launch (MoeParams::decode_pdl: bitwise);
// --down-global: the small-T down kernel reading h from global memory against staging it, bitwise;
// --down-slots: the small-T down + combine by expert slots (MoeParams::small_down_version 2) against
// version 1, bitwise (--int4 and --nvfp4 check their formats' slots kernel the same way in every
// small-T case);
// --small-eout16: the small-T path with MoeParams::decode_eout_bf16 (each expert's output rounded to bf16
// before the combine): down by token = by slots bitwise, y rounded, much closer to the grouped GEMMs'
// bf16-eout y than the fp32 run;
// --prefetch-down: gate_up's L2 prefetch of the down matrices (MoeParams::small_prefetch_down) against
// none, bitwise;
// --int4-dec: INT4 experts on the tensor-core grouped GEMMs, MoeParams::int4_grouped = 1, each case
// again with the down GEMM launched with programmatic dependent launch (bitwise) and with bf16 expert
// outputs (each the RN of the fp32 one; y within the bounds), as --dec2 checks them; then NVFP4
// experts (MoeExpertTable::nvfp4) on the same GEMMs;
// --nvfp4: NVFP4 experts on the small-T path, MoeExpertTable::nvfp4)
#include "moe_emu_shim.h"

#include "backend/cuda/moe_combine.cu"
#include "backend/cuda/moe_decode_gemm.cu"
#include "backend/cuda/moe_decode_gemm_int4.cu"
#include "backend/cuda/moe_gemm.cu"
#include "backend/cuda/moe_kernels.cu"
#include "backend/cuda/moe_route.cu"
#include "backend/cuda/moe_small.cu"
#include "backend/cuda/moe_small_down_slots.cu"
#include "backend/cuda/moe_small_int4.cu"
#include "backend/cuda/moe_small_int4_gate_up_mma.cu"
#include "backend/cuda/moe_small_route.cu"
#include "moe_int4_ref.h"
#include "moe_ref.h"

#include <chrono>
#include <string>

using namespace qs::cuda;
using namespace qs::cuda::moe;
using namespace moe_ref;

namespace {

void pdl_poison(std::vector<std::pair<void*, size_t>> regions);
void pdl_done();
// Decode v2's down launched with PDL (MoePlan::down_pdl): gate_up's h is garbage until the down
// grid's first griddep_wait.
void pdl_poison_h(const MoePlan& pl) {
    const size_t rows = size_t(pl.sort.T) * (pl.sort.k + 1);
    pdl_poison({{const_cast<__nv_bfloat16*>(pl.down.a), rows * size_t(pl.down.lda) * 2}});
}

template <class Cfg>
void emu_sort_gemms(const MoePlan& pl) {
    emu_launch(dim3(1), kSortThreads, 0, [&] { moe_sort_kernel<Cfg::BM>(pl.sort); });
    const int nthr = GemmShape<Cfg, false>::NTHR;
    if (pl.int4) {  // MoeParams::int4_grouped (moe_decode_gemm_int4.cu; cfg 1's plan)
        using S = Int4GemmShape;
        using w4::Code4;
        const bool nv = pl.gate_up.qglobal != nullptr;
        const int smem = nv ? S::SMEM_NVFP4 : S::SMEM;
        emu_launch(pl.gemm_up_grid, S::NTHR, smem, [&] {
            if (nv) moe_int4_gemm_kernel<true, Code4::kNvfp4>(pl.gate_up);
            else moe_int4_gemm_kernel<true, Code4::kInt4>(pl.gate_up);
        });
        if (pl.down_pdl) pdl_poison_h(pl);
        emu_launch(pl.gemm_down_grid, S::NTHR, smem, [&] {
            if (nv) moe_int4_gemm_kernel<false, Code4::kNvfp4>(pl.down);
            else moe_int4_gemm_kernel<false, Code4::kInt4>(pl.down);
        });
        if (pl.down_pdl) pdl_done();
        return;
    }
    if (pl.decode_v2) {  // MoeParams::decode_version 2 (moe_decode_gemm.cu; cfg 1's plan)
        if (pl.fp8) {
            emu_launch(pl.gemm_up_grid, nthr, GemmShape<Cfg, true>::SMEM, [&] { moe_decode_gemm_kernel<true, true>(pl.gate_up); });
            if (pl.down_pdl) pdl_poison_h(pl);
            emu_launch(pl.gemm_down_grid, nthr, GemmShape<Cfg, true>::SMEM, [&] { moe_decode_gemm_kernel<true, false>(pl.down); });
        } else {
            emu_launch(pl.gemm_up_grid, nthr, GemmShape<Cfg, false>::SMEM, [&] { moe_decode_gemm_kernel<false, true>(pl.gate_up); });
            if (pl.down_pdl) pdl_poison_h(pl);
            emu_launch(pl.gemm_down_grid, nthr, GemmShape<Cfg, false>::SMEM, [&] { moe_decode_gemm_kernel<false, false>(pl.down); });
        }
        if (pl.down_pdl) pdl_done();
        return;
    }
    if (pl.fp8) {
        emu_launch(pl.gemm_up_grid, nthr, GemmShape<Cfg, true>::SMEM, [&] { moe_gemm_kernel<Cfg, true, true>(pl.gate_up); });
        emu_launch(pl.gemm_down_grid, nthr, GemmShape<Cfg, true>::SMEM, [&] { moe_gemm_kernel<Cfg, true, false>(pl.down); });
    } else {
        emu_launch(pl.gemm_up_grid, nthr, GemmShape<Cfg, false>::SMEM, [&] { moe_gemm_kernel<Cfg, false, true>(pl.gate_up); });
        emu_launch(pl.gemm_down_grid, nthr, GemmShape<Cfg, false>::SMEM, [&] { moe_gemm_kernel<Cfg, false, false>(pl.down); });
    }
}

template <bool FP8, bool V2>
void emu_small_gate_up(const SmallPlan& pl) {
    const int nt = kSmallThreads;
    switch (pl.nmax) {
        case 1: emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { moe_small_gate_up_kernel<FP8, 1, V2>(pl.p); }); break;
        case 2: emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { moe_small_gate_up_kernel<FP8, 2, V2>(pl.p); }); break;
        case 4: emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { moe_small_gate_up_kernel<FP8, 4, V2>(pl.p); }); break;
        default: emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { moe_small_gate_up_kernel<FP8, 8, V2>(pl.p); }); break;
    }
}

template <int VPL>
void emu_small_router(const SmallPlan& pl) {
    const dim3 g(pl.router_blocks);
    const int nt = kSmallThreads;
    switch (pl.nmax) {
        case 1: emu_launch(g, nt, 0, [&] { moe_small_router_kernel<VPL, 1>(pl.p); }); break;
        case 2: emu_launch(g, nt, 0, [&] { moe_small_router_kernel<VPL, 2>(pl.p); }); break;
        case 4: emu_launch(g, nt, 0, [&] { moe_small_router_kernel<VPL, 4>(pl.p); }); break;
        default: emu_launch(g, nt, 0, [&] { moe_small_router_kernel<VPL, 8>(pl.p); }); break;
    }
}

template <int NMAX>
void emu_int4_gate_up(const SmallPlan& pl, bool v2) {
    using qs::cuda::w4::Code4;
    if (pl.nvfp4) v2 ? small_int4::gate_up_kernel<Code4::kNvfp4, NMAX, true>(pl.p)
                     : small_int4::gate_up_kernel<Code4::kNvfp4, NMAX, false>(pl.p);
    else if (v2) small_int4::gate_up_kernel<Code4::kInt4, NMAX, true>(pl.p);
    else small_int4::gate_up_kernel<Code4::kInt4, NMAX, false>(pl.p);
}

template <int KS>
void emu_int4_gate_up_mma(const SmallPlan& pl, bool v2) {
    using qs::cuda::w4::Code4;
    if (pl.nvfp4) v2 ? small_int4_mma::gate_up_mma_kernel<Code4::kNvfp4, KS, true>(pl.p)
                     : small_int4_mma::gate_up_mma_kernel<Code4::kNvfp4, KS, false>(pl.p);
    else if (v2) small_int4_mma::gate_up_mma_kernel<Code4::kInt4, KS, true>(pl.p);
    else small_int4_mma::gate_up_mma_kernel<Code4::kInt4, KS, false>(pl.p);
}

template <int CPL>
void emu_int4_down_slots(const SmallPlan& pl, bool v2) {
    using qs::cuda::w4::Code4;
    if (pl.nvfp4) v2 ? small_int4::down_slots_kernel<Code4::kNvfp4, CPL, true>(pl.p)
                     : small_int4::down_slots_kernel<Code4::kNvfp4, CPL, false>(pl.p);
    else if (v2) small_int4::down_slots_kernel<Code4::kInt4, CPL, true>(pl.p);
    else small_int4::down_slots_kernel<Code4::kInt4, CPL, false>(pl.p);
}

void emu_int4_down(const SmallPlan& pl, bool v2) {
    using qs::cuda::w4::Code4;
    if (pl.nvfp4) v2 ? small_int4::down_kernel<Code4::kNvfp4, true>(pl.p) : small_int4::down_kernel<Code4::kNvfp4, false>(pl.p);
    else if (v2) small_int4::down_kernel<Code4::kInt4, true>(pl.p);
    else small_int4::down_kernel<Code4::kInt4, false>(pl.p);
}

// Programmatic dependent launch, emulated adversarially: what the previous grid wrote is saved and
// overwritten with garbage before a v2 kernel launches, and put back at its first griddep_wait (by
// the first block that waits), so anything read before the wait reads garbage (ASan / wrong y).
struct EmuRegion {
    void* p;
    size_t bytes;
    std::vector<unsigned char> saved;
};
std::vector<EmuRegion> g_pdl_regions;
void pdl_restore() {
    for (EmuRegion& r : g_pdl_regions) std::memcpy(r.p, r.saved.data(), r.bytes);
    g_pdl_regions.clear();
}
void pdl_poison(std::vector<std::pair<void*, size_t>> regions) {
    g_pdl_regions.clear();
    for (auto [p, n] : regions) {
        EmuRegion r{p, n, std::vector<unsigned char>(static_cast<unsigned char*>(p), static_cast<unsigned char*>(p) + n)};
        std::memset(p, 0xC3, n);
        g_pdl_regions.push_back(std::move(r));
    }
    ptx::g_emu_griddep_hook = pdl_restore;
}
void pdl_done() {  // a grid in which no block waited: put the buffers back for the next one
    ptx::g_emu_griddep_hook = nullptr;
    pdl_restore();
}

bool g_down_h_global = false;  // --down-global: the down kernel reads h from global memory, not staged

// The small-T path (moe_small.cu, moe_small_route.cu): route + expert list (v2: with the router
// GEMV), gate_up, down + combine.
void emu_small(const MoeParams& p) {
    SmallPlan pl = make_small_plan(p);
    if (g_down_h_global) {  // the path of shapes whose k + 1 h rows exceed 48 KB (none of the real model's)
        pl.p.down_h_smem = 0;
        pl.down_smem = 0;
    }
    const int nt = kSmallThreads;
    const bool v2 = pl.version == 2;
    if (v2) {
        if (pl.zero_counter) *pl.p.counter = 0;  // the memset
        // The router's blocks count themselves to find the last one: odd T runs them last block first.
        g_emu_reverse_blocks = pl.p.T % 2 == 1;
        switch (pl.route_vpl) {
            case 1: emu_small_router<1>(pl); break;
            case 2: emu_small_router<2>(pl); break;
            case 4: emu_small_router<4>(pl); break;
            case 8: emu_small_router<8>(pl); break;
            default: emu_small_router<16>(pl); break;
        }
        g_emu_reverse_blocks = false;
    } else {
        switch (pl.route_vpl) {
            case 1: emu_launch(dim3(1), nt, 0, [&] { moe_small_route_kernel<1>(pl.p); }); break;
            case 2: emu_launch(dim3(1), nt, 0, [&] { moe_small_route_kernel<2>(pl.p); }); break;
            case 4: emu_launch(dim3(1), nt, 0, [&] { moe_small_route_kernel<4>(pl.p); }); break;
            case 8: emu_launch(dim3(1), nt, 0, [&] { moe_small_route_kernel<8>(pl.p); }); break;
            default: emu_launch(dim3(1), nt, 0, [&] { moe_small_route_kernel<16>(pl.p); }); break;
        }
    }
    const SmallParams& s = pl.p;
    const int T = s.T, k = s.k, E = s.E;
    const int max_slots = int(small_max_slots(T, E, k));
    if (v2) {  // gate_up may start before the router's writes land
        pdl_poison({{s.topk_id, size_t(T * k) * 4},
                    {s.topk_w, size_t(T * k) * 4},
                    {s.n_slots, size_t(small_plan_ints(T, E, k)) * 4},
                    {s.logits_out, size_t(T * E) * 4},
                    {s.sg_out, size_t(T) * 4}});
        (void)max_slots;
    }
    if (pl.int4) {  // moe_small_int4.cu (gate_up on tensor cores: moe_small_int4_gate_up_mma.cu)
        const int ks = (s.H / 128 + 7) / 8;
        if (pl.gate_up_mma && ks <= 1) emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { emu_int4_gate_up_mma<1>(pl, v2); });
        else if (pl.gate_up_mma && ks == 2) emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { emu_int4_gate_up_mma<2>(pl, v2); });
        else if (pl.gate_up_mma) emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { emu_int4_gate_up_mma<4>(pl, v2); });
        else switch (pl.nmax) {
            case 1: emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { emu_int4_gate_up<1>(pl, v2); }); break;
            case 2: emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { emu_int4_gate_up<2>(pl, v2); }); break;
            case 4: emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { emu_int4_gate_up<4>(pl, v2); }); break;
            default: emu_launch(pl.gate_up_grid, nt, pl.gate_up_smem, [&] { emu_int4_gate_up<8>(pl, v2); }); break;
        }
        if (v2) {
            pdl_done();
            pdl_poison({{s.h, size_t(T * (k + 1)) * size_t(s.ldh) * 2}});
        }
        if (pl.down_version == 2) {  // moe_small_int4.cu's down_slots_kernel
            const size_t b = size_t(s.down_slots.bytes);
            const bool c2 = s.down_slots.cpl == 2;
            emu_launch(pl.down_grid, nt, b, [&] { c2 ? emu_int4_down_slots<2>(pl, v2) : emu_int4_down_slots<1>(pl, v2); });
        } else {
            emu_launch(pl.down_grid, nt, 0, [&] { emu_int4_down(pl, v2); });
        }
        if (v2) pdl_done();
        return;
    }
    if (pl.fp8) v2 ? emu_small_gate_up<true, true>(pl) : emu_small_gate_up<true, false>(pl);
    else v2 ? emu_small_gate_up<false, true>(pl) : emu_small_gate_up<false, false>(pl);
    if (v2) {  // down may start before gate_up's h lands (the router's outputs are there by then)
        pdl_done();
        pdl_poison({{s.h, size_t(T * (k + 1)) * size_t(s.ldh) * 2}});
    }
    if (pl.down_version == 2) {  // moe_small_down_slots.cu
        const size_t b = size_t(s.down_slots.bytes);
        const bool c2 = s.down_slots.cpl == 2;
        if (pl.fp8 && v2) emu_launch(pl.down_grid, nt, b, [&] { c2 ? moe_small_down_slots_kernel<true, 2, true>(pl.p) : moe_small_down_slots_kernel<true, 1, true>(pl.p); });
        else if (pl.fp8) emu_launch(pl.down_grid, nt, b, [&] { c2 ? moe_small_down_slots_kernel<true, 2, false>(pl.p) : moe_small_down_slots_kernel<true, 1, false>(pl.p); });
        else if (v2) emu_launch(pl.down_grid, nt, b, [&] { c2 ? moe_small_down_slots_kernel<false, 2, true>(pl.p) : moe_small_down_slots_kernel<false, 1, true>(pl.p); });
        else emu_launch(pl.down_grid, nt, b, [&] { c2 ? moe_small_down_slots_kernel<false, 2, false>(pl.p) : moe_small_down_slots_kernel<false, 1, false>(pl.p); });
    } else if (pl.fp8) {
        if (v2) emu_launch(pl.down_grid, nt, pl.down_smem, [&] { moe_small_down_kernel<true, true>(pl.p); });
        else emu_launch(pl.down_grid, nt, pl.down_smem, [&] { moe_small_down_kernel<true, false>(pl.p); });
    } else {
        if (v2) emu_launch(pl.down_grid, nt, pl.down_smem, [&] { moe_small_down_kernel<false, true>(pl.p); });
        else emu_launch(pl.down_grid, nt, pl.down_smem, [&] { moe_small_down_kernel<false, false>(pl.p); });
    }
    if (v2) pdl_done();
}

void emu_moe(const MoeParams& p) {
    if (small_path_chosen(p)) {
        emu_small(p);
        return;
    }
    const MoePlan pl = make_plan(p);
    const int rt = kRouteWarps * 32;
    switch (pl.route_vpl) {
        case 1: emu_launch(pl.route_grid, rt, 0, [&] { moe_route_kernel<1>(pl.route); }); break;
        case 2: emu_launch(pl.route_grid, rt, 0, [&] { moe_route_kernel<2>(pl.route); }); break;
        case 4: emu_launch(pl.route_grid, rt, 0, [&] { moe_route_kernel<4>(pl.route); }); break;
        case 8: emu_launch(pl.route_grid, rt, 0, [&] { moe_route_kernel<8>(pl.route); }); break;
        default: emu_launch(pl.route_grid, rt, 0, [&] { moe_route_kernel<16>(pl.route); }); break;
    }
    if (pl.cfg == 0) emu_sort_gemms<CfgS16>(pl);
    else if (pl.cfg == 1) emu_sort_gemms<CfgS32>(pl);
    else if (pl.cfg == 2) emu_sort_gemms<CfgL128>(pl);
    else emu_sort_gemms<CfgS16N>(pl);
    emu_launch(pl.combine_grid, kCombineThreads, 0, [&] { pl.combine.eout16 ? moe_combine_kernel<true>(pl.combine) : moe_combine_kernel<false>(pl.combine); });
}

struct HostTable {
    std::vector<const void*> g, u, d;
    std::vector<const float*> gs, us, ds;
    MoeExpertTable table{};
};

HostTable host_table(const HostExperts& h, bool fp8) {
    HostTable t;
    const int n = h.s.E + 1;
    for (int e = 0; e < n; ++e) {
        if (fp8) {
            t.g.push_back(&h.qgate[h.gu_off[e]]);
            t.u.push_back(&h.qup[h.gu_off[e]]);
            t.d.push_back(&h.qdown[h.d_off[e]]);
            t.gs.push_back(&h.sgate[h.gus_off[e]]);
            t.us.push_back(&h.sup[h.gus_off[e]]);
            t.ds.push_back(&h.sdown[h.ds_off[e]]);
        } else {
            t.g.push_back(&h.gate[h.gu_off[e]]);
            t.u.push_back(&h.up[h.gu_off[e]]);
            t.d.push_back(&h.down[h.d_off[e]]);
        }
    }
    t.table.format = fp8 ? DeviceWeightFormat::kFP8Block : DeviceWeightFormat::kBF16;
    t.table.gate = t.g.data();
    t.table.up = t.u.data();
    t.table.down = t.d.data();
    t.table.gate_scale = fp8 ? t.gs.data() : nullptr;
    t.table.up_scale = fp8 ? t.us.data() : nullptr;
    t.table.down_scale = fp8 ? t.ds.data() : nullptr;
    t.table.E = h.s.E;
    t.table.H = h.s.H;
    t.table.I = h.s.I;
    t.table.I_shared = h.s.Is;
    return t;
}

const Int4Experts* g_int4 = nullptr;  // set: run_case's table gets these INT4 arrays (bf16 format)

int g_fail = 0;
int g_int4_grouped = 0;    // MoeParams::int4_grouped of every case (--int4-dec: 1)
int g_decode_version = 1;  // MoeParams::decode_version of every case (--dec2: 2, each also run with 1)
bool g_check_down_global = false;  // --down-global: each small-T case again with h read from global
bool g_check_down_slots = false;  // --down-slots: each small-T case again with MoeParams::small_down_version 2
bool g_check_small_eout16 = false;  // --small-eout16: each small-T case again with MoeParams::decode_eout_bf16
bool g_check_prefetch_down = false;  // --prefetch-down: each small-T case again with MoeParams::small_prefetch_down
bool g_check_gate_up_mma = false;  // --int4: each small-T case whose experts fit it again with the gate_up on tensor cores

// small: MoeParams::small_t (-1: chosen; with cfg >= 0 the grouped-GEMM path runs).
// version: MoeParams::small_version. Version 2 computes the router logits from router weights
// (make_router_weights: exact, or dense when dense_router), is run twice (the block counter must
// be back at 0: bitwise equal y), with the caller's counter (own_counter) or the workspace's, and,
// with exact router weights, must equal version 1 on the same logits bit for bit.
void run_case(const HostExperts& h, bool fp8, int T, Routing routing, bool norm, int cfg, Rng& rng, int small = -1,
              int version = 1, bool dense_router = false, bool own_counter = false) {
    const Shape& s = h.s;
    Inputs in = make_inputs(s, T, routing, rng);
    RouterWeights rw;
    if (version == 2) rw = make_router_weights(s, in, dense_router, rng);
    HostTable tab = host_table(h, fp8);
    if (g_int4) {
        tab.table.gate_q = g_int4->gq.data();
        tab.table.up_q = g_int4->uq.data();
        tab.table.down_q = g_int4->dq.data();
        tab.table.gate_qs = g_int4->gs.data();
        tab.table.up_qs = g_int4->us.data();
        tab.table.down_qs = g_int4->ds.data();
        tab.table.int4_group = g_int4->group;
        tab.table.nvfp4 = !g_int4->global.empty();
        tab.table.nvfp4_global = g_int4->global.empty() ? nullptr : g_int4->global.data();
    }
    const size_t wsb = ws_layout(T, s.H, s.I, s.Is, s.E, s.k).total;  // = moe_workspace_bytes
    // 256-aligned workspace, pre-filled with garbage.
    std::vector<unsigned char> ws_store(wsb + 256, 0xC3);
    void* ws = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(ws_store.data()) + 255) & ~uintptr_t(255));
    std::vector<float> x = in.x, y(size_t(T) * s.H, std::nanf(""));
    MoeParams p{};
    p.x = x.data();
    p.router_logits = in.logits.data();
    p.shared_gate_logit = in.sg.data();
    p.experts = tab.table;
    p.T = T;
    p.top_k = s.k;
    p.norm_topk_prob = norm;
    p.workspace = ws;
    p.y = y.data();
    p.tile_config = cfg;
    p.small_t = small;
    p.decode_version = g_decode_version;
    p.int4_grouped = g_int4_grouped;
    int counter = own_counter ? 0 : 0x5A5A5A5A;  // garbage when the workspace's is used
    std::vector<float> logits_copy, sg_copy;
    if (version == 2) {
        p.small_version = 2;
        p.router_weight = rw.w.data();
        p.shared_gate_weight = rw.sg.data();
        p.router_logits = nullptr;  // must not be read
        p.shared_gate_logit = nullptr;
        p.small_counter = own_counter ? &counter : nullptr;
    }
    const bool small_path = small_path_chosen(p);
    if (g_int4_grouped && !small_path && !int4_grouped_chosen(p)) {
        std::printf("  int4-dec case T=%d does not take the INT4 grouped path: FAIL\n", T);
        ++g_fail;
    }
    const auto t0 = std::chrono::steady_clock::now();
    emu_moe(p);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::string v2_note;
    bool v2_ok = true;
    std::vector<float> y16;  // --dec2, --small-eout16: y with the expert outputs in bf16 (MoeParams::decode_eout_bf16)
    if (version == 2) {
        // Again: the counter must have been left at 0 (same y); then version 1 on the same logits.
        const std::vector<float> y1 = y;
        std::fill(y.begin(), y.end(), std::nanf(""));
        emu_moe(p);
        const bool again = std::memcmp(y.data(), y1.data(), y.size() * 4) == 0 && (!own_counter || counter == 0);
        MoeParams q = p;
        q.small_version = 1;
        q.router_logits = in.logits.data();
        q.shared_gate_logit = in.sg.data();
        std::vector<float> yv1(y.size(), std::nanf(""));
        q.y = yv1.data();
        emu_moe(q);
        const bool same_as_v1 = std::memcmp(yv1.data(), y1.data(), y.size() * 4) == 0;
        v2_ok = again && (dense_router || same_as_v1);
        v2_note = std::string(" v2(") + (dense_router ? "dense" : "exact") + " router, " +
                  (own_counter ? "own" : "ws") + " counter): rerun " + (again ? "same" : "DIFFERS") + ", == v1 " +
                  (same_as_v1 ? "bitwise" : dense_router ? "no (logits differ in the last bits)" : "NO");
    }
    if (g_check_gate_up_mma && small_path && moe::small_int4_gate_up_mma_fits(p.experts)) {
        // The INT4 gate_up on tensor cores (MoeParams::small_int4_gate_up_version 2): the same
        // products summed in another fp32 order, so each h value is version 1's or one bf16 step
        // from it (a rounding boundary between the two sums), most of them equal; y close to
        // version 1's.
        const WsLayout L = ws_layout(T, s.H, s.I, s.Is, s.E, s.k);
        const int ldh = std::max(s.I, s.Is);
        const uint16_t* hp = reinterpret_cast<const uint16_t*>(static_cast<unsigned char*>(ws) + L.hbuf);
        const std::vector<uint16_t> h1(hp, hp + size_t(T) * (s.k + 1) * ldh);
        MoeParams q = p;
        q.small_int4_gate_up_version = 2;
        std::vector<float> ym(y.size(), std::nanf(""));
        q.y = ym.data();
        emu_moe(q);
        const bool taken = make_small_plan(q).gate_up_mma && moe_takes_small_int4_gate_up_mma(q);
        size_t n = 0, differ = 0, far = 0;
        for (int row = 0; row < T * (s.k + 1); ++row) {
            const int width = row < T * s.k ? s.I : s.Is;
            for (int c = 0; c < width; ++c) {
                const size_t i = size_t(row) * ldh + c;
                const int a = int16_t(h1[i]) < 0 ? -(h1[i] & 0x7FFF) : h1[i], b = int16_t(hp[i]) < 0 ? -(hp[i] & 0x7FFF) : hp[i];
                ++n;
                differ += a != b;
                far += std::abs(a - b) > 1;
            }
        }
        double dn = 0, dd = 0;
        for (size_t i = 0; i < y.size(); ++i) dn += (double(ym[i]) - y[i]) * (double(ym[i]) - y[i]), dd += double(y[i]) * y[i];
        const double rel = std::sqrt(dn / std::max(dd, 1e-300));
        const bool ok = taken && far == 0 && differ * 10 <= n && rel < 2e-3;
        v2_ok = v2_ok && ok;
        char b[160];
        std::snprintf(b, sizeof b, " gate_up mma: %s, h %zu of %zu one bf16 step off, %zu further; y %.2e from v1's%s",
                      taken ? "taken" : "NOT TAKEN", differ - far, n, far, rel, ok ? "" : " FAIL");
        v2_note += b;
    }
    if (g_check_down_global && small_path) {  // the same call with h read from global memory: same bits
        std::vector<float> yg(y.size(), std::nanf(""));
        MoeParams q = p;
        q.y = yg.data();
        g_down_h_global = true;
        emu_moe(q);
        g_down_h_global = false;
        const bool same = std::memcmp(yg.data(), y.data(), y.size() * 4) == 0;
        v2_ok = v2_ok && same;
        v2_note += std::string(" down h from global: ") + (same ? "bitwise" : "DIFFERS");
    }
    if (g_check_down_slots && small_path) {  // down + combine by slots: same bits as version 1
        std::vector<float> ys(y.size(), std::nanf(""));
        MoeParams q = p;
        q.y = ys.data();
        q.small_down_version = 2;
        emu_moe(q);
        const bool taken = make_small_plan(q).down_version == 2;
        const bool same = std::memcmp(ys.data(), y.data(), y.size() * 4) == 0;
        v2_ok = v2_ok && same && taken;
        double dmax = 0;
        size_t first = y.size();
        for (size_t i = 0; i < y.size(); ++i)
            if (ys[i] != y[i]) {
                dmax = std::max(dmax, std::fabs(double(ys[i]) - y[i]));
                if (first == y.size()) first = i;
            }
        char b[96];
        std::snprintf(b, sizeof b, " (max |diff| %.3e, first at %zu)", dmax, first);
        v2_note += std::string(" down by slots: ") + (!taken ? "NOT TAKEN" : same ? "bitwise" : std::string("DIFFERS") + b);
    }
    if (g_check_small_eout16 && small_path) {
        // decode_eout_bf16 on the small-T path: each expert's output rounded to bf16 before the
        // combine (expert_out). Down by token and by slots must agree bitwise; y must differ from the
        // fp32 run's; and it must sit much closer to the grouped GEMMs' y with bf16 eout (the same
        // rounding points, only the dots' summation order differs) than the fp32 run does.
        auto run_with = [&](MoeParams q, std::vector<float>& out) {
            out.assign(y.size(), std::nanf(""));
            q.y = out.data();
            emu_moe(q);
        };
        MoeParams q = p;
        q.decode_eout_bf16 = 1;
        q.small_down_version = 1;
        std::vector<float> ya, yb, yg;
        run_with(q, ya);
        MoeParams q2 = q;
        q2.small_down_version = 2;
        const bool slots = make_small_plan(q2).down_version == 2;
        if (slots) run_with(q2, yb);
        MoeParams q3 = q;  // the grouped GEMMs (decode v2, or INT4's) on the same inputs, bf16 eout
        q3.small_t = 0;
        q3.decode_version = 2;
        q3.int4_grouped = g_int4 != nullptr ? 1 : 0;
        q3.router_logits = in.logits.data();  // small-T version 2 computed them (exact router weights: the same)
        q3.shared_gate_logit = in.sg.data();
        const bool grouped = g_int4 == nullptr || int4_grouped_chosen(q3);
        if (grouped) run_with(q3, yg);
        auto rel = [&](const std::vector<float>& a, const std::vector<float>& b) {
            double n = 0, d = 0;
            for (size_t i = 0; i < a.size(); ++i) n += (double(a[i]) - b[i]) * (double(a[i]) - b[i]), d += double(b[i]) * b[i];
            return std::sqrt(n / std::max(d, 1e-300));
        };
        const bool rounded = std::memcmp(ya.data(), y.data(), y.size() * 4) != 0;
        const bool slots_same = !slots || std::memcmp(ya.data(), yb.data(), y.size() * 4) == 0;
        const double to_grouped = grouped ? rel(ya, yg) : 0, fp32_to_grouped = grouped ? rel(y, yg) : 0;
        const bool close = !grouped || to_grouped < 0.25 * fp32_to_grouped;
        v2_ok = v2_ok && rounded && slots_same && close;
        char b[160];
        std::snprintf(b, sizeof b, " eout bf16: %s, slots %s, to grouped %.2e (fp32 %.2e)%s", rounded ? "rounded" : "NOT ROUNDED",
                      !slots ? "n/a" : slots_same ? "bitwise" : "DIFFER", to_grouped, fp32_to_grouped, close ? "" : " NOT CLOSE");
        v2_note += b;
        y16 = ya;  // held to the reference bounds below, as the grouped path's bf16-eout y
    }
    if (g_check_prefetch_down && small_path) {  // gate_up's L2 prefetch of down: same bits (ASan checks its lines)
        std::vector<float> yp(y.size(), std::nanf(""));
        MoeParams q = p;
        q.y = yp.data();
        q.small_prefetch_down = 1;
        emu_moe(q);
        const bool same = std::memcmp(yp.data(), y.data(), y.size() * 4) == 0;
        v2_ok = v2_ok && same;
        v2_note += std::string(" prefetch down: ") + (same ? "bitwise" : "DIFFERS");
    }
    if (g_decode_version == 2) {  // decode v2 against v1 (moe_gemm.cu's cfg 1) on the same inputs
        MoeParams q = p;
        q.decode_version = 1;
        q.tile_config = 1;
        std::vector<float> yv1(y.size(), std::nanf(""));
        q.y = yv1.data();
        emu_moe(q);
        double dn = 0, dd = 0;
        for (size_t i = 0; i < y.size(); ++i) {
            dn += (double(y[i]) - yv1[i]) * (double(y[i]) - yv1[i]);
            dd += double(yv1[i]) * yv1[i];
        }
        char b[96];
        std::snprintf(b, sizeof b, " dec2 vs v1 cfg1: %s %.3e", std::memcmp(y.data(), yv1.data(), y.size() * 4) ? "differs" : "bitwise",
                      std::sqrt(dn / std::max(dd, 1e-300)));
        v2_note += b;
    }
    // Decode v2's and the INT4 grouped GEMMs' options (MoeParams::decode_pdl, decode_eout_bf16).
    if (g_decode_version == 2 || (g_int4_grouped && !small_path)) {
        char b[96];
        // Down launched with programmatic dependent launch (MoeParams::decode_pdl: h poisoned until
        // the first griddep_wait): the same bits.
        {
            MoeParams r = p;
            r.decode_pdl = 1;
            std::vector<float> ys(y.size(), std::nanf(""));
            r.y = ys.data();
            // With PDL, copies complete at issue: a copy deferred to its wait_group would land after
            // the griddep_wait that un-poisons h, hiding a read of h issued before it.
            const bool at_issue = g_emu_copy_at_issue;
            g_emu_copy_at_issue = true;
            emu_moe(r);
            g_emu_copy_at_issue = at_issue;
            const bool taken = make_plan(r).down_pdl;
            const bool same = std::memcmp(ys.data(), y.data(), y.size() * 4) == 0;
            v2_ok = v2_ok && same && taken;
            std::snprintf(b, sizeof b, " down with PDL: %s", !taken ? "NOT TAKEN" : same ? "bitwise" : "DIFFERS");
            v2_note += b;
        }
        // The expert outputs in bf16 (MoeParams::decode_eout_bf16): every eout value must be the
        // round-to-nearest-even of the fp32 path's (the run above left its eout in the workspace;
        // rounded here by bit arithmetic, not by the CUDA headers), and y is checked against the
        // reference below like the fp32 path's.
        {
            const WsLayout L = ws_layout(T, s.H, s.I, s.Is, s.E, s.k);
            const size_t n_eout = size_t(T) * (s.k + 1) * s.H;
            const float* e32p = reinterpret_cast<const float*>(static_cast<unsigned char*>(ws) + L.eout);
            const std::vector<float> e32(e32p, e32p + n_eout);
            MoeParams r = p;
            r.decode_eout_bf16 = 1;
            y16.assign(y.size(), std::nanf(""));
            r.y = y16.data();
            emu_moe(r);
            const uint16_t* e16 = reinterpret_cast<const uint16_t*>(e32p);
            size_t wrong = 0;
            for (size_t i = 0; i < n_eout; ++i) {
                uint32_t u;
                std::memcpy(&u, &e32[i], 4);
                const uint16_t rn = uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);  // finite values only
                wrong += e16[i] != rn;
            }
            const bool taken = make_plan(r).combine.eout16 != nullptr;
            v2_ok = v2_ok && taken && wrong == 0;
            std::snprintf(b, sizeof b, " eout bf16: %s, %zu of %zu values not RN(fp32)", taken ? "taken" : "NOT TAKEN",
                          wrong, n_eout);
            v2_note += b;
        }
    }
    double num = 0, den = 0, worst = 0, num16 = 0, worst16 = 0;
    size_t bad = 0;
    std::vector<double> ref;
    for (int t = 0; t < T; ++t) {
        moe_ref_token(h, fp8, norm, &in.x[size_t(t) * s.H], &in.logits[size_t(t) * s.E], in.sg[t], ref);
        double tn = 0, td = 0, tn16 = 0;
        for (int c = 0; c < s.H; ++c) {
            if (!y16.empty()) {
                const double d16 = double(y16[size_t(t) * s.H + c]) - ref[c];
                bad += !std::isfinite(y16[size_t(t) * s.H + c]);
                tn16 += d16 * d16;
            }
            const float v = y[size_t(t) * s.H + c];
            bad += !std::isfinite(v);
            const double d = double(v) - ref[c];
            tn += d * d;
            td += ref[c] * ref[c];
        }
        num += tn;
        den += td;
        num16 += tn16;
        worst = std::max(worst, std::sqrt(tn / std::max(td, 1e-300)));
        worst16 = std::max(worst16, std::sqrt(tn16 / std::max(td, 1e-300)));
    }
    const double nerr = std::sqrt(num / std::max(den, 1e-300));
    if (!y16.empty()) {  // the bf16-eout y: the same bounds
        const double nerr16 = std::sqrt(num16 / std::max(den, 1e-300));
        v2_ok = v2_ok && nerr16 < 1e-2 && worst16 < 3e-2;
        char b[96];
        std::snprintf(b, sizeof b, " (its nerr %.3e, worst_tok %.3e)", nerr16, worst16);
        v2_note += b;
    }
    uint64_t y_hash = 1469598103934665603ull;  // FNV-1a of y's bytes: refactors must keep it
    for (const float v : y) {
        uint32_t u;
        std::memcpy(&u, &v, 4);
        for (int i = 0; i < 4; ++i) y_hash = (y_hash ^ ((u >> (8 * i)) & 0xffu)) * 1099511628211ull;
    }
    const bool pass = bad == 0 && nerr < 1e-2 && worst < 3e-2 && v2_ok;
    std::printf("  %-5s %-4s T=%-4d %-7s norm=%d %s=%d copy@%s  nerr=%.3e worst_tok=%.3e nonfinite=%zu y#%016llx  %s  (%.1f s)%s\n",
                s.name, g_int4 ? (g_int4->global.empty() ? "int4" : "nvfp4") : fp8 ? "fp8" : "bf16", T, routing == Routing::kSkewed ? "skewed" : "gapped", int(norm), small_path ? "small" : "cfg", small_path ? 1 : cfg,
                g_emu_copy_at_issue ? "issue" : "wait", nerr, worst, bad, (unsigned long long)y_hash, pass ? "PASS" : "FAIL", secs,
                v2_note.c_str());
    if (!pass) ++g_fail;
}

}  // namespace

int main(int argc, char** argv) {
    const uint64_t seed = argc > 1 ? std::strtoull(argv[1], nullptr, 10)
                                   : uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::printf("moe_emu seed=%llu\n", (unsigned long long)seed);
    init_e4m3_lut();
    Rng rng(seed);
    const Shape tiny{"tiny", 16, 4, 256, 128, 128};
    const Shape tiny_is{"tinyS", 16, 4, 256, 128, 256};
    const HostExperts h = make_host_experts(tiny, seed + 1);
    const HostExperts hs = make_host_experts(tiny_is, seed + 2);
    const bool quick = argc > 2 && !std::strcmp(argv[2], "--quick");  // four small cases (mutation tests)
    const bool skip_real = argc > 2 && !std::strcmp(argv[2], "--no-real");  // tiny shapes only
    const bool real_only = argc > 2 && !std::strcmp(argv[2], "--small-real");  // the real-shape small-T cases only
    const bool v2_only = argc > 2 && !std::strcmp(argv[2], "--v2");  // the small-T path's version 2 only
    if (argc > 2 && !std::strcmp(argv[2], "--v2-quick")) {  // two small v2 cases (mutation tests)
        run_case(h, false, 1, Routing::kGapped, true, -1, rng, -1, 2, false, true);
        run_case(h, true, 2, Routing::kSkewed, true, -1, rng, -1, 2, false, false);
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (argc > 2 && !std::strcmp(argv[2], "--int4")) {
        // INT4 experts on the small-T path (moe_small_int4.cu), v1 and v2, every T bucket, skewed
        // routing, I_shared != I, group 32 and 64; argv[3] --real adds the real shapes (group 128).
        HostExperts hi = make_host_experts(tiny, seed + 1), hsi = make_host_experts(tiny_is, seed + 2);
        const Int4Experts qi = make_int4_experts(hi, 32, rng), qsi = make_int4_experts(hsi, 64, rng);
        g_int4 = &qi;
        g_check_down_slots = true;  // every small-T case again by slots (moe_small_int4.cu): y bitwise
        g_check_gate_up_mma = true;  // and, group 128, with the gate_up on tensor cores
        const bool mma_only = argc > 3 && !std::strcmp(argv[3], "--mma");  // the group-128 cases only
        if (!mma_only) {
            for (const int T : {1, 2, 3, 4, 8}) run_case(hi, false, T, Routing::kGapped, true, -1, rng, -1, T % 2 ? 1 : 2, false, true);
            run_case(hi, false, 8, Routing::kSkewed, true, -1, rng, -1, 2, false, false);
            run_case(hi, false, 6, Routing::kSkewed, false, -1, rng);
            g_int4 = &qsi;
            run_case(hsi, false, 5, Routing::kSkewed, false, -1, rng, -1, 2, false, false);
            run_case(hsi, false, 2, Routing::kGapped, true, -1, rng, 1);
        }
        // Group 128 (the gate_up on tensor cores fits): H 256 = two column groups, six warps idle.
        const Int4Experts qi128 = make_int4_experts(hi, 128, rng), qsi128 = make_int4_experts(hsi, 128, rng);
        g_int4 = &qi128;
        run_case(hi, false, 1, Routing::kGapped, true, -1, rng, -1, 2, false, true);
        run_case(hi, false, 3, Routing::kSkewed, false, -1, rng);
        run_case(hi, false, 8, Routing::kSkewed, true, -1, rng, -1, 2, false, false);
        g_int4 = &qsi128;
        run_case(hsi, false, 5, Routing::kSkewed, true, -1, rng, -1, 2, false, false);
        if (argc > 3 && !std::strcmp(argv[3], "--real")) {
            const Shape real{"real", 256, 8, 2048, 512, 512};
            HostExperts hr = make_host_experts(real, seed + 3);
            const Int4Experts qr = make_int4_experts(hr, 128, rng);
            g_int4 = &qr;
            run_case(hr, false, 1, Routing::kGapped, true, -1, rng, -1, 2, false, true);
            run_case(hr, false, 8, Routing::kSkewed, true, -1, rng);
        }
        g_int4 = nullptr;
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (argc > 2 && !std::strcmp(argv[2], "--nvfp4")) {
        // NVFP4 experts on the small-T path (moe_small_int4.cu's Code4::kNvfp4 kernels), v1 and v2,
        // every T bucket, skewed routing, I_shared != I; every matrix its own global (the index
        // 3e + {0, 1, 2} pinned down); argv[3] --real adds the real shapes.
        HostExperts hi = make_host_experts(tiny, seed + 1), hsi = make_host_experts(tiny_is, seed + 2);
        const Int4Experts qi = make_nvfp4_experts(hi, rng), qsi = make_nvfp4_experts(hsi, rng);
        g_int4 = &qi;
        g_check_down_slots = true;  // every small-T case again by slots (moe_small_int4.cu): y bitwise
        g_check_gate_up_mma = true;  // and with the gate_up on tensor cores (block scales folded into the codes)
        if (argc > 3 && !std::strcmp(argv[3], "--quick")) {  // two cases (mutation tests)
            run_case(hi, false, 3, Routing::kSkewed, true, -1, rng, -1, 1);
            run_case(hi, false, 2, Routing::kGapped, true, -1, rng, -1, 2, false, true);
            std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
            return g_fail ? 1 : 0;
        }
        for (const int T : {1, 2, 3, 4, 8}) run_case(hi, false, T, Routing::kGapped, true, -1, rng, -1, T % 2 ? 1 : 2, false, true);
        run_case(hi, false, 8, Routing::kSkewed, true, -1, rng, -1, 2, false, false);
        run_case(hi, false, 6, Routing::kSkewed, false, -1, rng);
        g_int4 = &qsi;
        run_case(hsi, false, 5, Routing::kSkewed, false, -1, rng, -1, 2, false, false);
        run_case(hsi, false, 2, Routing::kGapped, true, -1, rng, 1);
        if (argc > 3 && !std::strcmp(argv[3], "--real")) {
            const Shape real{"real", 256, 8, 2048, 512, 512};
            HostExperts hr = make_host_experts(real, seed + 3);
            const Int4Experts qr = make_nvfp4_experts(hr, rng);
            g_int4 = &qr;
            run_case(hr, false, 1, Routing::kGapped, true, -1, rng, -1, 2, false, true);
            run_case(hr, false, 8, Routing::kSkewed, true, -1, rng);
        }
        g_int4 = nullptr;
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (argc > 2 && !std::strcmp(argv[2], "--int4-dec")) {
        // INT4 experts on the tensor-core grouped GEMMs (moe_decode_gemm_int4.cu, MoeParams::
        // int4_grouped = 1) against the float64 reference of the same (exactly bf16) weights: 1..4
        // token groups per tile (T = 9: ~2 rows per expert; T = 40 skewed: experts past 32 rows take
        // two tiles, the shared expert 32 + 8), group 64 (two scale groups per 128-wide K block) and
        // 128, I_shared != I, I = 192 with I_shared = 64 (down K of one stage), norm off, cp.async
        // completing at issue. argv[3] --real adds the real shapes (group 128) at T = 40 skewed.
        g_int4_grouped = 1;
        const Shape odd{"tinyO", 16, 4, 256, 192, 64};
        HostExperts hi = make_host_experts(tiny, seed + 1), hsi = make_host_experts(tiny_is, seed + 2);
        HostExperts ho = make_host_experts(odd, seed + 4);
        const Int4Experts qi = make_int4_experts(hi, 64, rng), qsi = make_int4_experts(hsi, 128, rng);
        const Int4Experts qo = make_int4_experts(ho, 64, rng);
        g_int4 = &qi;
        run_case(hi, false, 9, Routing::kGapped, true, -1, rng);
        run_case(hi, false, 40, Routing::kSkewed, true, -1, rng);
        g_int4 = &qsi;
        g_emu_copy_at_issue = true;
        run_case(hsi, false, 40, Routing::kSkewed, true, -1, rng);
        g_emu_copy_at_issue = false;
        run_case(hsi, false, 12, Routing::kGapped, false, -1, rng);
        g_int4 = &qo;
        run_case(ho, false, 24, Routing::kSkewed, false, -1, rng);
        // NVFP4 experts on the same kernels (block scales folded into the codes, one accumulator,
        // the global once): 1..4 token groups, I_shared != I, I = 192 with I_shared = 64, cp.async
        // completing at issue.
        HostExperts hn = make_host_experts(tiny, seed + 5), hsn = make_host_experts(tiny_is, seed + 6);
        HostExperts hon = make_host_experts(odd, seed + 7);
        const Int4Experts qn = make_nvfp4_experts(hn, rng), qsn = make_nvfp4_experts(hsn, rng);
        const Int4Experts qon = make_nvfp4_experts(hon, rng);
        g_int4 = &qn;
        run_case(hn, false, 9, Routing::kGapped, true, -1, rng);
        run_case(hn, false, 40, Routing::kSkewed, true, -1, rng);
        g_int4 = &qsn;
        g_emu_copy_at_issue = true;
        run_case(hsn, false, 40, Routing::kSkewed, true, -1, rng);
        g_emu_copy_at_issue = false;
        g_int4 = &qon;
        run_case(hon, false, 24, Routing::kSkewed, false, -1, rng);
        if (argc > 3 && !std::strcmp(argv[3], "--real")) {
            const Shape real{"real", 256, 8, 2048, 512, 512};
            HostExperts hr = make_host_experts(real, seed + 3);
            const Int4Experts qr = make_int4_experts(hr, 128, rng);
            g_int4 = &qr;
            run_case(hr, false, 40, Routing::kSkewed, true, -1, rng);
            HostExperts hrn = make_host_experts(real, seed + 8);
            const Int4Experts qrn = make_nvfp4_experts(hrn, rng);
            g_int4 = &qrn;
            run_case(hrn, false, 40, Routing::kSkewed, true, -1, rng);
        }
        g_int4 = nullptr;
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (argc > 2 && !std::strcmp(argv[2], "--down-global")) {
        // The small-T down kernel's unstaged path (SmallParams::down_h_smem = 0: h rows read from
        // global memory, taken only when a token's k + 1 h rows exceed 48 KB) against the staged
        // path on the same inputs, bitwise: v1 and v2, both formats, T = 1, 3 and 8, I_shared != I.
        g_check_down_global = true;
        for (int fp8 = 0; fp8 <= 1; ++fp8) {
            run_case(h, fp8, 1, Routing::kGapped, true, -1, rng);
            run_case(h, fp8, 3, Routing::kSkewed, true, -1, rng, -1, 2, false, true);
            run_case(hs, fp8, 8, Routing::kSkewed, false, -1, rng, -1, 2, false, false);
        }
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (argc > 2 && !std::strcmp(argv[2], "--small-eout16")) {
        // MoeParams::decode_eout_bf16 on the small-T path (expert_out): FP8 and BF16 with v1 and v2
        // routing at T = 1, 2, 3, 8, I_shared != I, norm off; INT4 (group 64) at T = 2 and 5; the real
        // shapes at T = 2 (argv[3] --no-real skips them).
        g_check_small_eout16 = true;
        for (int fp8 = 0; fp8 <= 1; ++fp8) {
            run_case(h, fp8, 1, Routing::kGapped, true, -1, rng);
            run_case(h, fp8, 2, Routing::kGapped, true, -1, rng, -1, 2, false, true);
            run_case(h, fp8, 3, Routing::kSkewed, true, -1, rng);
            run_case(hs, fp8, 8, Routing::kSkewed, false, -1, rng, -1, 2, false, false);
        }
        {
            HostExperts hsi = make_host_experts(tiny_is, seed + 2);
            const Int4Experts qsi = make_int4_experts(hsi, 64, rng);
            g_int4 = &qsi;
            run_case(hsi, false, 2, Routing::kGapped, true, -1, rng);
            run_case(hsi, false, 5, Routing::kSkewed, false, -1, rng, -1, 2, false, false);
            g_int4 = nullptr;
        }
        if (!(argc > 3 && !std::strcmp(argv[3], "--no-real"))) {
            const Shape real{"real", 256, 8, 2048, 512, 512};
            const HostExperts hr = make_host_experts(real, seed + 3);
            for (int fp8 = 0; fp8 <= 1; ++fp8) run_case(hr, fp8, 2, Routing::kGapped, true, -1, rng, -1, 2, false, true);
        }
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (argc > 2 && !std::strcmp(argv[2], "--down-slots")) {
        // MoeParams::small_down_version 2 (moe_small_down_slots.cu) against version 1, bitwise: v1 and
        // v2 routing, both formats, every T bucket, skewed routing (slots of several tokens),
        // I_shared != I, norm off; then the real shapes at T = 1 and 2 (argv[3] --no-real skips them;
        // --one: tiny T = 1 of each format and the real shapes, for mutations).
        g_check_down_slots = true;
        for (int fp8 = 0; fp8 <= 1; ++fp8) {
            run_case(h, fp8, 1, Routing::kGapped, true, -1, rng);
            if (argc > 3 && !std::strcmp(argv[3], "--one")) break;
            run_case(h, fp8, 2, Routing::kGapped, true, -1, rng);
            run_case(h, fp8, 3, Routing::kSkewed, true, -1, rng, -1, 2, false, true);
            run_case(h, fp8, 4, Routing::kSkewed, true, -1, rng);
            run_case(hs, fp8, 8, Routing::kSkewed, false, -1, rng, -1, 2, false, false);
            run_case(hs, fp8, 5, Routing::kGapped, true, -1, rng);
        }
        if (!(argc > 3 && !std::strcmp(argv[3], "--no-real"))) {
            const Shape real{"real", 256, 8, 2048, 512, 512};
            const HostExperts hr = make_host_experts(real, seed + 3);
            for (int fp8 = 0; fp8 <= 1; ++fp8) {
                run_case(hr, fp8, 2, Routing::kGapped, true, -1, rng);
                run_case(hr, fp8, 1, Routing::kGapped, true, -1, rng, -1, 2, false, true);
            }
        }
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (argc > 2 && !std::strcmp(argv[2], "--prefetch-down")) {
        // MoeParams::small_prefetch_down (gate_up's blocks prefetch the down matrices into L2) against
        // none, bitwise: v1 and v2, both formats, T = 1, 3 and 8, I_shared != I; then the real shapes
        // at T = 1 (each prefetched line is touched: AddressSanitizer checks the addresses).
        g_check_prefetch_down = true;
        for (int fp8 = 0; fp8 <= 1; ++fp8) {
            run_case(h, fp8, 1, Routing::kGapped, true, -1, rng);
            run_case(h, fp8, 3, Routing::kSkewed, true, -1, rng, -1, 2, false, true);
            run_case(hs, fp8, 8, Routing::kSkewed, false, -1, rng, -1, 2, false, false);
        }
        if (!(argc > 3 && !std::strcmp(argv[3], "--no-real"))) {
            const Shape real{"real", 256, 8, 2048, 512, 512};
            const HostExperts hr = make_host_experts(real, seed + 3);
            for (int fp8 = 0; fp8 <= 1; ++fp8) run_case(hr, fp8, 1, Routing::kGapped, true, -1, rng, -1, 2, false, true);
        }
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (v2_only) {
        // Both formats, every T bucket, exact router weights (gaps and exact ties: == v1 bitwise),
        // dense ones, skewed routing (multi-token slots), I_shared != I, both counters; then the
        // real shapes at T = 1 and 8.
        // argv[3]: --no-real (tiny shapes only), --real (real shapes only), --bf16 / --fp8 (tiny, one format)
        const char* sel = argc > 3 ? argv[3] : "";
        for (int fp8 = 0; fp8 <= 1 && std::strcmp(sel, "--real"); ++fp8) {
            if ((!std::strcmp(sel, "--bf16") && fp8) || (!std::strcmp(sel, "--fp8") && !fp8)) continue;
            for (const int T : {1, 2, 3, 4, 8}) run_case(h, fp8, T, Routing::kGapped, true, -1, rng, -1, 2, false, T % 2 == 1);
            run_case(h, fp8, 8, Routing::kSkewed, true, -1, rng, -1, 2, false, true);
            run_case(h, fp8, 4, Routing::kNormal, true, -1, rng, -1, 2, true, false);
            run_case(hs, fp8, 5, Routing::kSkewed, false, -1, rng, -1, 2, false, false);
            run_case(hs, fp8, 2, Routing::kGapped, true, -1, rng, 1, 2, true, true);
        }
        if (!*sel || !std::strcmp(sel, "--real")) {
            const Shape real{"real", 256, 8, 2048, 512, 512};
            const HostExperts hr = make_host_experts(real, seed + 3);
            for (int fp8 = 0; fp8 <= 1; ++fp8) {
                run_case(hr, fp8, 1, Routing::kGapped, true, -1, rng, -1, 2, false, true);
                run_case(hr, fp8, 8, Routing::kSkewed, true, -1, rng, -1, 2, false, false);
            }
        }
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (argc > 2 && !std::strcmp(argv[2], "--dec2")) {
        // Decode v2 (moe_decode_gemm.cu): both formats; 1..4 token groups per tile (T = 7: ~2 rows
        // per expert; T = 40 skewed: experts past 32 rows take two tiles, the shared expert 32 + 8);
        // I_shared != I; I = 192 with I_shared = 64 (K blocks of one 64-wide stage in down, and a
        // second 128-row scale block in gate_up); norm off; cp.async completing at issue. The real
        // shapes at T = 9 and 40 (argv[3] --no-real skips them).
        g_decode_version = 2;
        const Shape odd{"tinyO", 16, 4, 256, 192, 64};
        const HostExperts ho = make_host_experts(odd, seed + 4);
        for (int fp8 = 0; fp8 <= 1; ++fp8) {
            run_case(h, fp8, 7, Routing::kGapped, true, -1, rng, 0);
            run_case(h, fp8, 40, Routing::kSkewed, true, -1, rng, 0);
            g_emu_copy_at_issue = true;
            run_case(hs, fp8, 40, Routing::kSkewed, true, -1, rng, 0);
            g_emu_copy_at_issue = false;
            run_case(ho, fp8, 24, Routing::kSkewed, false, -1, rng, 0);
            run_case(ho, fp8, 9, Routing::kGapped, true, -1, rng, 0);
        }
        if (!(argc > 3 && !std::strcmp(argv[3], "--no-real"))) {
            const Shape real{"real", 256, 8, 2048, 512, 512};
            const HostExperts hr = make_host_experts(real, seed + 3);
            for (int fp8 = 1; fp8 >= 0; --fp8) run_case(hr, fp8, 40, Routing::kSkewed, true, -1, rng, 0);
        }
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    if (quick) {
        run_case(h, false, 7, Routing::kGapped, true, 0, rng);
        run_case(h, true, 7, Routing::kGapped, true, 0, rng);
        run_case(h, false, 4, Routing::kGapped, true, -1, rng);  // the small-T path
        run_case(h, true, 4, Routing::kSkewed, true, -1, rng);
        run_case(h, false, 3, Routing::kGapped, true, -1, rng, -1, 2, false, true);  // version 2
        run_case(h, true, 4, Routing::kSkewed, true, -1, rng, -1, 2, false, false);
        std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
        return g_fail ? 1 : 0;
    }
    for (int fp8 = 0; fp8 <= 1 && !real_only; ++fp8) {
        for (int cfg = 0; cfg <= 3; ++cfg) {
            g_emu_copy_at_issue = cfg == 1;
            run_case(h, fp8, 7, Routing::kGapped, true, cfg, rng);
        }
        g_emu_copy_at_issue = false;
        run_case(h, fp8, 1, Routing::kGapped, true, 3, rng);
        run_case(h, fp8, 5, Routing::kGapped, false, 1, rng);
        run_case(hs, fp8, 6, Routing::kGapped, true, 2, rng);
        run_case(hs, fp8, 40, Routing::kSkewed, true, 0, rng);
        run_case(hs, fp8, 9, Routing::kSkewed, true, 3, rng);
        run_case(h, fp8, 40, Routing::kSkewed, true, 2, rng);
    }
    // The small-T path (moe_small.cu; chosen at T <= kMoeSmallTMax when cfg is left at -1): every
    // T bucket, both formats, gapped (with exact ties) and skewed routing (tokens sharing experts),
    // I_shared != I, norm off; then the real model's shapes (E = 256, k = 8, H = 2048, I = 512).
    for (int fp8 = 0; fp8 <= 1 && !real_only; ++fp8) {
        for (const int T : {1, 2, 3, 4, 8}) run_case(h, fp8, T, Routing::kGapped, true, -1, rng);
        run_case(h, fp8, 8, Routing::kSkewed, true, -1, rng);
        run_case(hs, fp8, 5, Routing::kSkewed, false, -1, rng);
        run_case(hs, fp8, 2, Routing::kGapped, true, -1, rng, 1);
    }
    if (!skip_real) {
        const Shape real{"real", 256, 8, 2048, 512, 512};
        const HostExperts hr = make_host_experts(real, seed + 3);
        for (int fp8 = 0; fp8 <= 1; ++fp8) {
            run_case(hr, fp8, 1, Routing::kGapped, true, -1, rng);
            run_case(hr, fp8, 8, Routing::kSkewed, true, -1, rng);
        }
    }
    std::printf("%s (%d failing)\n", g_fail ? "FAIL" : "PASS", g_fail);
    return g_fail ? 1 : 0;
}
