// Canonical JSON: object keys sorted, no insignificant white space, numbers as parsed. The same
// value always prints the same bytes, so hashes of canonical JSON are stable.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "api/hash.h"

namespace nodeagent::api {

std::string canonicalJson(const nlohmann::json& value);
Hash128 canonicalHash(const nlohmann::json& value);

}  // namespace nodeagent::api
