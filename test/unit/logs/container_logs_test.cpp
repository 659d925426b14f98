#include "agent/logs/container_logs.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "agent/runtime/cri_log.h"
#include "test/support/fake_clock.h"
#include "test/support/test_util.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

const base::SystemTime kNow = base::SystemTime(1'700'000'000s);

logs::LogOptions parse(std::string_view query) {
  auto o = logs::parseLogOptions(query, kNow);
  INFO(o.status().toString());
  REQUIRE(o.ok());
  return *o;
}

base::Status parseError(std::string_view query) {
  auto o = logs::parseLogOptions(query, kNow);
  REQUIRE_FALSE(o.ok());
  return o.status();
}

// "2024-01-02T03:04:05Z" + seconds, as a CRI record line.
std::string record(int second, std::string_view text, std::string_view tag = "F",
                   std::string_view stream = "stdout") {
  char ts[32];
  std::snprintf(ts, sizeof ts, "2024-01-02T03:04:%02dZ", second);
  return std::string(ts) + " " + std::string(stream) + " " + std::string(tag) + " " +
         std::string(text) + "\n";
}

struct ReadResult {
  base::Status status;
  std::string out;
  std::vector<size_t> pieces;
};

// Runs readLogs (no follow) on one io_context that is also the file pool: no threads.
ReadResult readLogsOnce(const std::filesystem::path& log, logs::LogOptions options,
                        size_t stop_after_pieces = 0) {
  asio::io_context ioc;
  testing::FakeClock clock;
  ReadResult result;
  logs::LogSink sink = [&](std::string_view data) -> asio::awaitable<bool> {
    result.out.append(data);
    result.pieces.push_back(data.size());
    co_return stop_after_pieces == 0 || result.pieces.size() < stop_after_pieces;
  };
  bool finished = false;
  auto task = logs::readLogs(log, std::move(options), sink, nullptr, ioc.get_executor(), clock);
  auto on_done = [&](std::exception_ptr e, base::Status s) {
    REQUIRE_FALSE(e);
    result.status = s;
    finished = true;
  };
  asio::co_spawn(ioc, std::move(task), on_done);
  ioc.run();
  REQUIRE(finished);
  return result;
}

api::ContainerStatus status(std::string name) {
  api::ContainerStatus cs;
  cs.name = std::move(name);
  return cs;
}

api::ContainerStateTerminated terminated(std::string id) {
  api::ContainerStateTerminated t;
  t.container_id = std::move(id);
  return t;
}

}  // namespace

TEST_CASE("parseLogOptions: kubelet's query decoding of flags, numbers and times", "[unit][logs]") {
  auto none = parse("");
  CHECK_FALSE(none.follow);
  CHECK_FALSE(none.tail_lines);
  CHECK_FALSE(none.since_time);

  auto flags = parse("follow&previous=false&timestamps=TRUE");
  CHECK(flags.follow);  // present without a value
  CHECK_FALSE(flags.previous);
  CHECK(flags.timestamps);
  CHECK_FALSE(parse("follow=0").follow);
  CHECK_FALSE(parse("follow=FaLsE").follow);
  CHECK(parse("follow=").follow);
  CHECK(parse("follow=no").follow);          // only "0" and "false" mean false
  CHECK(parse("follow=1&follow=0").follow);  // the first value wins

  auto numbers = parse("tailLines=10&limitBytes=%2B5&sinceSeconds=60&unknown=x");
  CHECK(numbers.tail_lines == 10);
  CHECK(numbers.limit_bytes == 5);
  CHECK(numbers.since_time == kNow - 60s);

  auto since = parse("sinceTime=2024-01-02T05%3A04%3A05%2B02%3A00");
  CHECK(since.since_time == base::SystemTime(1704164645s));  // 2024-01-02T03:04:05Z
  CHECK(parse("sinceTime=2024-01-02T03:04:05.5Z").since_time ==
        base::SystemTime(1704164645s + 500ms));
  CHECK_FALSE(parse("sinceTime=").since_time);
  CHECK(parse("sinceSeconds=9223372036854775807").since_time == std::nullopt);

  CHECK(parse("tail=5").tail_lines == 5);  // the old spelling
  CHECK_FALSE(parse("tailLines=3&tail=all").tail_lines);
}

