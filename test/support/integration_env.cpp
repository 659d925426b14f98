#include "test/support/integration_env.h"

#include <fstream>
#include <random>
#include <stdexcept>
#include <utility>

#include "base/clock.h"
#include "test/support/test_util.h"

namespace nodeagent::testing {

IoThreads::IoThreads() : guard_(asio::make_work_guard(ioc_)) {}

IoThreads::~IoThreads() { stop(); }

void IoThreads::start(int count) {
  for (int i = 0; i < count; ++i) threads_.emplace_back([this] { ioc_.run(); });
}

void IoThreads::stop() {
  guard_.reset();
  ioc_.stop();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

runtime::ProcessRuntimeOptions processRuntimeOptions(const std::filesystem::path& dir,
                                                     runtime::ProcessRuntimeOptions options) {
  options.root_dir = dir / "root";
  options.pod_log_dir = dir / "logs";
  options.shim_path = binaryPath("nodeagent-shim");
  return options;
}

std::unique_ptr<runtime::ProcessRuntime> makeProcessRuntime(
    asio::any_io_executor executor, const runtime::ProcessRuntimeOptions& options) {
  auto rt =
      std::make_unique<runtime::ProcessRuntime>(std::move(executor), base::realClock(), options);
  if (auto st = rt->recover(); !st.ok())
    throw std::runtime_error("ProcessRuntime::recover: " + st.toString());
  return rt;
}

int unusedLoopbackPort() {
  asio::io_context ioc;
  asio::ip::tcp::acceptor acceptor(ioc, {asio::ip::address_v4::loopback(), 0});
  int port = acceptor.local_endpoint().port();
  acceptor.close();
  return port;
}

int refusedLoopbackPort() {
  int low = 32768, high = 60999;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> low >> high;
  // Below the range, above the well-known ports; above it when the range starts low.
  const auto [first, last] = low > 11000 ? std::pair(10000, low - 1) : std::pair(high + 1, 65535);
  if (first > last) throw std::runtime_error("no loopback port outside the ephemeral range");
  std::mt19937 rng(std::random_device{}());
  asio::io_context ioc;
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = std::uniform_int_distribution<int>(first, last)(rng);
    asio::ip::tcp::acceptor acceptor(ioc);
    boost::system::error_code ec;
    acceptor.open(asio::ip::tcp::v4(), ec);
    if (!ec) acceptor.bind({asio::ip::address_v4::loopback(), static_cast<uint16_t>(port)}, ec);
    if (!ec) return port;
  }
  throw std::runtime_error("no free loopback port outside the ephemeral range");
}

}  // namespace nodeagent::testing
