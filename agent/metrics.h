// The standard process_* metrics of this process (as Prometheus client libraries export them), and
// the Prometheus building blocks of base/metrics.h under the agent's names.
#pragma once

#include <ostream>

#include "base/metrics.h"

namespace nodeagent::agent {

using base::Histogram;
using base::ScopedTimer;
using base::writeMetricHeader;

// process_cpu_seconds_total, process_resident_memory_bytes, process_virtual_memory_bytes,
// process_open_fds, process_max_fds and process_start_time_seconds of this process.
void writeProcessMetrics(std::ostream& out);

}  // namespace nodeagent::agent
