// libFuzzer target: arbitrary bytes through the static-pod decoder (YAML/JSON -> defaults ->
// decode -> validation). Any crash, hang, sanitizer report or broken invariant is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "config/static_pod.h"

namespace {

void check(bool cond) {
  if (!cond) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using nodeagent::config::decodeManifest;
  using nodeagent::config::ManifestSource;
  std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // The first byte's low bit picks the source, so both the file and HTTP paths are explored.
  bool http = size > 0 && (data[0] & 1) != 0;
  ManifestSource source{"Node1", http ? "http://10.0.0.1/pods" : "/etc/nodeagent/manifests/f.yaml",
                        !http};
  auto result = decodeManifest(bytes, source, /*allow_list=*/http);
  check(result.ok() == result.errors.empty());
  check(result.ok() || result.pods.empty());
  for (const auto& pod : result.pods) {
    check(pod != nullptr && pod->raw != nullptr && !pod->raw->empty());
    check(pod->metadata.uid.size() > 0);
    check(pod->spec->node_name == "node1");
    check(pod->status.phase == "Pending");
    check(nodeagent::config::validatePod(*pod).empty());
  }
  for (const auto& e : result.errors) check(!e.message.empty());
  return 0;
}
