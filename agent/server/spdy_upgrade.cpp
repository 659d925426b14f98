#include "agent/server/spdy_upgrade.h"

#include <algorithm>
#include <utility>

#include "agent/server/kubelet_request.h"
#include "base/strings.h"

namespace nodeagent::agent {
namespace {

constexpr std::string_view kSpdyUpgrade = "SPDY/3.1";
constexpr std::string_view kProtocolHeader = "X-Stream-Protocol-Version";

// Every item of the comma-separated lists of the headers named `name`, trimmed, in order.
std::vector<std::string_view> headerItems(const HttpRequest& request, std::string_view name) {
  std::vector<std::string_view> items;
  for (const auto& [n, value] : request.headers) {
    if (!base::iequals(n, name)) continue;
    std::string_view list = value;
    while (true) {
      const size_t comma = list.find(',');
      std::string_view item = list.substr(0, comma);
      while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
      while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
      if (!item.empty()) items.push_back(item);
      if (comma == std::string_view::npos) break;
      list.remove_prefix(comma + 1);
    }
  }
  return items;
}

std::string joined(const std::vector<std::string>& list) {
  std::string out;
  for (const auto& item : list) out += (out.empty() ? "" : " ") + item;
  return out;
}

}  // namespace

bool headerOffers(const HttpRequest& request, std::string_view name, std::string_view token) {
  const auto items = headerItems(request, name);
  return std::find(items.begin(), items.end(), token) != items.end();
}

bool hasHeader(const HttpRequest& request, std::string_view name) {
  return std::any_of(request.headers.begin(), request.headers.end(),
                     [&](const auto& h) { return base::iequals(h.first, name); });
}

bool isSpdyUpgrade(const HttpCall& call) {
  return base::iequals(call.upgradeProtocol(), kSpdyUpgrade);
}

asio::awaitable<SpdyUpgrade> acceptSpdyUpgrade(HttpCall& call,
                                               std::vector<std::string> server_protocols) {
  SpdyUpgrade upgrade;
  std::optional<HttpResponse> refusal;
  if (!isSpdyUpgrade(call)) {
    refusal = statusResponse(400, "unable to upgrade: missing upgrade headers in request");
  } else if (hasHeader(call.request(), kProtocolHeader)) {
    const auto offered = headerItems(call.request(), kProtocolHeader);
    const auto agreed = std::find_if(offered.begin(), offered.end(), [&](std::string_view p) {
      return std::find(server_protocols.begin(), server_protocols.end(), p) !=
             server_protocols.end();
    });
    if (agreed == offered.end()) {
      refusal =
          statusResponse(403, "unable to upgrade: unable to negotiate protocol: server accepts [" +
                                  joined(server_protocols) + "]");
    } else {
      upgrade.protocol = std::string(*agreed);
    }
  }
  if (refusal) {
    auto refusing = call.respond(std::move(*refusal));
    co_await std::move(refusing);
    co_return upgrade;
  }
  std::vector<std::pair<std::string, std::string>> headers{{"Connection", "Upgrade"},
                                                           {"Upgrade", std::string(kSpdyUpgrade)}};
  if (!upgrade.protocol.empty()) headers.emplace_back(kProtocolHeader, upgrade.protocol);
  auto accepting = call.acceptUpgrade(std::move(headers));
  upgrade.transport = co_await std::move(accepting);
  co_return upgrade;
}

}  // namespace nodeagent::agent
