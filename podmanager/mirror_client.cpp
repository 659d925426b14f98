#include "podmanager/mirror_client.h"

#include "api/pod_update.h"

namespace nodeagent::podmanager {

asio::awaitable<base::Status> NoopMirrorClient::createMirrorPod(api::PodPtr /*pod*/) {
  co_return base::okStatus();
}

asio::awaitable<base::StatusOr<bool>> NoopMirrorClient::deleteMirrorPod(
    std::string full_name, std::optional<std::string> /*uid*/) {
  // Same validation as the real client so that callers see one behaviour with or without an
  // apiserver.
  auto parsed = api::parsePodFullName(full_name);
  if (!parsed.ok()) co_return parsed.status();
  co_return false;
}

}  // namespace nodeagent::podmanager
