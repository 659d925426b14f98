// The typing of plain YAML scalars (gopkg.in/yaml.v2's resolve()), private to api/: yaml.cpp's
// event builder resolves scalars with it, resolvePlainScalar (yaml.h) exposes it to tests.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace nodeagent::api::yaml_internal {

struct Resolved {
  nlohmann::json value;
  std::string error;  // non-empty: the scalar cannot be represented
};

// Whether resolvePlain gives `s` back as a string without looking further: not one of the fixed
// words and not starting like a number.
bool staysString(std::string_view s);

// A plain (unquoted, untagged) scalar typed like yaml.v2's resolve(). Takes `in` by value: a
// string result moves it.
Resolved resolvePlain(std::string in);

}  // namespace nodeagent::api::yaml_internal
