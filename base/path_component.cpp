#include "base/path_component.h"

#include "base/printable.h"

namespace nodeagent::base {

std::string pathComponentProblem(std::string_view name) {
  if (name.empty()) return "must not be empty";
  if (name == ".") return "must not be '.'";
  if (name == "..") return "must not be '..'";
  if (name.find('/') != std::string_view::npos) return "must not contain '/'";
  if (name.find('\0') != std::string_view::npos) return "must not contain a NUL byte";
  if (name.size() > kMaxPathComponentBytes) {
    return "must be no more than " + std::to_string(kMaxPathComponentBytes) + " bytes";
  }
  return {};
}

Status checkPathComponent(std::string_view what, std::string_view name) {
  std::string problem = pathComponentProblem(name);
  if (problem.empty()) return okStatus();
  return invalidArgumentError(std::string(what) + " " + goQuote(name) +
                              " is not a valid path component: " + problem);
}

StatusOr<std::filesystem::path> childPath(const std::filesystem::path& dir, std::string_view what,
                                          std::string_view name) {
  if (auto s = checkPathComponent(what, name); !s.ok()) return s;
  return dir / std::string(name);
}

}  // namespace nodeagent::base
