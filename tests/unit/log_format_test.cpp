// Log lines (core/log_format.h): text and JSON formats, structured fields, level names; the
// request log's fields (server/request_log.h); progress lines (core/progress.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <regex>
#include <vector>

#include "core/log.h"
#include "core/log_format.h"
#include "core/progress.h"
#include "server/request_log.h"

using namespace qs;

namespace {
class LogFormatTest : public ::testing::Test {
protected:
    void TearDown() override {
        set_log_format(LogFormat::kText);
        set_log_level(LogLevel::kInfo);
    }
};
}  // namespace

TEST_F(LogFormatTest, TextLineWithFields) {
    set_log_format(LogFormat::kText);
    const std::string l = format_log_line(LogLevel::kWarn, "request",
                                          {log_field("id", "cmpl-1"), log_field_int("prompt_tokens", 12),
                                           log_field_real("e2e_s", 0.25), log_field("note", "two words")});
    EXPECT_TRUE(std::regex_match(l, std::regex(R"(\[\d\d:\d\d:\d\d\.\d\d\d warn\] request id=cmpl-1 prompt_tokens=12 )"
                                               R"(e2e_s=0\.2500 note="two words")")))
        << l;
}

TEST_F(LogFormatTest, JsonLineIsOneObjectWithTypedFields) {
    set_log_format(LogFormat::kJson);
    const std::string l =
        format_log_line(LogLevel::kInfo, "say \"hi\"\nthere",
                        {log_field("id", "x"), log_field_int("n", -3), log_field_real("t", 1.5)});
    EXPECT_EQ(l.find('\n'), std::string::npos);
    const auto j = nlohmann::json::parse(l);
    EXPECT_EQ(j["level"], "info");
    EXPECT_EQ(j["msg"], "say \"hi\"\nthere");
    EXPECT_EQ(j["id"], "x");
    EXPECT_EQ(j["n"], -3);
    EXPECT_DOUBLE_EQ(j["t"].get<double>(), 1.5);
    EXPECT_TRUE(std::regex_match(j["time"].get<std::string>(),
                                 std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)")));
}

TEST_F(LogFormatTest, LevelAndFormatNames) {
    EXPECT_EQ(*parse_log_level("error"), LogLevel::kError);
    EXPECT_EQ(*parse_log_level("warn"), LogLevel::kWarn);
    EXPECT_EQ(*parse_log_level("info"), LogLevel::kInfo);
    EXPECT_EQ(*parse_log_level("debug"), LogLevel::kDebug);
    EXPECT_FALSE(parse_log_level("verbose").is_ok());
    EXPECT_EQ(*parse_log_format("json"), LogFormat::kJson);
    EXPECT_FALSE(parse_log_format("xml").is_ok());
}

TEST(RequestLog, FieldsWithoutPromptUnlessGiven) {
    RequestLogRecord r;
    r.id = "chatcmpl-9";
    r.api = "chat";
    r.prompt_tokens = 100;
    r.cached_prompt_tokens = 64;
    r.completion_tokens = 11;  // 1 from the prefill, 10 decoded in 2 s
    r.ttft_s = 0.5;
    r.e2e_s = 2.5;
    r.finish_reasons = {"length"};
    set_log_format(LogFormat::kJson);
    auto j = nlohmann::json::parse(format_log_line(LogLevel::kInfo, "request", request_log_fields(r)));
    set_log_format(LogFormat::kText);
    EXPECT_EQ(j["id"], "chatcmpl-9");
    EXPECT_EQ(j["prompt_tokens"], 100);
    EXPECT_EQ(j["cached_prompt_tokens"], 64);
    EXPECT_EQ(j["completion_tokens"], 11);
    EXPECT_DOUBLE_EQ(j["ttft_s"].get<double>(), 0.5);
    EXPECT_DOUBLE_EQ(j["e2e_s"].get<double>(), 2.5);
    EXPECT_DOUBLE_EQ(j["decode_tokens_per_s"].get<double>(), 5.0);
    EXPECT_EQ(j["finish_reason"], "length");
    EXPECT_FALSE(j.contains("prompt"));
    EXPECT_FALSE(j.contains("queue_s")) << "no engine timing, no phase fields";
    EXPECT_FALSE(j.contains("prefill_s"));
    EXPECT_FALSE(j.contains("decode_s"));
    r.queue_s = 0.25;
    r.prefill_s = 0.125;
    r.decode_s = 1.75;
    set_log_format(LogFormat::kJson);
    j = nlohmann::json::parse(format_log_line(LogLevel::kInfo, "request", request_log_fields(r)));
    set_log_format(LogFormat::kText);
    EXPECT_DOUBLE_EQ(j["queue_s"].get<double>(), 0.25);
    EXPECT_DOUBLE_EQ(j["prefill_s"].get<double>(), 0.125);
    EXPECT_DOUBLE_EQ(j["decode_s"].get<double>(), 1.75);
    r.prompt = "secret";
    bool has_prompt = false;
    for (const auto& f : request_log_fields(r)) {
        if (f.key != "prompt") continue;
        has_prompt = true;
        EXPECT_EQ(f.value, "secret");
    }
    EXPECT_TRUE(has_prompt);
}

TEST(ProgressLine, PercentAmountAndEta) {
    // 30 of 120 GB in 10 s: 25%, the remaining 90 GB at 3 GB/s take 30 s.
    EXPECT_EQ(format_progress("uploading weights", 30e9, 120e9, 10.0, kProgressGB),
              "uploading weights: 25% (30.0 of 120.0 GB), 10.0 s, ETA 30.0 s");
    EXPECT_EQ(format_progress("x", 0, 50, 1.0, kProgressCount), "x: 0% (0 of 50), 1.0 s");
    EXPECT_EQ(format_progress_done("x", 70e9, 73.6, kProgressGB), "x: 100% (70.0 GB) in 73.6 s");
}

TEST(ProgressLine, ThrottledByIntervalAndFinishedOnce) {
    double now = 0;
    std::vector<std::string> lines;
    Progress p("loading", 100, kProgressCount, 5.0, [&] { return now; },
               [&](const std::string& l) { lines.push_back(l); });
    now = 1;
    p.advance(10);  // 1 s < 5 s: nothing yet
    EXPECT_TRUE(lines.empty());
    now = 6;
    p.advance(10);  // 20 done in 6 s: ETA 6 * 80 / 20 = 24 s
    ASSERT_EQ(lines.size(), 1u);
    EXPECT_EQ(lines[0], "loading: 20% (20 of 100), 6.0 s, ETA 24.0 s");
    now = 7;
    p.advance(10);  // 1 s after the last line
    EXPECT_EQ(lines.size(), 1u);
    now = 12;
    p.advance(70);  // all done: the final line is finish()'s
    EXPECT_EQ(lines.size(), 1u);
    p.finish();
    p.finish();
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(lines[1], "loading: 100% (100) in 12.0 s");
}

TEST(ProgressLine, JsonLinesCarryTheNumbers) {
    double now = 0;
    set_log_format(LogFormat::kJson);
    testing::internal::CaptureStderr();
    {
        Progress p("uploading weights", 120e9, kProgressGB, 5.0, [&] { return now; });
        now = 10;
        p.advance(30e9);
        now = 40;
        p.advance(90e9);
        p.finish();
    }
    const std::string err = testing::internal::GetCapturedStderr();
    set_log_format(LogFormat::kText);
    const auto nl = err.find('\n');
    ASSERT_NE(nl, std::string::npos) << err;
    const auto first = nlohmann::json::parse(err.substr(0, nl));
    EXPECT_EQ(first["msg"], "uploading weights: 25% (30.0 of 120.0 GB), 10.0 s, ETA 30.0 s");
    EXPECT_DOUBLE_EQ(first["percent"].get<double>(), 25.0);
    EXPECT_DOUBLE_EQ(first["done"].get<double>(), 30.0);
    EXPECT_DOUBLE_EQ(first["total"].get<double>(), 120.0);
    EXPECT_EQ(first["unit"], "GB");
    EXPECT_DOUBLE_EQ(first["eta_s"].get<double>(), 30.0);
    const auto last = nlohmann::json::parse(err.substr(nl + 1, err.find('\n', nl + 1) - nl - 1));
    EXPECT_EQ(last["msg"], "uploading weights: 100% (120.0 GB) in 40.0 s");
    EXPECT_DOUBLE_EQ(last["percent"].get<double>(), 100.0);
    EXPECT_FALSE(last.contains("eta_s"));
}

TEST(ProgressLine, QuickOperationsWriteNothing) {
    double now = 0;
    std::vector<std::string> lines;
    Progress p("loading", 10, kProgressCount, 5.0, [&] { return now; },
               [&](const std::string& l) { lines.push_back(l); });
    now = 0.5;
    p.advance(10);
    p.finish();
    EXPECT_TRUE(lines.empty());
}
