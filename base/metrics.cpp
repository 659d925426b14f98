#include "base/metrics.h"

#include <algorithm>
#include <cmath>

namespace nodeagent::base {

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

}  // namespace nodeagent::base
