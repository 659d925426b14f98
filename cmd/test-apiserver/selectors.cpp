#include "cmd/test-apiserver/selectors.h"

#include <cctype>
#include <cstdlib>

#include <nlohmann/json.hpp>

namespace nodeagent::testapiserver {
namespace {

std::string trim(std::string_view s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(b, e - b));
}

// Splits on commas that are not inside parentheses.
base::StatusOr<std::vector<std::string>> splitTopLevel(std::string_view text) {
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')') {
      if (--depth < 0) return base::invalidArgumentError("unbalanced ')' in label selector");
    }
    if (c == ',' && depth == 0) {
      parts.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  if (depth != 0) return base::invalidArgumentError("unbalanced '(' in label selector");
  parts.push_back(trim(cur));
  return parts;
}

bool validKey(std::string_view key) {
  if (key.empty() || key.size() > 316) return false;
  for (char c : key) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
          c == '/')) {
      return false;
    }
  }
  return true;
}

bool validValue(std::string_view value) {
  if (value.size() > 63) return false;
  for (char c : value) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
      return false;
    }
  }
  return true;
}

using Op = LabelSelector::Op;
using Requirement = LabelSelector::Requirement;

base::Status badRequirement(const std::string& part, const std::string& why) {
  return base::invalidArgumentError("unable to parse requirement \"" + part + "\": " + why);
}

// "key in (a,b)" or "key notin (a,b)"; `paren` is where "(" is.
base::Status parseSetRequirement(const std::string& part, size_t paren, Requirement& req) {
  if (part.back() != ')') return badRequirement(part, "missing ')'");
  std::string head = trim(std::string_view(part).substr(0, paren));
  auto sp = head.find_last_of(" \t");
  if (sp == std::string::npos) return badRequirement(part, "expected 'in' or 'notin'");
  std::string op = trim(std::string_view(head).substr(sp + 1));
  req.key = trim(std::string_view(head).substr(0, sp));
  if (op == "in") {
    req.op = Op::kIn;
  } else if (op == "notin") {
    req.op = Op::kNotIn;
  } else {
    return badRequirement(part, "unknown operator \"" + op + "\"");
  }
  std::string inner = part.substr(paren + 1, part.size() - paren - 2);
  size_t start = 0;
  while (true) {
    auto comma = inner.find(',', start);
    std::string v = trim(std::string_view(inner).substr(
        start, comma == std::string::npos ? std::string::npos : comma - start));
    if (!validValue(v)) return badRequirement(part, "invalid value \"" + v + "\"");
    req.values.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return base::okStatus();
}

// "key=v", "key==v", "key!=v", "key>n" or "key<n"; `pos` is where the operator starts.
base::Status parseComparison(const std::string& part, size_t pos, Requirement& req) {
  req.key = trim(std::string_view(part).substr(0, pos));
  std::string_view rest = std::string_view(part).substr(pos);
  size_t oplen = 1;
  if (rest.starts_with("==")) {
    req.op = Op::kEquals;
    oplen = 2;
  } else if (rest.starts_with("!=")) {
    req.op = Op::kNotEquals;
    oplen = 2;
  } else if (rest.starts_with("=")) {
    req.op = Op::kEquals;
  } else if (rest.starts_with(">")) {
    req.op = Op::kGreaterThan;
  } else if (rest.starts_with("<")) {
    req.op = Op::kLessThan;
  } else {
    return badRequirement(part, "unknown operator");
  }
  std::string v = trim(rest.substr(oplen));
  if (!validValue(v)) return badRequirement(part, "invalid value \"" + v + "\"");
  if ((req.op == Op::kGreaterThan || req.op == Op::kLessThan) &&
      (v.empty() || v.find_first_not_of("0123456789-") != std::string::npos)) {
    return badRequirement(part, "value for '>' or '<' must be an integer");
  }
  req.values.push_back(v);
  return base::okStatus();
}

// One comma-separated requirement: "!key", a set, a comparison, or "key" (exists).
base::StatusOr<Requirement> parseRequirement(const std::string& part) {
  if (part.empty()) return badRequirement(part, "empty requirement");
  Requirement req;
  if (part[0] == '!') {
    req.key = trim(std::string_view(part).substr(1));
    req.op = Op::kDoesNotExist;
  } else if (auto paren = part.find('('); paren != std::string::npos) {
    RETURN_IF_ERROR(parseSetRequirement(part, paren, req));
  } else if (auto pos = part.find_first_of("=!<>"); pos != std::string::npos) {
    RETURN_IF_ERROR(parseComparison(part, pos, req));
  } else {
    req.key = part;
    req.op = Op::kExists;
  }
  if (!validKey(req.key)) return badRequirement(part, "invalid label key \"" + req.key + "\"");
  return req;
}

}  // namespace