TEST_CASE("parseLogOptions: undecodable values are InvalidArgument, rejected ones OutOfRange",
          "[unit][logs]") {
  auto bad = parseError("tailLines=abc");
  CHECK(bad.code() == base::StatusCode::kInvalidArgument);
  CHECK(bad.message() ==
        "Unable to decode query: tailLines: strconv.ParseInt: parsing \"abc\": invalid syntax");
  CHECK(parseError("limitBytes=").code() == base::StatusCode::kInvalidArgument);
  CHECK(parseError("sinceSeconds=99999999999999999999").message().find("value out of range") !=
        std::string::npos);
  CHECK(parseError("sinceTime=yesterday").code() == base::StatusCode::kInvalidArgument);
  CHECK(parseError("follow=%zz").code() == base::StatusCode::kInvalidArgument);

  auto negative = parseError("tailLines=-1");
  CHECK(negative.code() == base::StatusCode::kOutOfRange);
  CHECK(negative.message() == "tailLines: Invalid value: -1: must be greater than or equal to 0");
  CHECK(parseError("limitBytes=0").message() ==
        "limitBytes: Invalid value: 0: must be greater than 0");
  CHECK(parseError("sinceSeconds=0").message() ==
        "sinceSeconds: Invalid value: 0: must be greater than 0");
  CHECK(parseError("sinceSeconds=5&sinceTime=2024-01-02T03:04:05Z").message() ==
        "Forbidden: at most one of `sinceTime` or `sinceSeconds` may be specified");
  CHECK(parseError("tailLines=-2&limitBytes=-1").message() ==
        "[tailLines: Invalid value: -2: must be greater than or equal to 0, "
        "limitBytes: Invalid value: -1: must be greater than 0]");

  CHECK(logs::containerLogsHttpStatus(negative) == 422);
  CHECK(logs::containerLogsHttpStatus(bad) == 400);
  CHECK(logs::containerLogsHttpStatus(base::failedPreconditionError("x")) == 400);
  CHECK(logs::containerLogsHttpStatus(base::internalError("x")) == 500);
}

TEST_CASE("validateContainerLogStatus: kubelet's choice of container and its messages",
          "[unit][logs]") {
  api::PodStatus pod;
  auto check_error = [&](std::string_view name, bool previous, const std::string& message) {
    auto id = logs::validateContainerLogStatus("web", pod, name, previous);
    REQUIRE_FALSE(id.ok());
    CHECK(id.status().code() == base::StatusCode::kFailedPrecondition);
    CHECK(id.status().message() == message);
  };
  check_error("app", false, "container \"app\" in pod \"web\" is not available");

  auto running = status("app");
  running.container_id = "process://run2";
  running.state.running.emplace();
  running.last_state.terminated = terminated("process://run1");
  auto waiting = status("pull");
  waiting.state.waiting = api::ContainerStateWaiting{"ErrImagePull", ""};
  auto backoff = status("crash");
  backoff.state.waiting = api::ContainerStateWaiting{"CrashLoopBackOff", ""};
  backoff.last_state.terminated = terminated("process://crash1");
  auto done = status("done");
  done.state.terminated = terminated("");
  auto init = status("init");
  init.state.terminated = terminated("process://init1");
  pod.container_statuses = {running, waiting, backoff, done, status("new")};
  pod.init_container_statuses = {init};

  CHECK(logs::validateContainerLogStatus("web", pod, "app", false).value() == "process://run2");
  CHECK(logs::validateContainerLogStatus("web", pod, "app", true).value() == "process://run1");
  CHECK(logs::validateContainerLogStatus("web", pod, "crash", false).value() == "process://crash1");
  CHECK(logs::validateContainerLogStatus("web", pod, "init", false).value() == "process://init1");
  check_error("pull", false,
              "container \"pull\" in pod \"web\" is waiting to start: image "
              "can't be pulled");
  check_error("pull", true, "previous terminated container \"pull\" in pod \"web\" not found");
  check_error("done", false, "container \"done\" in pod \"web\" is terminated");
  check_error("new", false, "container \"new\" in pod \"web\" is waiting to start - no logs yet");
  pod.container_statuses[1].state.waiting->reason = "ContainerCreating";
  check_error("pull", false,
              "container \"pull\" in pod \"web\" is waiting to start: ContainerCreating");
}

TEST_CASE("readLogs: rotated files oldest first, then the live one, other files ignored",
          "[unit][logs]") {
  testing::TempDir dir("logs-test");
  testing::writeFile(dir / "0.log.20240102-030401", record(1, "one"));
  testing::writeFile(dir / "0.log.20240102-030401-1", record(2, "two"));
  testing::writeFile(dir / "0.log.20240102-030300", record(0, "zero"));
  testing::writeFile(dir / "0.log.20240102-030500.tmp", record(3, "temp"));
  testing::writeFile(dir / "1.log", record(3, "other"));
  testing::writeFile(dir / "0.log",
                     record(4, "live") + "garbage line\n" + record(5, "err", "F", "stderr"));
  auto r = readLogsOnce(dir / "0.log", {});
  CHECK(r.status.ok());
  CHECK(r.out == "zero\none\ntwo\nlive\nerr\n");

  auto missing = readLogsOnce(dir / "2.log", {});
  CHECK(missing.status.code() == base::StatusCode::kNotFound);
  CHECK(missing.status.message().find((dir / "2.log").string()) != std::string::npos);
}

