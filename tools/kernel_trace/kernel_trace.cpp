// A CUDA injection library: the GPU start and end of every kernel, one row per kernel node inside
// CUDA-graph replays too, from CUPTI's activity API, written as CSV when the program exits. It
// stands in for Nsight Systems on the GPU machine, where nsys cannot make a report but CUPTI works
// (tools/README.md "kernel_trace"; scripts/gpu_run.sh stage trace_step).
//
// The CUDA driver loads it in cuInit when CUDA_INJECTION64_PATH names it: the traced program is not
// changed or relinked. Environment:
//   QS_KERNEL_TRACE_OUT    the CSV path (default kernel_trace.csv)
//   QS_KERNEL_TRACE_RANGE  `profiler`: write only the kernels that start inside a window opened by
//                          cudaProfilerStart and closed by cudaProfilerStop; column `range` numbers
//                          the windows from 1. Otherwise every kernel is written, with range 0.
//   QS_KERNEL_TRACE_NAMES  `full`: the demangled name; otherwise the short one (no namespace,
//                          template arguments or parameters: the names tools/ncu_summary.py shows)
// Columns: start_ns,end_ns,correlation_id,graph_id,graph_node_id,stream_id,grid_x,grid_y,grid_z,
// block_x,range,kernel (times in CUPTI's clock, ns; graph_id 0 for a kernel launched outside a
// graph). Memory copies and fills get rows too, named [memcpy] and [memset], grid and block 0.
//
// Threads: CUPTI hands back activity buffers on its own threads and calls the profiler callbacks on
// the program's; one mutex guards the state. A CUPTI error is printed and tracing goes on with what
// works: the traced program must never fail because of the tracer.
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr size_t kBufferBytes = size_t(8) << 20;
constexpr size_t kBufferAlign = 8;  // CUPTI's requirement for activity buffers
constexpr uint64_t kOpen = std::numeric_limits<uint64_t>::max();

struct Row {
    uint64_t start_ns, end_ns, graph_node_id;
    uint32_t correlation_id, graph_id, stream_id, name;  // name: index into State::names
    int32_t grid_x, grid_y, grid_z, block_x;
};

// [open_ns, close_ns) of one cudaProfilerStart/Stop pair; close_ns is kOpen while it lasts.
struct Window {
    uint64_t open_ns, close_ns;
};

struct State {
    std::mutex mu;
    std::vector<Row> rows;
    std::vector<std::string> names;
    // CUPTI shares one name pointer among all the records of a kernel.
    std::unordered_map<const char*, uint32_t> name_index;
    std::vector<Window> windows;
    size_t dropped = 0, untimed = 0;
    bool range_mode = false, full_names = false;
    std::string out_path;
};

// Never destroyed: the exit handler may run after this library's static destructors.
State& state() {
    static State* s = new State;
    return *s;
}

bool ok(CUptiResult r, const char* what) {
    if (r == CUPTI_SUCCESS) return true;
    const char* msg = nullptr;
    if (cuptiGetResultString(r, &msg) != CUPTI_SUCCESS || msg == nullptr)
        msg = "unknown CUPTI error";
    std::fprintf(stderr, "kernel_trace: %s: %s\n", what, msg);
    return false;
}

// "void qs::cuda::(anonymous namespace)::gemv<128, __nv_bfloat16>(const __nv_bfloat16*, int)" ->
// "gemv", as tools/ncu_summary.py's short_name.
std::string short_name(const std::string& full) {
    std::string s;
    int depth = 0;
    for (char c : full) {
        if (c == '<' || c == '(') {
            ++depth;
        } else if (c == '>' || c == ')') {
            --depth;
        } else if (depth == 0) {
            s += c;
        }
    }
    if (s.rfind("void ", 0) == 0) s.erase(0, 5);
    const size_t colons = s.rfind("::");
    if (colons != std::string::npos) s.erase(0, colons + 2);
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s.empty() ? full : s;
}

