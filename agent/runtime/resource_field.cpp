#include "agent/runtime/resource_field.h"

#include <optional>
#include <string_view>

#include "agent/runtime/runtime.h"

namespace nodeagent::runtime {
namespace {

const api::Quantity* find(const std::map<std::string, api::Quantity>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? nullptr : &it->second;
}

// ceil(a / b) for b > 0, as kubelet's math.Ceil of the quotient.
int64_t ceilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0 && (a > 0) == (b > 0) ? 1 : 0); }

// The node allocatable a missing limit of `name` reads as; nullopt for resources without one.
std::optional<int64_t> allocatableUnits(const std::string& name,
                                        const NodeAllocatableResources& node) {
  if (name == "cpu") return node.cpu_milli;
  if (name == "memory") return node.memory_bytes;
  if (name == "ephemeral-storage") return node.ephemeral_storage_bytes;
  return std::nullopt;
}

}  // namespace

base::StatusOr<std::string> resolveResourceFieldRef(const api::Pod& pod, const api::Container* self,
                                                    const api::ResourceFieldSelector& selector,
                                                    const NodeAllocatableResources& node) {
  const api::Container* container = self;
  if (!selector.container_name.empty() || self == nullptr) {
    if (selector.container_name.empty()) {
      return base::invalidArgumentError("resourceFieldRef.containerName: Required value");
    }
    container = findSpecContainer(pod, selector.container_name);
    if (container == nullptr) {
      return base::invalidArgumentError("resourceFieldRef: container " + selector.container_name +
                                        " not found in the pod");
    }
  }
  const std::string& resource = selector.resource;
  const bool limit = resource.starts_with("limits.");
  if (!limit && !resource.starts_with("requests.")) {
    return base::invalidArgumentError("unsupported container resource : " + resource);
  }
  const std::string name = resource.substr(limit ? 7 : 9);
  const bool cpu = name == "cpu";
  if (!cpu && name != "memory" && name != "ephemeral-storage" && !name.starts_with("hugepages-")) {
    return base::invalidArgumentError("unsupported container resource : " + resource);
  }
  const auto& limits = container->resources.limits;
  const api::Quantity* set = limit ? nullptr : find(container->resources.requests, name);
  if (set == nullptr) set = find(limits, name);  // a request defaults to the limit
  int64_t units = 0;                             // milli-CPUs or bytes
  if (set != nullptr) {
    units = cpu ? set->milliValue() : set->value();
  } else if (limit) {
    units = allocatableUnits(name, node).value_or(0);
  }
  const api::Quantity divisor = selector.divisor.value_or(api::Quantity::fromValue(1));
  const int64_t per = cpu ? divisor.milliValue() : divisor.value();
  if (per <= 0) {
    return base::invalidArgumentError("resourceFieldRef " + resource + ": divisor " +
                                      divisor.toString() + " is not positive");
  }
  return std::to_string(ceilDiv(units, per));
}

}  // namespace nodeagent::runtime
