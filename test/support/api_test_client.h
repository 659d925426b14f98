// A REST client for an in-process test-apiserver, built from the kubeconfig the server writes.
#pragma once

#include <memory>

#include "api/async_rest_client.h"
#include "api/rest_client.h"
#include "base/asio.h"
#include "cmd/test-apiserver/test_api_server.h"

namespace nodeagent::testing {

// Fails the running test when the server's kubeconfig cannot be used.
std::unique_ptr<api::RestClient> clientFor(const testapiserver::TestApiServer& server);

// The pool for blocking API calls the daemon shares between its controllers, for a test: declare
// it after the RestClient it serves, so that it ends first (it shuts the client down, which ends
// the calls in flight, and joins its threads).
class ApiPool {
 public:
  explicit ApiPool(api::RestClient& client, size_t threads = 2) : client_(client), pool_(threads) {}
  ~ApiPool() {
    client_.shutdown();
    pool_.join();
  }
  ApiPool(const ApiPool&) = delete;
  ApiPool& operator=(const ApiPool&) = delete;
  api::AsyncRestClient async() { return {client_, pool_.get_executor()}; }

 private:
  api::RestClient& client_;
  asio::thread_pool pool_;
};

}  // namespace nodeagent::testing