uint32_t intern_name(State& s, const char* mangled) {
    auto it = s.name_index.find(mangled);
    if (it != s.name_index.end()) return it->second;
    std::string full = mangled ? mangled : "?";
    int status = 0;
    if (char* demangled = abi::__cxa_demangle(full.c_str(), nullptr, nullptr, &status)) {
        if (status == 0) full = demangled;
        std::free(demangled);
    }
    const auto index = uint32_t(s.names.size());
    s.names.push_back(s.full_names ? full : short_name(full));
    s.name_index.emplace(mangled, index);
    return index;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    // A failed allocation gives CUPTI no buffer: it drops records and counts them.
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(kBufferAlign, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

// A copy's or fill's row (grid 0); one whose timestamps were not collected is only counted.
template <class Record>
void push_transfer_row(State& s, const Record& r, const char* name) {
    if (r.start == 0 || r.end <= r.start) {
        ++s.untimed;
        return;
    }
    s.rows.push_back(Row{r.start, r.end, r.graphNodeId, r.correlationId, r.graphId, r.streamId, intern_name(s, name),
                         0, 0, 0, 0});
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t /*size*/,
                               size_t valid_bytes) {
    State& s = state();
    {
        std::lock_guard<std::mutex> lock(s.mu);
        CUpti_Activity* record = nullptr;
        for (;;) {
            const CUptiResult r = cuptiActivityGetNextRecord(buffer, valid_bytes, &record);
            if (r == CUPTI_ERROR_MAX_LIMIT_REACHED) break;  // the end of the buffer
            if (!ok(r, "cuptiActivityGetNextRecord")) break;
            // Copies and fills inside graphs are nodes too: rows named [memcpy] / [memset], grid 0
            // (CUDA 13's records, CUpti_ActivityMemcpy6 / CUpti_ActivityMemset4).
            if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
                push_transfer_row(s, *reinterpret_cast<const CUpti_ActivityMemcpy6*>(record), "[memcpy]");
                continue;
            }
            if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
                push_transfer_row(s, *reinterpret_cast<const CUpti_ActivityMemset4*>(record), "[memset]");
                continue;
            }
            if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
            // CUDA 13's record for this kind (cupti_activity.h). The fields read here sit where
            // they sat in CUpti_ActivityKernel9 (checked with offsetof), so an older layout reads
            // the same.
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
            if (k->start == 0 || k->end <= k->start) {  // timestamps not collected (forced flush)
                ++s.untimed;
                continue;
            }
            s.rows.push_back(Row{k->start, k->end, k->graphNodeId, k->correlationId, k->graphId,
                                 k->streamId, intern_name(s, k->name), k->gridX, k->gridY, k->gridZ,
                                 k->blockX});
        }
        size_t dropped = 0;
        if (ok(cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped),
               "cuptiActivityGetNumDroppedRecords"))
            s.dropped += dropped;
    }
    std::free(buffer);
}

bool is_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, CUpti_CallbackId driver_cbid,
             CUpti_CallbackId runtime_cbid) {
    return (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid == driver_cbid) ||
           (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == runtime_cbid);
}

// cudaProfilerStart calls cuProfilerStart, so both domains report each call: opening an open
// window or closing a closed one does nothing. A window opens when the start call returns and
// closes when the stop call is entered, so it holds exactly the kernels launched in between (plus
// any still queued from before, which ran inside it).
void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
    const auto* info = static_cast<const CUpti_CallbackData*>(data);
    const bool start = is_call(domain, cbid, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart,
                               CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000);
    const bool stop = is_call(domain, cbid, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop,
                              CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000);
    if (!(start && info->callbackSite == CUPTI_API_EXIT) &&
        !(stop && info->callbackSite == CUPTI_API_ENTER))
        return;
    uint64_t now = 0;
    if (!ok(cuptiGetTimestamp(&now), "cuptiGetTimestamp")) return;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    const bool open = !s.windows.empty() && s.windows.back().close_ns == kOpen;
    if (start && !open) s.windows.push_back(Window{now, kOpen});
    if (stop && open) s.windows.back().close_ns = now;
}

// 1-based index of the window a kernel starting at t ran in, 0 if none.
uint32_t window_of(const std::vector<Window>& windows, uint64_t t) {
    for (size_t i = 0; i < windows.size(); ++i)
        if (t >= windows[i].open_ns && t < windows[i].close_ns) return uint32_t(i + 1);
    return 0;
}

