#include "api/canonical_json.h"

#include <nlohmann/json.hpp>

namespace nodeagent::api {

std::string canonicalJson(const nlohmann::json& value) {
  // nlohmann::json keeps objects in a std::map, so keys already come out sorted by byte value
  // (the order Go's encoding/json uses). Input is UTF-8-checked before it gets here; the replace
  // handler only makes sure a stray invalid byte can never turn into an exception.
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Hash128 canonicalHash(const nlohmann::json& value) { return hash128(canonicalJson(value)); }

}  // namespace nodeagent::api
