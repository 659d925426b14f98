#include "test/support/api_test_client.h"

#include <catch2/catch.hpp>

#include "api/kubeconfig.h"
#include "base/clock.h"

namespace nodeagent::testing {

std::unique_ptr<api::RestClient> clientFor(const testapiserver::TestApiServer& server) {
  auto config = api::parseKubeconfig(server.kubeconfig(), ".", "test kubeconfig");
  REQUIRE(config.ok());
  auto client = api::RestClient::create(*config, {}, base::realClock());
  REQUIRE(client.ok());
  return std::move(*client);
}

}  // namespace nodeagent::testing
