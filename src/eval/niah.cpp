// Needle-in-a-haystack prompts, scoring and the runner (see niah.h).
#include "eval/niah.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>

#include <fmt/format.h>

#include "eval/code_extract.h"

namespace qs::eval {

namespace {

uint64_t splitmix64(uint64_t& s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

template <size_t N>
const char* pick(const char* const (&words)[N], uint64_t& s) {
    return words[splitmix64(s) % N];
}

const char* const kAdjectives[] = {
    "quiet",  "old",   "bright", "narrow", "green", "distant", "heavy", "gentle", "cold", "broad",
    "hidden", "early", "small",  "golden", "wet",   "steady",  "pale",  "busy",   "low",  "warm"};
const char* const kNouns[] = {
    "river",   "garden", "lantern", "valley",  "harbour", "market",  "window",  "forest",  "bridge",
    "meadow",  "tower",  "village", "orchard", "road",    "library", "field",   "mill",    "shore",
    "kitchen", "hill",   "wagon",   "letter",  "farmer",  "sailor",  "teacher", "painter", "clock"};
const char* const kVerbs[] = {"passed",   "watched", "followed", "crossed", "remembered", "carried",
                              "reached",  "opened",  "found",    "left",    "described",  "visited",
                              "measured", "painted", "greeted",  "repaired"};
const char* const kPlaces[] = {
    "before dawn",       "after the rain",       "near the old wall",         "in the long evening",
    "beyond the square", "along the quiet lane", "at the turn of the season", "under a grey sky",
    "by the open gate",  "in the morning light"};
const char* const kKeys[] = {"Lisbon", "Oslo",    "Quito",   "Nairobi", "Hanoi",  "Lima",
                             "Tunis",  "Riga",    "Perth",   "Cusco",   "Dakar",  "Bergen",
                             "Porto",  "Kyoto",   "Seville", "Tallinn", "Zagreb", "Accra",
                             "Bilbao", "Cordoba", "Malmo",   "Ghent",   "Split",  "Turku",
                             "Graz",   "Lyon",    "Basel",   "Krakow",  "Leeds",  "Halifax"};

std::string sentence(uint64_t& s) {
    switch (splitmix64(s) % 4) {
        case 0:
            return fmt::format("The {} {} {} the {} {} {}. ", pick(kAdjectives, s), pick(kNouns, s),
                               pick(kVerbs, s), pick(kAdjectives, s), pick(kNouns, s),
                               pick(kPlaces, s));
        case 1:
            return fmt::format("Then a {} {} {} the {}. ", pick(kAdjectives, s), pick(kNouns, s),
                               pick(kVerbs, s), pick(kNouns, s));
        case 2:
            return fmt::format("Nobody {} the {} {}, and the {} stayed {}. ", pick(kVerbs, s),
                               pick(kNouns, s), pick(kPlaces, s), pick(kNouns, s),
                               pick(kAdjectives, s));
        default:
            return fmt::format("Every {} {} a {} {} {}. ", pick(kNouns, s), pick(kVerbs, s),
                               pick(kAdjectives, s), pick(kNouns, s), pick(kPlaces, s));
    }
}

const char* kIntro =
    "Below is a long text. Somewhere in it is one sentence that gives a special magic number. "
    "Read the text and answer the question after it.\n\n";
const char* kDefaultNeedle = "The special magic number for {key} is {answer}.";

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
    for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size())
        s.replace(p, from.size(), to);
    return s;
}

}  // namespace

std::string filler_text(int64_t chars, uint64_t seed) {
    std::string out;
    if (chars <= 0) return out;
    out.reserve(size_t(chars) + 128);
    uint64_t s = seed * 0x2545F4914F6CDD1Dull + 17;
    while (int64_t(out.size()) < chars) out += sentence(s);
    out.resize(size_t(chars));
    return out;
}

