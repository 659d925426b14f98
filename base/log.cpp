#include "base/log.h"

#include <mutex>

#include <spdlog/cfg/env.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace nodeagent::base {
namespace {

std::mutex& mu() {
  static std::mutex m;
  return m;
}

spdlog::sink_ptr& sharedSink() {
  static spdlog::sink_ptr sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  return sink;
}

spdlog::level::level_enum& currentLevel() {
  static spdlog::level::level_enum level = spdlog::level::info;
  return level;
}

}  // namespace

spdlog::level::level_enum levelForVerbosity(int verbosity) {
  if (verbosity >= 6) return spdlog::level::trace;
  if (verbosity >= 4) return spdlog::level::debug;
  return spdlog::level::info;
}

void initLogging(const LogOptions& options) {
  std::lock_guard lock(mu());
  currentLevel() = options.quiet ? spdlog::level::warn : levelForVerbosity(options.verbosity);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %^%L%$ %n [%t] %v", spdlog::pattern_time_type::utc);
  spdlog::set_level(currentLevel());
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& l) { l->set_level(currentLevel()); });
  spdlog::cfg::load_env_levels();
}

std::shared_ptr<spdlog::logger> logger(std::string_view name) {
  std::string key(name);
  if (auto existing = spdlog::get(key)) return existing;
  std::lock_guard lock(mu());
  if (auto existing = spdlog::get(key)) return existing;
  auto l = std::make_shared<spdlog::logger>(key, sharedSink());
  l->set_level(currentLevel());
  l->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %^%L%$ %n [%t] %v", spdlog::pattern_time_type::utc);
  spdlog::register_logger(l);
  return l;
}

}  // namespace nodeagent::base
