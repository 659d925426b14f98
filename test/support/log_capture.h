// LogCapture: collects one named logger's messages ("<level> <message>" lines) while alive, so a
// test can check what was logged and how often.
#pragma once

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/sinks/ostream_sink.h>

#include "base/log.h"

namespace nodeagent::testing {

class LogCapture {
 public:
  explicit LogCapture(std::string_view logger_name = "config")
      : logger_(base::logger(logger_name)), level_(logger_->level()) {
    sink_ = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    sink_->set_pattern("%l %v");
    logger_->sinks().push_back(sink_);
    logger_->set_level(spdlog::level::info);
  }
  ~LogCapture() {
    auto& sinks = logger_->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    logger_->set_level(level_);
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // Lines containing `needle`.
  std::vector<std::string> lines(const std::string& needle) {
    logger_->flush();
    std::vector<std::string> out;
    std::istringstream in(out_.str());
    for (std::string line; std::getline(in, line);) {
      if (line.find(needle) != std::string::npos) out.push_back(line);
    }
    return out;
  }

 private:
  std::shared_ptr<spdlog::logger> logger_;
  spdlog::level::level_enum level_;
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

}  // namespace nodeagent::testing
