// Blocking RestClient calls run from strands and coroutines: each call runs on the agent's one
// shared pool for blocking API calls and completes on the caller's executor, as an awaitable
// (resuming the awaiting coroutine on its own executor) or a callback posted to a given executor.
//
// AsyncRestClient is a cheap handle (a client and a pool), copied into every controller that talks
// to the apiserver. It owns neither: the owner of both (the daemon, a test) shuts the client down
// (which aborts calls in flight) and joins the pool before it destroys the client.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#include "api/rest_client.h"
#include "base/asio.h"
#include "base/blocking.h"
#include "base/clock.h"
#include "base/status.h"

namespace nodeagent::api {

class AsyncRestClient {
 public:
  AsyncRestClient(RestClient& client, asio::any_io_executor pool)
      : client_(&client), pool_(std::move(pool)) {}

  RestClient& client() const { return *client_; }

  // Runs `fn(client)` on the pool; resumes the awaiting coroutine on its own executor with the
  // result. (Not a coroutine itself: GCC 12 mishandles lambda temporaries inside co_await.)
  template <typename F>
  auto run(F fn) const -> asio::awaitable<std::invoke_result_t<F&, RestClient&>> {
    return base::runBlocking(pool_,
                             [client = client_, fn = std::move(fn)]() mutable { return fn(*client); });
  }

  // Runs `fn(client)` on the pool, then `done(result)` on `ex`.
  template <typename F, typename Done>
  void run(F fn, asio::any_io_executor ex, Done done) const {
    asio::post(pool_, [client = client_, ex = std::move(ex), fn = std::move(fn),
                       done = std::move(done)]() mutable {
      auto result = fn(*client);
      asio::post(ex, [done = std::move(done), result = std::move(result)]() mutable {
        done(std::move(result));
      });
    });
  }

  asio::awaitable<base::StatusOr<std::string>> request(std::string method, std::string path,
                                                       Query query, std::string body = {},
                                                       std::string content_type = {}) const;
  void request(std::string method, std::string path, Query query, std::string body,
               std::string content_type, asio::any_io_executor ex,
               std::function<void(base::StatusOr<std::string>)> done) const;

 private:
  RestClient* client_;
  asio::any_io_executor pool_;
};

// AsyncRestClient::run with `fn` copied outside the caller's co_await expression: GCC 12 destroys
// temporaries (and lambda captures) written inside a co_await expression twice, so callers pass
// named variables: `auto call = [...](api::RestClient& c) {...};
// auto r = co_await runOnPool(async, call);`
template <typename F>
auto runOnPool(const AsyncRestClient& async, const F& fn) {
  return async.run(fn);
}

// Runs `fn(client)` on `async`'s pool and resumes the awaiting coroutine on its own executor with
// the result, or with `on_timeout` once `timeout` has passed, whichever comes first (a late
// result is dropped; the call itself goes on until the client's own timeout). Any executor.
// Arguments are taken by reference and copied here, outside the caller's co_await expression
// (see runOnPool).
template <typename F, typename R = std::invoke_result_t<F&, RestClient&>>
asio::awaitable<R> runWithTimeout(const AsyncRestClient& async, base::Clock& clock,
                                  base::Duration timeout, const F& fn, const R& on_timeout) {
  auto init = [async, &clock, timeout, fn, on_timeout](auto handler) mutable {
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

}  // namespace nodeagent::api