base::StatusOr<LabelSelector> LabelSelector::parse(std::string_view text) {
  LabelSelector sel;
  if (trim(text).empty()) return sel;
  ASSIGN_OR_RETURN(auto parts, splitTopLevel(text));
  for (const auto& part : parts) {
    ASSIGN_OR_RETURN(Requirement req, parseRequirement(part));
    sel.requirements_.push_back(std::move(req));
  }
  return sel;
}

bool LabelSelector::matches(const nlohmann::json& labels) const {
  for (const auto& req : requirements_) {
    const nlohmann::json* value = nullptr;
    if (labels.is_object()) {
      auto it = labels.find(req.key);
      if (it != labels.end() && it->is_string()) value = &*it;
    }
    const std::string v = value ? value->get<std::string>() : std::string();
    auto in_values = [&] {
      for (const auto& x : req.values) {
        if (x == v) return true;
      }
      return false;
    };
    switch (req.op) {
      case Op::kEquals:
        if (!value || !in_values()) return false;
        break;
      case Op::kNotEquals:
        if (value && in_values()) return false;
        break;
      case Op::kIn:
        if (!value || !in_values()) return false;
        break;
      case Op::kNotIn:
        if (value && in_values()) return false;
        break;
      case Op::kExists:
        if (!value) return false;
        break;
      case Op::kDoesNotExist:
        if (value) return false;
        break;
      case Op::kGreaterThan:
      case Op::kLessThan: {
        if (!value) return false;
        char* end = nullptr;
        long long lhs = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0') return false;
        long long rhs = std::strtoll(req.values[0].c_str(), nullptr, 10);
        if (req.op == Op::kGreaterThan ? !(lhs > rhs) : !(lhs < rhs)) return false;
        break;
      }
    }
  }
  return true;
}

base::StatusOr<FieldSelector> FieldSelector::parse(std::string_view text) {
  FieldSelector sel;
  if (trim(text).empty()) return sel;
  // Split on unescaped commas, keeping escapes for the term parser.
  std::vector<std::string> parts;
  std::string cur;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 1 < text.size()) {
      cur += text[i];
      cur += text[++i];
      continue;
    }
    if (text[i] == ',') {
      parts.push_back(cur);
      cur.clear();
      continue;
    }
    cur += text[i];
  }
  parts.push_back(cur);
  for (const auto& part : parts) {
    Term term;
    size_t i = 0;
    std::string field;
    while (i < part.size() && part[i] != '=' && part[i] != '!') field += part[i++];
    if (i >= part.size()) {
      return base::invalidArgumentError("invalid field selector \"" + part +
                                        "\": expected an operator (=, ==, !=)");
    }
    if (part.compare(i, 2, "!=") == 0) {
      term.negated = true;
      i += 2;
    } else if (part.compare(i, 2, "==") == 0) {
      i += 2;
    } else if (part[i] == '=') {
      i += 1;
    } else {
      return base::invalidArgumentError("invalid field selector \"" + part + "\"");
    }
    std::string value;
    for (; i < part.size(); ++i) {
      if (part[i] == '\\' && i + 1 < part.size()) {
        value += part[++i];
        continue;
      }
      if (part[i] == '=' || part[i] == '!') {
        return base::invalidArgumentError("invalid field selector \"" + part +
                                          "\": unescaped operator in value");
      }
      value += part[i];
    }
    term.field = trim(field);
    if (term.field.empty()) {
      return base::invalidArgumentError("invalid field selector \"" + part + "\": empty field");
    }
    term.value = value;
    sel.terms_.push_back(std::move(term));
  }
  return sel;
}

bool FieldSelector::matches(const std::function<std::string(std::string_view)>& value_of) const {
  for (const auto& term : terms_) {
    bool eq = value_of(term.field) == term.value;
    if (eq == term.negated) return false;
  }
  return true;
}

void FieldSelector::addEquals(std::string field, std::string value) {
  terms_.push_back(Term{std::move(field), false, std::move(value)});
}

std::string fieldValue(const nlohmann::json& object, std::string_view path) {
  const nlohmann::json* cur = &object;
  size_t start = 0;
  while (start <= path.size()) {
    auto dot = path.find('.', start);
    std::string key(
        path.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (!cur->is_object()) return "";
    auto it = cur->find(key);
    if (it == cur->end()) return "";
    cur = &*it;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_boolean()) return cur->get<bool>() ? "true" : "false";
  if (cur->is_number()) return cur->dump();
  return "";
}

}  // namespace nodeagent::testapiserver
