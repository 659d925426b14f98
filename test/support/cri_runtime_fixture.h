// A CriRuntime on a containerd of the test's own, for the CRI runtime's integration tests: the
// test images imported, a client with a 60 s request timeout, the runtime's calls on a pool of
// two threads, and run() to drive a coroutine to completion. Integration tests only: it needs the
// CRI libraries, which the test support library does not link.
#pragma once

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "agent/runtime/cri/cri_runtime.h"
#include "base/clock.h"
#include "test/support/containerd.h"
#include "test/support/run_awaitable.h"

namespace nodeagent::testing {

// runAwaitable needs a default-constructible result; StatusOr is not.
template <typename T>
asio::awaitable<std::optional<T>> asOptional(asio::awaitable<T> aw) {
  T result = co_await std::move(aw);
  co_return std::optional<T>(std::move(result));
}

struct CriRuntimeFixture {
  TestContainerd containerd;
  asio::io_context ioc;
  asio::thread_pool pool{2};
  std::shared_ptr<runtime::cri::CriClient> client;
  std::unique_ptr<runtime::CriRuntime> runtime;

  explicit CriRuntimeFixture(TestContainerdOptions containerd_options = {})
      : containerd(std::move(containerd_options)) {
    containerd.importTestImages();
    auto made = runtime::cri::CriClient::create({containerd.endpoint(), std::chrono::seconds(60)});
    REQUIRE(made.ok());
    client = *std::move(made);
    runtime::CriRuntimeOptions options;
    options.pod_log_dir = containerd.dir() / "pods";
    options.blocking_executor = pool.get_executor();
    runtime = std::make_unique<runtime::CriRuntime>(client, base::realClock(), options);
  }
  ~CriRuntimeFixture() {
    // A failed test leaves its sandbox: remove it (and its containers) before containerd stops.
    auto sandboxes = client->listPodSandbox();
    if (sandboxes.ok()) {
      for (const auto& s : *sandboxes) {
        client->stopPodSandbox(s.id).ignoreError();
        client->removePodSandbox(s.id).ignoreError();
      }
    }
    pool.join();
  }
  CriRuntimeFixture(const CriRuntimeFixture&) = delete;
  CriRuntimeFixture& operator=(const CriRuntimeFixture&) = delete;

  // Runs `aw` on ioc until it completes; its result.
  template <typename T>
  T run(asio::awaitable<T> aw) {
    auto result = runAwaitable(ioc, asOptional(std::move(aw)));
    REQUIRE(result.has_value());
    return *std::move(result);
  }
};

}  // namespace nodeagent::testing
