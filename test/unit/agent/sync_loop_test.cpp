// The sync loop's timers on the fake clock: the tick the systemd watchdog is fed by, and
// housekeeping held back (and counted) while a source is not ready.
#include <catch2/catch.hpp>

#include <atomic>

#include "agent/pleg.h"
#include "agent/sync_loop.h"
#include "test/support/fake_clock.h"

using namespace nodeagent;
using namespace std::chrono_literals;

namespace {

struct CountingHandler final : agent::SyncHandler {
  void handlePodAdditions(const api::ChunkedPods&) override {}
  void handlePodUpdates(const api::ChunkedPods&) override {}
  void handlePodRemoves(const api::ChunkedPods&) override {}
  void handlePodReconcile(const api::ChunkedPods&) override {}
  void handlePodSyncs(const std::vector<api::PodPtr>&) override {}
  void handlePlegEvent(const agent::PodLifecycleEvent&) override {}
  std::vector<api::PodPtr> podsToSync() override {
    ++ticks;
    return {};
  }
  void handlePodCleanups() override { ++cleanups; }
  int ticks = 0;
  int cleanups = 0;
};

}  // namespace

TEST_CASE(
    "sync loop: lastTick moves with every tick, housekeeping waits for the sources and "
    "counts the periods it waited",
    "[unit][agent][syncloop]") {
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  CountingHandler handler;
  std::atomic<bool> ready{false};
  auto loop = std::make_shared<agent::SyncLoop>(ioc.get_executor(), clock, handler,
                                                [&ready] { return ready.load(); });
  loop->start();
  ioc.poll();
  const auto started = loop->lastTick();
  CHECK(started == clock.now());

  clock.advance(1s);
  ioc.poll();
  CHECK(handler.ticks == 1);
  CHECK(loop->lastTick() == clock.now());

  clock.advance(1s);  // the first housekeeping period: a source is not ready
  ioc.poll();
  clock.advance(2s);
  ioc.poll();
  CHECK(handler.cleanups == 0);
  CHECK(loop->housekeepingWaitingForSources() == 2);

  ready = true;
  clock.advance(2s);
  ioc.poll();
  CHECK(handler.cleanups == 1);
  CHECK(loop->housekeepingWaitingForSources() == 2);
  CHECK(loop->lastTick() == clock.now());
  loop->stop();
  ioc.poll();
}

TEST_CASE(
    "sync loop: a late tick does not push the next one back, and housekeeping falls on a tick",
    "[unit][agent][syncloop]") {
  asio::io_context ioc;
  auto guard = asio::make_work_guard(ioc);
  testing::FakeClock clock;
  CountingHandler handler;
  auto loop =
      std::make_shared<agent::SyncLoop>(ioc.get_executor(), clock, handler, [] { return true; });
  loop->start();
  ioc.poll();

  clock.advance(1300ms);  // the first tick runs 300 ms late
  ioc.poll();
  CHECK(handler.ticks == 1);
  clock.advance(699ms);
  ioc.poll();
  CHECK(handler.ticks == 1);
  clock.advance(1ms);  // 2 s after the start, not 1 s after the late tick
  ioc.poll();
  CHECK(handler.ticks == 2);
  CHECK(handler.cleanups == 1);  // housekeeping, due at the same instant

  clock.advance(2500ms);  // a stall over two periods: one tick for them, then the phase again
  ioc.poll();
  CHECK(handler.ticks == 3);
  CHECK(handler.cleanups == 2);
  clock.advance(500ms);  // 5 s
  ioc.poll();
  CHECK(handler.ticks == 4);
  CHECK(handler.cleanups == 2);
  clock.advance(1s);  // 6 s: both again
  ioc.poll();
  CHECK(handler.ticks == 5);
  CHECK(handler.cleanups == 3);
  loop->stop();
  ioc.poll();
}
