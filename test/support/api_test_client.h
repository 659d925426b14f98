// A REST client for an in-process test-apiserver, built from the kubeconfig the server writes.
#pragma once

#include <memory>

#include "api/rest_client.h"
#include "cmd/test-apiserver/test_api_server.h"

namespace nodeagent::testing {

// Fails the running test when the server's kubeconfig cannot be used.
std::unique_ptr<api::RestClient> clientFor(const testapiserver::TestApiServer& server);

}  // namespace nodeagent::testing
