// `nodeagent-shim spawner` (spawner.cpp): the agent's spawn helper for container shims.
#pragma once

namespace nodeagent::shim {

// Serves spawn requests on fd 3 (agent/runtime/spawn.h) until the agent's end closes. Returns the
// exit code.
int spawnerMode();

}  // namespace nodeagent::shim
