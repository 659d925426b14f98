// /containerLogs read throughput: a 100 MiB CRI log (one rotated file and the live one) read
// through logs::readLogs on an io_context thread with file reads on a pool thread, against a
// plain read of the same bytes. Prints MB/s without and with timestamps, and the time of
// tailLines=10 (which must not read the whole log).
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "agent/logs/container_logs.h"
#include "agent/runtime/cri_log.h"
#include "base/clock.h"
#include "test/support/test_util.h"

namespace {

using namespace nodeagent;
using SteadyClock = std::chrono::steady_clock;

constexpr size_t kLogBytes = 100u << 20;

// Records of 40 to 200 bytes of text, one in 50 split into partial pieces.
size_t writeLog(const std::filesystem::path& rotated, const std::filesystem::path& live) {
  std::string data;
  data.reserve(kLogBytes / 2 + 4096);
  size_t total = 0;
  int64_t nanos = 1704164645'000000000LL;
  for (int i = 0; total < kLogBytes; ++i) {
    std::string text(40 + (i * 37) % 160, 'a' + i % 26);
    nanos += 1234567;
    runtime::appendCriRecord(data, nanos, runtime::LogStream::kStdout, i % 50 == 0, text);
    if (data.size() >= kLogBytes / 2 || total + data.size() >= kLogBytes) {
      bool first = total == 0;
      testing::writeFile(first ? rotated : live, data);
      total += data.size();
      data.clear();
    }
  }
  return total;
}

double plainRead(const std::filesystem::path& rotated, const std::filesystem::path& live) {
  auto start = SteadyClock::now();
  std::string buf(256 * 1024, '\0');
  size_t bytes = 0;
  for (const auto& p : {rotated, live}) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) bytes += static_cast<size_t>(n);
    ::close(fd);
  }
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return static_cast<double>(bytes) / secs / 1e6;
}

// Seconds to read the log with `options`; `out_bytes` gets the output size.
double timeRead(const std::filesystem::path& live, logs::LogOptions options, size_t& out_bytes) {
  asio::io_context ioc;
  asio::thread_pool pool(1);
  out_bytes = 0;
  logs::LogSink sink = [&](std::string_view data) -> asio::awaitable<bool> {
    out_bytes += data.size();
    co_return true;
  };
  base::Status status;
  auto start = SteadyClock::now();
  auto task = logs::readLogs(live, std::move(options), sink, nullptr, pool.get_executor(),
                             base::realClock());
  asio::co_spawn(ioc, std::move(task), [&](std::exception_ptr, base::Status s) { status = s; });
  ioc.run();
  double secs = std::chrono::duration<double>(SteadyClock::now() - start).count();
  pool.join();
  if (!status.ok()) std::fprintf(stderr, "readLogs: %s\n", status.toString().c_str());
  return secs;
}

}  // namespace

int main() {
  testing::TempDir dir("log-read-bench");
  auto rotated = dir / "0.log.20240102-030405";
  auto live = dir / "0.log";
  size_t total = writeLog(rotated, live);
  std::printf("log: %.1f MiB in 2 files\n", static_cast<double>(total) / (1 << 20));
  plainRead(rotated, live);  // warm the page cache
  std::printf("plain read(2), 256 KiB chunks:   %8.0f MB/s\n", plainRead(rotated, live));
  for (bool timestamps : {false, true}) {
    logs::LogOptions options;
    options.timestamps = timestamps;
    size_t out = 0;
    double secs = timeRead(live, options, out);
    std::printf("readLogs timestamps=%-5s         %8.0f MB/s of log (%.1f MiB out, %.3f s)\n",
                timestamps ? "true" : "false", static_cast<double>(total) / secs / 1e6,
                static_cast<double>(out) / (1 << 20), secs);
  }
  logs::LogOptions tail;
  tail.tail_lines = 10;
  size_t out = 0;
  double secs = timeRead(live, tail, out);
  std::printf("readLogs tailLines=10:           %8.3f ms (%zu bytes out)\n", secs * 1e3, out);
  return 0;
}
