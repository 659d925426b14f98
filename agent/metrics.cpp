#include "agent/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "agent/runtime/shim_processes.h"
#include "agent/runtime/state_file.h"

namespace nodeagent::agent {

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), buckets_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // negative or NaN
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), seconds) -
                                       bounds_.begin());
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(std::llround(seconds * 1e9)), std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

void Histogram::write(std::ostream& out, std::string_view name, std::string_view labels) const {
  const std::string sep = labels.empty() ? "" : ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += buckets_[i].load(std::memory_order_relaxed);
    out << name << "_bucket{" << labels << sep << "le=\"";
    if (i < bounds_.size()) {
      out << bounds_[i];
    } else {
      out << "+Inf";
    }
    out << "\"} " << cumulative << '\n';
  }
  const std::string braces = labels.empty() ? "" : "{" + std::string(labels) + "}";
  const auto precision = out.precision(15);  // a long-running sum keeps its sub-second digits
  out << name << "_sum" << braces << ' ' << static_cast<double>(sum_ns_.load()) / 1e9 << '\n';
  out.precision(precision);
  out << name << "_count" << braces << ' ' << cumulative << '\n';
}

void writeMetricHeader(std::ostream& out, std::string_view name, std::string_view type,
                       std::string_view help) {
  out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n';
}

void writeProcessMetrics(std::ostream& out) {
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const auto page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const runtime::ProcStat st = runtime::readProcStat(::getpid()).value_or(runtime::ProcStat{});
  writeMetricHeader(out, "process_cpu_seconds_total", "counter",
                    "Total user and system CPU time spent in seconds.");
  out << "process_cpu_seconds_total "
      << static_cast<double>(st.utime_ticks + st.stime_ticks) / ticks << '\n';
  writeMetricHeader(out, "process_resident_memory_bytes", "gauge",
                    "Resident memory size in bytes.");
  out << "process_resident_memory_bytes " << st.rss_pages * page << '\n';
  writeMetricHeader(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
  out << "process_virtual_memory_bytes " << st.vsize_bytes << '\n';
  writeMetricHeader(out, "process_start_time_seconds", "gauge",
                    "Start time of the process since unix epoch in seconds.");
  out << "process_start_time_seconds " << runtime::processStartNanos(st.start_ticks) / 1000000000
      << '\n';
  std::error_code ec;
  size_t fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  writeMetricHeader(out, "process_open_fds", "gauge", "Number of open file descriptors.");
  out << "process_open_fds " << fds << '\n';
  rlimit lim{};
  ::getrlimit(RLIMIT_NOFILE, &lim);
  writeMetricHeader(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
  out << "process_max_fds " << lim.rlim_cur << '\n';
}

}  // namespace nodeagent::agent
