// Logging: one named spdlog logger per module ("config", "podworkers", ...), all writing to one
// stderr sink with the logger name in each line. `--v` maps kubelet's verbosity onto spdlog levels:
// 0-3 info, 4-5 debug, 6+ trace. SPDLOG_LEVEL (e.g. "config=debug,info") overrides per logger.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include <spdlog/spdlog.h>

namespace nodeagent::base {

struct LogOptions {
  int verbosity = 0;
  // When false, logs are dropped below warn (tests and quiet subcommands).
  bool quiet = false;
};

// Sets the level of every existing and future logger. Safe to call more than once.
void initLogging(const LogOptions& options);

// The named logger, created on first use (any thread).
std::shared_ptr<spdlog::logger> logger(std::string_view name);

spdlog::level::level_enum levelForVerbosity(int verbosity);

}  // namespace nodeagent::base