TEST_CASE("readLogs: partial records join up, timestamps are kubelet's fixed nanoseconds",
          "[unit][logs]") {
  testing::TempDir dir("logs-test");
  testing::writeFile(dir / "0.log",
                     "2024-01-02T03:04:05.5Z stdout P hello \n"
                     "2024-01-02T03:04:06Z stdout P wor\n"
                     "2024-01-02T03:04:07.123456789Z stdout F ld\n"
                     "2024-01-02T03:04:08Z stdout F \n"
                     "2024-01-02T03:04:09+02:00 stderr F:x zone\n"
                     "2024-01-02T03:04:10Z stdout F unterminated");
  CHECK(readLogsOnce(dir / "0.log", {}).out == "hello world\n\nzone\nunterminated");
  logs::LogOptions ts;
  ts.timestamps = true;
  CHECK(readLogsOnce(dir / "0.log", ts).out ==
        "2024-01-02T03:04:05.500000000Z hello "
        "2024-01-02T03:04:06.000000000Z wor"
        "2024-01-02T03:04:07.123456789Z ld\n"
        "2024-01-02T03:04:08.000000000Z \n"
        "2024-01-02T03:04:09.000000000+02:00 zone\n"
        "2024-01-02T03:04:10.000000000Z unterminated");
}

TEST_CASE("readLogs: a record's overlong fraction and zone stay within the timestamp prefix",
          "[unit][logs]") {
  testing::TempDir dir("logs-test");
  const std::string digits(200, '7');
  const std::string zone(200, 'Z');
  testing::writeFile(dir / "0.log", "2024-01-02T03:04:05." + digits + "Z stdout F a\n" +
                                        "2024-01-02T03:04:06" + zone + " stdout F b\n");
  logs::LogOptions ts;
  ts.timestamps = true;
  const std::string out = readLogsOnce(dir / "0.log", ts).out;
  CHECK(out.rfind("2024-01-02T03:04:05.777777777Z a\n2024-01-02T03:04:06.000000000Z", 0) == 0);
  CHECK(out.size() < 2 * 48 + 4);
}

TEST_CASE("readLogs: sinceTime skips older records, limitBytes cuts the output", "[unit][logs]") {
  testing::TempDir dir("logs-test");
  testing::writeFile(dir / "0.log.20240102-030401", record(1, "a") + record(2, "b"));
  testing::writeFile(dir / "0.log", record(3, "c") + record(4, "d"));
  logs::LogOptions since;
  since.since_time = base::SystemTime(1704164642s);  // 03:04:02
  CHECK(readLogsOnce(dir / "0.log", since).out == "b\nc\nd\n");
  logs::LogOptions limit;
  limit.limit_bytes = 5;
  CHECK(readLogsOnce(dir / "0.log", limit).out == "a\nb\nc");
}

TEST_CASE("readLogs: tailLines counts lines from the end across files", "[unit][logs]") {
  testing::TempDir dir("logs-test");
  testing::writeFile(dir / "0.log.20240102-030401", record(1, "a") + record(2, "b"));
  testing::writeFile(dir / "0.log", record(3, "c") + record(4, "d"));
  auto tail = [&](int64_t n) {
    logs::LogOptions o;
    o.tail_lines = n;
    return readLogsOnce(dir / "0.log", o).out;
  };
  CHECK(tail(0) == "");
  CHECK(tail(1) == "d\n");
  CHECK(tail(3) == "b\nc\nd\n");
  CHECK(tail(10) == "a\nb\nc\nd\n");
  // An unterminated last line is not counted (kubelet's FindTailLineStartIndex) and the N lines
  // output stop before it.
  testing::writeFile(dir / "0.log", record(3, "c") + record(4, "d") + "2024-01-02T03:04:05Z std");
  CHECK(tail(1) == "d\n");
  // The live file empty: the tail comes from the rotated one.
  testing::writeFile(dir / "0.log", "");
  CHECK(tail(1) == "b\n");
}

TEST_CASE("readLogs: a large log reaches the sink in bounded pieces, a sink that stops ends it",
          "[unit][logs]") {
  testing::TempDir dir("logs-test");
  std::string content;
  std::string expected;
  for (int i = 0; i < 20000; ++i) {
    std::string text = "line " + std::to_string(i) + std::string(20, 'x');
    runtime::appendCriRecord(content, 1704164645'000000000LL + i, runtime::LogStream::kStdout,
                             false, text);
    expected += text + "\n";
  }
  testing::writeFile(dir / "0.log", content);
  auto all = readLogsOnce(dir / "0.log", {});
  CHECK(all.status.ok());
  CHECK(all.out == expected);
  CHECK(all.pieces.size() >= 4);
  for (size_t n : all.pieces) CHECK(n <= logs::kMaxSinkChunk);

  auto stopped = readLogsOnce(dir / "0.log", {}, 1);
  CHECK(stopped.status.ok());
  CHECK(stopped.pieces.size() == 1);
}
