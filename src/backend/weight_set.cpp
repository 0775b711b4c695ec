// WeightSet (see weight_set.h).
#include "backend/weight_set.h"

namespace qs {

void WeightSet::add_table(WeightBuffer& table) {
    table.handle.index = num_tables_++;
    entries_.emplace_back(&table);
}

void WeightSet::add_vector(ParamVector& v) {
    number(v);
    entries_.emplace_back(&v);
}

void WeightSet::add_linear(LinearWeight& w) {
    number(w);
    entries_.emplace_back(&w);
}

void WeightSet::add_gdn(GdnWeights& g) {
    for (LinearWeight* l : {&g.in_proj_qkv, &g.in_proj_z, &g.in_proj_b, &g.in_proj_a, &g.out_proj}) number(*l);
    for (ParamVector* v : {&g.conv1d, &g.A_log, &g.dt_bias, &g.norm}) number(*v);
    entries_.emplace_back(&g);
}

void WeightSet::add_moe(MoeWeights& m) {
    number(m.router);
    number(m.shared_expert_gate);
    m.experts_handle.index = num_expert_tables_++;
    entries_.emplace_back(&m);
}

}  // namespace qs