NiahCase make_case(int64_t target_tokens, double depth, int64_t sample, uint64_t seed) {
    NiahCase c;
    c.target_tokens = target_tokens;
    c.depth = depth;
    c.sample = sample;
    uint64_t s = seed ^ (uint64_t(target_tokens) * 0x9E3779B97F4A7C15ull) ^
                 (uint64_t(std::llround(depth * 1e6)) << 20) ^ (uint64_t(sample) << 52);
    splitmix64(s);
    c.key = kKeys[splitmix64(s) % std::size(kKeys)];
    c.answer = std::to_string(1000000 + splitmix64(s) % 9000000);
    return c;
}

std::string needle_sentence(const NiahCase& c, const std::string& tmpl) {
    return replace_all(replace_all(tmpl.empty() ? kDefaultNeedle : tmpl, "{key}", c.key),
                       "{answer}", c.answer);
}

std::string question(const NiahCase& c) {
    return fmt::format(
        "\n\nWhat is the special magic number for {} mentioned in the text above? Answer with the "
        "number only.",
        c.key);
}

std::string niah_prompt(const NiahCase& c, const TokenFit& fit, uint64_t seed,
                        const std::string& tmpl) {
    const std::string needle = needle_sentence(c, tmpl) + " ";
    const std::string q = question(c);
    const double text_tokens = std::max(0.0, double(c.target_tokens) - fit.overhead_tokens);
    const int64_t total_chars = int64_t(text_tokens * fit.chars_per_token);
    const int64_t fixed = int64_t(std::string(kIntro).size() + needle.size() + q.size());
    std::string hay = filler_text(std::max<int64_t>(0, total_chars - fixed), seed);
    // The needle goes at the sentence boundary nearest to depth x length.
    size_t pos = size_t(std::llround(std::clamp(c.depth, 0.0, 1.0) * double(hay.size())));
    if (pos > 0 && pos < hay.size()) {
        size_t after = hay.find(". ", pos);
        size_t before = pos >= 2 ? hay.rfind(". ", pos - 1) : std::string::npos;
        size_t a = after == std::string::npos ? hay.size() : after + 2;
        size_t b = before == std::string::npos ? 0 : before + 2;
        pos = (a - pos <= pos - b) ? a : b;
        pos = std::min(pos, hay.size());
    }
    std::string ins =
        pos == hay.size() && !hay.empty() && hay.back() != ' ' ? " " + needle : needle;
    hay.insert(pos, ins);
    return kIntro + hay + q;
}

double needle_position(const std::string& prompt, const NiahCase& c, const std::string& tmpl) {
    const size_t intro = std::string(kIntro).size();
    const size_t qpos = prompt.rfind(question(c));
    const size_t npos = prompt.find(needle_sentence(c, tmpl));
    if (npos == std::string::npos || qpos == std::string::npos || qpos <= intro) return -1;
    const size_t needle_len = needle_sentence(c, tmpl).size() + 1;
    const double hay = double(qpos - intro) - double(needle_len);
    return hay <= 0 ? 0 : double(npos - intro) / hay;
}

std::string first_number(const std::string& reply) {
    std::string text = strip_reasoning(reply);
    size_t i = 0;
    while (i < text.size() && !std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && std::isdigit(static_cast<unsigned char>(text[j]))) ++j;
    return text.substr(i, j - i);
}

bool niah_correct(const std::string& reply, const std::string& answer) {
    return !answer.empty() && first_number(reply) == answer;
}

