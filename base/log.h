// Logging: one named spdlog logger per module ("config", "podworkers", ...), all writing to one
// stderr sink with the logger name in each line. `--v` maps kubelet's verbosity onto spdlog levels:
// 0-3 info, 4-5 debug, 6+ trace. SPDLOG_LEVEL (e.g. "config=debug,info") overrides per logger.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace nodeagent::base {

enum class LogFormat {
  // `2026-12-01T10:00:00.000000Z I config [tid] Message key=value key="a value"`: values that
  // are empty or hold spaces, quotes or control characters are Go-quoted.
  kText,
  // One JSON object per line (kubelet's --logging-format=json): ts, level, logger, thread, msg
  // and one string member per key=value of the message.
  kJson,
};

struct LogOptions {
  int verbosity = 0;
  // When false, logs are dropped below warn (tests and quiet subcommands).
  bool quiet = false;
  LogFormat format = LogFormat::kText;
};

// One log line (with its newline) as the format writes it. `payload` is a message in nodeagent's
// convention, "Text words key=value key2=value"; a value runs to the next " key=" unless it
// starts with a double quote (then it is a Go-quoted string).
std::string formatLogLine(LogFormat format, std::chrono::system_clock::time_point time, char level,
                          std::string_view logger, uint64_t thread, std::string_view payload);

// Sets the level of every existing and future logger. Safe to call more than once.
void initLogging(const LogOptions& options);

// The named logger, created on first use (any thread). Code gets it through NODEAGENT_LOGGER.
std::shared_ptr<spdlog::logger> logger(std::string_view name);

spdlog::level::level_enum levelForVerbosity(int verbosity);

}  // namespace nodeagent::base

// The one way a file gets its module's logger: `NODEAGENT_LOGGER("agent")` in the .cpp's anonymous
// namespace (or once in a private header shared by a module's files) defines `log()`, which looks
// the logger up once and then returns it.
#define NODEAGENT_LOGGER(module)                                         \
  [[maybe_unused]] inline const std::shared_ptr<spdlog::logger>& log() { \
    static const std::shared_ptr<spdlog::logger> module_logger =         \
        ::nodeagent::base::logger(module);                               \
    return module_logger;                                                \
  }
