// The apiserver-backed MirrorClient (kubelet's pkg/kubelet/pod/mirror_client.go): makes every
// static pod visible in the apiserver as a mirror pod, a copy of the static pod annotated with
// kubernetes.io/config.mirror = its config hash and owned by this node's Node object.
//
// A static pod may be the apiserver itself (or etcd), so mirror calls must never hold up a pod's
// sync: each call runs on its own small pool, is bounded by `call_timeout` (the caller resumes
// with DeadlineExceeded while the request finishes in the background), and when too many calls
// are already stuck the next ones fail at once instead of queueing behind them.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include <nlohmann/json_fwd.hpp>

#include "api/rest_client.h"
#include "base/asio.h"
#include "base/clock.h"
#include "base/status.h"
#include "podmanager/mirror_client.h"

namespace nodeagent::agent {

// Runs `fn(client)` on `async`'s pool and resumes the awaiting coroutine on its own executor with
// the result, or with `on_timeout` once `timeout` has passed, whichever comes first (a late
// result is dropped). Any executor.
// Arguments are taken by reference and copied here, outside the caller's co_await expression:
// GCC 12 destroys temporaries (and lambda captures) written inside a co_await expression twice, so
// callers pass named variables.
template <typename F, typename R = std::invoke_result_t<F&, api::RestClient&>>
asio::awaitable<R> runWithTimeout(api::AsyncRestClient& async, base::Clock& clock,
                                  base::Duration timeout, const F& fn, const R& on_timeout) {
  auto init = [&async, &clock, timeout, fn, on_timeout](auto handler) mutable {
    using Handler = std::decay_t<decltype(handler)>;
    auto ex = asio::get_associated_executor(handler);
    asio::any_io_executor strand = asio::make_strand(ex);
    struct State {
      std::optional<Handler> handler;
      base::TimerPtr timer;
      bool done = false;
    };
    auto st = std::make_shared<State>();
    st->handler.emplace(std::move(handler));
    st->timer = clock.makeTimer(strand);
    // Runs on the strand only.
    auto finish = [st, ex](R result) {
      if (st->done) return;
      st->done = true;
      st->timer->cancel();
      auto h = std::move(*st->handler);
      st->handler.reset();
      asio::post(ex, [h = std::move(h), result = std::move(result)]() mutable {
        std::move(h)(std::move(result));
      });
    };
    asio::post(strand, [st, timeout, finish, on_timeout] {
      if (st->done) return;
      st->timer->asyncWaitFor(timeout, [finish, on_timeout] { finish(on_timeout); });
    });
    async.run(std::move(fn), strand, [finish](R result) { finish(std::move(result)); });
  };
  return asio::async_initiate<decltype(asio::use_awaitable), void(R)>(std::move(init),
                                                                      asio::use_awaitable);
}

// AsyncRestClient::run with `fn` copied outside the caller's co_await expression (see above):
// `auto call = [...](api::RestClient& c) {...}; auto r = co_await runOnPool(async, call);`
template <typename F>
auto runOnPool(api::AsyncRestClient& async, const F& fn) {
  return async.run(fn);
}

struct ApiMirrorClientOptions {
  std::string node_name;
  // The registered Node's UID (for the owner reference); "" while unknown, in which case the
  // client GETs the Node itself. Any thread.
  std::function<std::string()> node_uid;
  base::Duration call_timeout = std::chrono::seconds(5);
  // Calls still running (possibly past their timeout) beyond which new calls fail at once.
  int max_in_flight = 8;
};

class ApiMirrorClient final : public podmanager::MirrorClient {
 public:
  // `client` and `clock` must outlive the mirror client. Owns a pool of 2 threads.
  ApiMirrorClient(api::RestClient& client, base::Clock& clock, ApiMirrorClientOptions options);
  ~ApiMirrorClient() override;

  asio::awaitable<base::Status> createMirrorPod(api::PodPtr pod) override;
  asio::awaitable<base::StatusOr<bool>> deleteMirrorPod(std::string full_name,
                                                        std::optional<std::string> uid) override;

  uint64_t created() const { return created_.load(); }
  uint64_t deleted() const { return deleted_.load(); }

 private:
  api::AsyncRestClient async_;
  base::Clock& clock_;
  ApiMirrorClientOptions options_;
  std::shared_ptr<std::atomic<int>> in_flight_;
  std::atomic<uint64_t> created_{0};
  std::atomic<uint64_t> deleted_{0};
};

// The body of a mirror pod's POST: the static pod without uid/resourceVersion/creationTimestamp/
// status, with the config.mirror annotation and the Node owner reference.
nlohmann::json buildMirrorPod(const api::Pod& pod, const std::string& node_name,
                              const std::string& node_uid);

}  // namespace nodeagent::agent