namespace {

nlohmann::json niah_body(const NiahOptions& o, const std::string& prompt, int64_t max_tokens) {
    return {{"model", o.model},
            {"messages", nlohmann::json::array({{{"role", "user"}, {"content", prompt}}})},
            {"max_tokens", max_tokens},
            {"temperature", 0.0},
            {"chat_template_kwargs", {{"enable_thinking", false}}}};
}

Result<bench::PassResult> send(const NiahOptions& o, const std::vector<bench::FixtureRequest>& f,
                               int64_t clients) {
    bench::LoadgenOptions lo;
    lo.url = o.url;
    lo.api_key = o.api_key;
    lo.clients = clients;
    lo.requests = int64_t(f.size());
    lo.pass_timeout_s = o.timeout_s;
    lo.keep_full_text = true;
    auto pass = bench::run_pass(lo, f);
    if (!pass.is_ok()) return pass.status();
    int64_t transport = 0;
    for (const auto& r : pass->records)
        if (r.error == "connect" || r.error == "write" || r.error == "read") ++transport;
    if (transport == int64_t(f.size()))
        return io_error(fmt::format("no request reached http://{}:{} ({})", o.url.host, o.url.port,
                                    pass->records.front().error));
    return pass;
}

// The server's tokens per character and fixed overhead (template, intro, question), by a
// straight line through probes (max_tokens 1) of the same construction as the cases. Two small
// probes give a first fit; the filler's token density varies from sentence to sentence, so a
// third probe at 95% of the longest length (sized by the first fit) replaces the second, and the
// line through the smallest and the largest probe sizes every case by interpolation.
Result<TokenFit> calibrate(const NiahOptions& o) {
    struct Probe {
        int64_t chars = 0, tokens = 0;
    };
    auto probe = [&](int64_t target, const TokenFit& f) -> Result<Probe> {
        NiahCase pc = make_case(target, 0.5, 0, o.seed);
        std::string p = niah_prompt(pc, f, o.seed, o.needle_template);
        auto pass = send(o, {{"/v1/chat/completions", 0, niah_body(o, p, 1)}}, 1);
        if (!pass.is_ok()) return pass.status().with_context("calibration");
        const auto& x = pass->records.front();
        if (!x.error.empty() || x.prompt_tokens <= 0)
            return io_error(fmt::format(
                "calibration: a probe request failed ({}); pass --chars-per-token to skip",
                x.error.empty() ? "no prompt_tokens in usage" : x.error));
        return Probe{int64_t(p.size()), x.prompt_tokens};
    };
    auto line = [](const Probe& a, const Probe& b) -> Result<TokenFit> {
        if (b.tokens <= a.tokens)
            return internal_error("calibration: the larger probe did not count more tokens");
        TokenFit f;
        f.chars_per_token = double(b.chars - a.chars) / double(b.tokens - a.tokens);
        f.overhead_tokens = double(a.tokens) - double(a.chars) / f.chars_per_token;
        return f;
    };
    const int64_t small_len = *std::min_element(o.lengths.begin(), o.lengths.end());
    const int64_t long_len = *std::max_element(o.lengths.begin(), o.lengths.end());
    const int64_t c2 = std::clamp<int64_t>(small_len * 2, 2000, 20000), c1 = c2 / 4;
    const TokenFit unit{0, 1};  // target = characters
    auto p1 = probe(c1, unit);
    if (!p1.is_ok()) return p1.status();
    auto p2 = probe(c2, unit);
    if (!p2.is_ok()) return p2.status();
    auto fit = line(*p1, *p2);
    if (!fit.is_ok() || long_len * 2 < p2->tokens * 3) return fit;
    auto p3 = probe(int64_t(0.95 * double(long_len)), *fit);
    if (!p3.is_ok()) return p3.status();
    return line(*p1, *p3);
}

}  // namespace