void write_csv(State& s) {
    std::sort(s.rows.begin(), s.rows.end(),
              [](const Row& a, const Row& b) { return a.start_ns < b.start_ns; });
    FILE* f = std::fopen(s.out_path.c_str(), "w");
    if (f == nullptr) {
        std::fprintf(stderr, "kernel_trace: cannot write %s: %s\n", s.out_path.c_str(),
                     std::strerror(errno));
        return;
    }
    std::fputs(
        "start_ns,end_ns,correlation_id,graph_id,graph_node_id,stream_id,grid_x,grid_y,grid_z,"
        "block_x,range,kernel\n",
        f);
    // Quoted, with quotes doubled: a full name holds commas.
    std::vector<std::string> quoted;
    for (const std::string& n : s.names) {
        std::string q = "\"";
        for (char c : n) q += c == '"' ? std::string("\"\"") : std::string(1, c);
        quoted.push_back(q + "\"");
    }
    size_t written = 0;
    for (const Row& r : s.rows) {
        const uint32_t range = s.range_mode ? window_of(s.windows, r.start_ns) : 0;
        if (s.range_mode && range == 0) continue;
        std::fprintf(f, "%llu,%llu,%u,%u,%llu,%u,%d,%d,%d,%d,%u,%s\n",
                     (unsigned long long)r.start_ns, (unsigned long long)r.end_ns, r.correlation_id,
                     r.graph_id, (unsigned long long)r.graph_node_id, r.stream_id, r.grid_x,
                     r.grid_y, r.grid_z, r.block_x, range, quoted[r.name].c_str());
        ++written;
    }
    const bool failed = std::ferror(f) != 0;
    if (std::fclose(f) != 0 || failed)
        std::fprintf(stderr, "kernel_trace: writing %s failed\n", s.out_path.c_str());
    std::string windows;
    if (s.range_mode) windows = ", " + std::to_string(s.windows.size()) + " profiler windows";
    std::fprintf(stderr,
                 "kernel_trace: wrote %zu kernels to %s (%zu recorded, %zu dropped by CUPTI, %zu "
                 "without timestamps%s)\n",
                 written, s.out_path.c_str(), s.rows.size(), s.dropped, s.untimed, windows.c_str());
}

// One subscriber per process: under another CUPTI tool (ncu) this fails.
bool subscribe_profiler_calls() {
    CUpti_SubscriberHandle subscriber;
    if (!ok(cuptiSubscribe(&subscriber, on_api, nullptr), "cuptiSubscribe")) return false;
    const struct {
        CUpti_CallbackDomain domain;
        CUpti_CallbackId cbid;
    } calls[] = {{CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart},
                 {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop},
                 {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000},
                 {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000}};
    for (const auto& c : calls)
        if (!ok(cuptiEnableCallback(1, subscriber, c.domain, c.cbid), "cuptiEnableCallback"))
            return false;
    return true;
}

void at_exit() {
    ok(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    size_t dropped = 0;
    if (ok(cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped),
           "cuptiActivityGetNumDroppedRecords"))
        s.dropped += dropped;
    write_csv(s);
}

}  // namespace

// Called once by the CUDA driver inside cuInit. Returns 1 even where CUPTI fails (the message says
// so): the program then runs untraced rather than not at all.
extern "C" __attribute__((visibility("default"))) int InitializeInjection(void) {
    static bool initialized = false;
    if (initialized) return 1;
    initialized = true;
    State& s = state();
    const char* out = std::getenv("QS_KERNEL_TRACE_OUT");
    s.out_path = out && *out ? out : "kernel_trace.csv";
    const char* range = std::getenv("QS_KERNEL_TRACE_RANGE");
    s.range_mode = range && std::strcmp(range, "profiler") == 0;
    const char* names = std::getenv("QS_KERNEL_TRACE_NAMES");
    s.full_names = names && std::strcmp(names, "full") == 0;

    if (!ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed),
            "cuptiActivityRegisterCallbacks"))
        return 1;
    if (s.range_mode && !subscribe_profiler_calls()) {
        std::fprintf(stderr, "kernel_trace: no profiler-range callbacks: writing every kernel\n");
        s.range_mode = false;
    }
    // Enabled from the start, not at the window's opening, so that graphs instantiated before the
    // window are traced node by node like the rest; the window is applied when the CSV is written.
    if (!ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
            "cuptiActivityEnable(CONCURRENT_KERNEL)"))
        return 1;
    // Copies and fills: without them a graph's memcpy / memset nodes show only as idle gaps.
    ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
    ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "cuptiActivityEnable(MEMSET)");
    std::atexit(at_exit);
    return 1;
}
