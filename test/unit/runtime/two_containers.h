// The pod the security profile tests read: "p" with containers "app" and "side".
#pragma once

#include "test/support/pod_builder.h"

namespace nodeagent::testing {

inline PodBuilder twoContainers() {
  return PodBuilder().name("p").uid("u").container("app", {"sleep"}).container("side", {"sleep"});
}

}  // namespace nodeagent::testing
