// What integration tests run a runtime or the whole agent on: an io_context served by background
// threads, a ProcessRuntime in a test's temp dir with the built nodeagent-shim, and a loopback
// port nothing listens on.
#pragma once

#include <filesystem>
#include <memory>
#include <thread>
#include <vector>

#include "agent/runtime/process_runtime.h"
#include "base/asio.h"

namespace nodeagent::testing {

// An io_context kept running by a work guard, served by the threads start() adds. stop() (also
// run by the destructor) lets go of the guard, stops the context and joins the threads.
class IoThreads {
 public:
  IoThreads();
  ~IoThreads();
  IoThreads(const IoThreads&) = delete;
  IoThreads& operator=(const IoThreads&) = delete;

  asio::io_context& context() { return ioc_; }
  asio::io_context::executor_type executor() { return ioc_.get_executor(); }
  // Runs the context on `count` more threads.
  void start(int count);
  // Idempotent.
  void stop();

 private:
  asio::io_context ioc_;
  asio::executor_work_guard<asio::io_context::executor_type> guard_;
  std::vector<std::thread> threads_;
};

// `options` with container state under <dir>/root, logs under <dir>/logs and the built
// nodeagent-shim.
runtime::ProcessRuntimeOptions processRuntimeOptions(const std::filesystem::path& dir,
                                                     runtime::ProcessRuntimeOptions options = {});

// A ProcessRuntime on the real clock whose recover() succeeded (else std::runtime_error, which
// fails the current test; no Catch here, so benches link this file too).
std::unique_ptr<runtime::ProcessRuntime> makeProcessRuntime(
    asio::any_io_executor executor, const runtime::ProcessRuntimeOptions& options);

// A loopback port nothing listens on: bound, then released.
int unusedLoopbackPort();

// A loopback port where connections are refused for the whole test: one below the kernel's
// ephemeral range (ip_local_port_range), which is free when chosen. No port-0 bind of a concurrent
// test and no outgoing connection's source port is ever taken from there, so nothing starts to
// listen on it and a connect to it cannot meet itself (TCP self-connect, which an ephemeral port
// allows).
int refusedLoopbackPort();

}  // namespace nodeagent::testing
