#include "agent/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>

#include "agent/runtime/shim_processes.h"
#include "agent/runtime/state_file.h"

namespace nodeagent::agent {

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