Result<std::vector<NiahResult>> run_niah(const NiahOptions& o, TokenFit* fit_used) {
    if (o.lengths.empty() || o.depths.empty())
        return invalid_argument("give at least one length and one depth");
    if (o.samples < 1) return invalid_argument("--samples must be at least 1");
    for (double d : o.depths)
        if (!(d >= 0 && d <= 1))
            return invalid_argument(fmt::format("depth {} is not in [0, 1]", d));
    for (int64_t l : o.lengths) {
        if (l < 64) return invalid_argument(fmt::format("length {} is below 64 tokens", l));
        if (l + o.max_tokens > o.max_model_len)
            return invalid_argument(fmt::format(
                "length {} + max_tokens {} exceeds the context ({} tokens, --max-model-len)", l,
                o.max_tokens, o.max_model_len));
    }
    TokenFit fit = o.fit;
    if (o.calibrate) {
        auto c = calibrate(o);
        if (!c.is_ok()) return c.status();
        fit = *c;
    }
    if (fit_used) *fit_used = fit;
    std::vector<NiahCase> cases;
    std::vector<bench::FixtureRequest> fixture;
    for (int64_t l : o.lengths)
        for (double d : o.depths)
            for (int64_t s = 0; s < o.samples; ++s) {
                NiahCase c = make_case(l, d, s, o.seed);
                std::string p = niah_prompt(c, fit, o.seed + uint64_t(s), o.needle_template);
                fixture.push_back({"/v1/chat/completions", l, niah_body(o, p, o.max_tokens)});
                cases.push_back(std::move(c));
            }
    auto pass = send(o, fixture, o.concurrency);
    if (!pass.is_ok()) return pass.status();
    auto& records = pass->records;
    records.resize(cases.size());
    std::vector<NiahResult> out;
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto& rec = records[i];
        NiahResult r;
        r.c = cases[i];
        r.prompt_tokens = rec.prompt_tokens;
        r.latency_s = rec.latency_s;
        r.ttft_s = rec.ttft_s;
        if (!rec.error.empty() || !rec.done) r.error = rec.error.empty() ? "incomplete" : rec.error;
        std::string reply = strip_reasoning(rec.content);
        r.found = first_number(reply);
        r.passed = r.error.empty() && niah_correct(reply, r.c.answer);
        r.reply = reply.substr(0, 200);
        out.push_back(std::move(r));
    }
    return out;
}

nlohmann::ordered_json niah_result_json(const NiahResult& r) {
    return {{"target_tokens", r.c.target_tokens},
            {"depth", r.c.depth},
            {"sample", r.c.sample},
            {"key", r.c.key},
            {"answer", r.c.answer},
            {"prompt_tokens", r.prompt_tokens},
            {"found", r.found},
            {"passed", r.passed},
            {"error", r.error},
            {"latency_s", r.latency_s},
            {"ttft_s", r.ttft_s},
            {"reply", r.reply}};
}

Status write_niah_results(const std::string& path, const std::vector<NiahResult>& results) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    for (const auto& r : results)
        f << niah_result_json(r).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
          << '\n';
    if (!f) return io_error("cannot write '" + path + "'");
    return Status::ok();
}

Result<std::vector<NiahResult>> read_niah_results(const std::string& path) {
    std::ifstream f(path);
    if (!f) return not_found("cannot open NIAH results '" + path + "'");
    std::vector<NiahResult> out;
    std::string line;
    for (int64_t n = 1; std::getline(f, line); ++n) {
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
        auto where = fmt::format("{}:{}", path, n);
        if (j.is_discarded() || !j.is_object() || !j.contains("target_tokens") ||
            !j["target_tokens"].is_number_integer() || !j.contains("depth") ||
            !j["depth"].is_number() || !j.contains("passed") || !j["passed"].is_boolean())
            return corrupt_data(
                where + ": needs target_tokens (integer), depth (number), passed (boolean)");
        NiahResult r;
        r.c.target_tokens = j["target_tokens"].get<int64_t>();
        r.c.depth = j["depth"].get<double>();
        r.c.sample = j.value("sample", int64_t(0));
        r.c.key = j.value("key", "");
        r.c.answer = j.value("answer", "");
        r.prompt_tokens = j.value("prompt_tokens", int64_t(0));
        r.found = j.value("found", "");
        r.passed = j["passed"].get<bool>();
        r.error = j.value("error", "");
        r.latency_s = j.value("latency_s", 0.0);
        r.ttft_s = j.value("ttft_s", -1.0);
        r.reply = j.value("reply", "");
        out.push_back(std::move(r));
    }
    if (out.empty()) return corrupt_data("NIAH results '" + path + "' hold no results");
    return out;
}

}  // namespace qs::eval
