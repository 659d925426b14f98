#include "test/support/integration_env.h"

#include <stdexcept>

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

}  // namespace nodeagent::testing
