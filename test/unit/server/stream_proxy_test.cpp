// The streaming proxy's pure parts: the runtime's URL, and the request sent on to it.
#include <catch2/catch.hpp>

#include "agent/server/stream_proxy.h"

using namespace nodeagent;
using namespace nodeagent::agent;

TEST_CASE("stream proxy: the runtime's streaming URL", "[unit][server]") {
  auto url = parseStreamUrl("http://127.0.0.1:34567/exec/AbCd?x=1");
  REQUIRE(url.ok());
  CHECK(url->host == "127.0.0.1");
  CHECK(url->port == "34567");
  CHECK(url->target == "/exec/AbCd?x=1");

  auto v6 = parseStreamUrl("http://[::1]:8080/attach/t");
  REQUIRE(v6.ok());
  CHECK(v6->host == "::1");
  CHECK(v6->port == "8080");

  auto no_port = parseStreamUrl("http://localhost/portforward/t");
  REQUIRE(no_port.ok());
  CHECK(no_port->port == "80");
  CHECK(parseStreamUrl("http://127.0.0.1:1").value().target == "/");

  auto tls = parseStreamUrl("https://127.0.0.1:1/exec/t");
  CHECK(tls.status().code() == base::StatusCode::kInvalidArgument);
  CHECK_THAT(tls.status().message(), Catch::Contains("TLS"));
  CHECK_FALSE(parseStreamUrl("http://127.0.0.1:1/exec/t x").ok());
  CHECK_FALSE(parseStreamUrl("http://:1/exec").ok());
}

TEST_CASE("stream proxy: the request goes on without the client's credentials", "[unit][server]") {
  HttpRequest request;
  request.method = "POST";
  request.target = "/exec/default/web/main?command=true&stdout=1";
  request.headers = {{"Host", "node:10250"},
                     {"Authorization", "Bearer secret-token"},
                     {"Connection", "Upgrade"},
                     {"Upgrade", "SPDY/3.1"},
                     {"X-Stream-Protocol-Version", "v4.channel.k8s.io"},
                     {"Content-Length", "0"}};
  auto url = parseStreamUrl("http://127.0.0.1:4000/exec/tok");
  REQUIRE(url.ok());
  const std::string head = proxiedRequestHead(request, *url);
  CHECK(head ==
        "POST /exec/tok HTTP/1.1\r\nHost: 127.0.0.1:4000\r\nConnection: Upgrade\r\n"
        "Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n");
  CHECK(head.find("secret-token") == std::string::npos);
}
