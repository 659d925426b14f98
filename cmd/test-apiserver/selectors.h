// Label and field selectors with kube-apiserver's syntax. Label selectors: `k=v`, `k==v`, `k!=v`,
// `k in (a,b)`, `k notin (a,b)`, `k` (exists), `!k`, `k>1`, `k<1`, comma-joined (AND). Field
// selectors: `path=v`, `path==v`, `path!=v`, comma-joined, with `\,` `\=` `\\` escapes in values.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace nodeagent::testapiserver {

class LabelSelector {
 public:
  enum class Op {
    kEquals,
    kNotEquals,
    kIn,
    kNotIn,
    kExists,
    kDoesNotExist,
    kGreaterThan,
    kLessThan
  };
  struct Requirement {
    std::string key;
    Op op = Op::kEquals;
    std::vector<std::string> values;
  };

  // InvalidArgument naming the offending part when the text does not parse.
  static base::StatusOr<LabelSelector> parse(std::string_view text);
  // `labels` is metadata.labels (an object, or null when absent). Empty selector matches all.
  bool matches(const nlohmann::json& labels) const;
  bool empty() const { return requirements_.empty(); }
  const std::vector<Requirement>& requirements() const { return requirements_; }

 private:
  std::vector<Requirement> requirements_;
};

class FieldSelector {
 public:
  struct Term {
    std::string field;
    bool negated = false;
    std::string value;
  };

  static base::StatusOr<FieldSelector> parse(std::string_view text);
  // `value_of(field)` gives the object's value of a field ("" when absent).
  bool matches(const std::function<std::string(std::string_view)>& value_of) const;
  bool empty() const { return terms_.empty(); }
  const std::vector<Term>& terms() const { return terms_; }
  // Adds `field=value` (the name of a /watch/.../NAME path).
  void addEquals(std::string field, std::string value);

 private:
  std::vector<Term> terms_;
};

// The value of a dotted field path in an object as a field selector sees it: strings as is,
// booleans and numbers printed, "" when absent or not a scalar.
std::string fieldValue(const nlohmann::json& object, std::string_view path);

}  // namespace nodeagent::testapiserver
