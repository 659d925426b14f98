#include "config/field_validation.h"

#include <initializer_list>
#include <string>

namespace nodeagent::config {
namespace validation {
namespace {

bool isLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool isAlnum(char c) { return isLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

// Go's RegexError: "msg (e.g. 'a',  or 'b', regex used for validation is 're')", double space
// included: operators match on these strings.
std::string regexError(std::string_view msg, std::string_view re,
                       std::initializer_list<std::string_view> examples) {
  std::string out(msg);
  if (examples.size() == 0) {
    out += " (regex used for validation is '";
    out += re;
    out += "')";
    return out;
  }
  out += " (e.g. ";
  bool first = true;
  for (auto example : examples) {
    if (!first) out += " or ";
    first = false;
    out += "'";
    out += example;
    out += "', ";
  }
  out += "regex used for validation is '";
  out += re;
  out += "')";
  return out;
}

std::string maxLenError(size_t n) {
  return "must be no more than " + std::to_string(n) + " characters";
}

constexpr std::string_view kDns1123LabelFmt = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
constexpr std::string_view kDns1123LabelErrMsg =
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character";
constexpr std::string_view kDns1123SubdomainFmt =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
constexpr std::string_view kDns1123SubdomainErrMsg =
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character";
constexpr std::string_view kQualifiedNameFmt = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
constexpr std::string_view kQualifiedNameErrMsg =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character";
constexpr std::string_view kLabelValueFmt = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
constexpr std::string_view kLabelValueErrMsg =
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character";
constexpr std::string_view kEnvVarNameFmt = "[-._a-zA-Z][-._a-zA-Z0-9]*";
constexpr std::string_view kEnvVarNameErrMsg =
    "a valid environment variable name must consist of alphabetic characters, digits, '_', '-', "
    "or '.', and must not start with a digit";

// [a-z0-9]([-a-z0-9]*[a-z0-9])?
bool matchesDns1123Label(std::string_view v) {
  if (v.empty() || !isLowerAlnum(v.front()) || !isLowerAlnum(v.back())) return false;
  return std::all_of(v.begin(), v.end(), [](char c) { return isLowerAlnum(c) || c == '-'; });
}

bool matchesDns1123Subdomain(std::string_view v) {
  if (v.empty()) return false;
  size_t start = 0;
  while (true) {
    size_t dot = v.find('.', start);
    std::string_view label = v.substr(start, dot == std::string_view::npos ? v.npos : dot - start);
    if (!matchesDns1123Label(label)) return false;
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

// ([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]
bool matchesQualifiedNamePart(std::string_view v) {
  if (v.empty() || !isAlnum(v.front()) || !isAlnum(v.back())) return false;
  return std::all_of(v.begin(), v.end(),
                     [](char c) { return isAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

}  // namespace

std::vector<std::string> isDns1123Label(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 63) errs.push_back(maxLenError(63));
  if (!matchesDns1123Label(value)) {
    errs.push_back(regexError(kDns1123LabelErrMsg, kDns1123LabelFmt, {"my-name", "123-abc"}));
  }
  return errs;
}

std::vector<std::string> isDns1123Subdomain(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 253) errs.push_back(maxLenError(253));
  if (!matchesDns1123Subdomain(value)) {
    errs.push_back(regexError(kDns1123SubdomainErrMsg, kDns1123SubdomainFmt, {"example.com"}));
  }
  return errs;
}

std::vector<std::string> isQualifiedName(std::string_view value) {
  std::vector<std::string> errs;
  std::string_view name = value;
  size_t slash = value.find('/');
  if (slash != std::string_view::npos) {
    if (value.find('/', slash + 1) != std::string_view::npos) {
      errs.push_back(
          "a qualified name " +
          regexError(kQualifiedNameErrMsg, kQualifiedNameFmt, {"MyName", "my.name", "123-abc"}) +
          " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')");
      return errs;
    }
    std::string_view prefix = value.substr(0, slash);
    name = value.substr(slash + 1);
    if (prefix.empty()) {
      errs.push_back("prefix part must be non-empty");
    } else {
      for (auto& msg : isDns1123Subdomain(prefix)) errs.push_back("prefix part " + msg);
    }
  }
  if (name.empty()) {
    errs.push_back("name part must be non-empty");
  } else if (name.size() > 63) {
    errs.push_back("name part " + maxLenError(63));
  }
  if (!matchesQualifiedNamePart(name)) {
    errs.push_back("name part " + regexError(kQualifiedNameErrMsg, kQualifiedNameFmt,
                                             {"MyName", "my.name", "123-abc"}));
  }
  return errs;
}

std::vector<std::string> isValidLabelValue(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 63) errs.push_back(maxLenError(63));
  if (!value.empty() && !matchesQualifiedNamePart(value)) {
    errs.push_back(regexError(kLabelValueErrMsg, kLabelValueFmt, {"MyValue", "my_value", "12345"}));
  }
  return errs;
}

std::vector<std::string> isValidPortName(std::string_view port) {
  std::vector<std::string> errs;
  if (port.size() > 15) errs.push_back(maxLenError(15));
  bool charset_ok = !port.empty() && std::all_of(port.begin(), port.end(), [](char c) {
    return isLowerAlnum(c) || c == '-';
  });
  if (!charset_ok) {
    errs.push_back("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
  }
  if (std::none_of(port.begin(), port.end(), [](char c) { return c >= 'a' && c <= 'z'; })) {
    errs.push_back("must contain at least one letter or number (a-z, 0-9)");
  }
  if (port.find("--") != std::string_view::npos)
    errs.push_back("must not contain consecutive hyphens");
  if (!port.empty() && (port.front() == '-' || port.back() == '-')) {
    errs.push_back("must not begin or end with a hyphen");
  }
  return errs;
}

std::vector<std::string> isValidPortNum(int64_t port) {
  if (port >= 1 && port <= 65535) return {};
  return {"must be between 1 and 65535, inclusive"};
}

namespace {

bool isEnvOrKeyChar(char c) { return isAlpha(c) || isDigit(c) || c == '-' || c == '.' || c == '_'; }

// apimachinery's hasChDirPrefix.
void addChDirPrefixErrors(std::string_view value, std::vector<std::string>& errs) {
  if (value == ".") {
    errs.push_back("must not be '.'");
  } else if (value == "..") {
    errs.push_back("must not be '..'");
  } else if (value.starts_with("..")) {
    errs.push_back("must not start with '..'");
  }
}

}  // namespace

std::vector<std::string> isEnvVarName(std::string_view value) {
  std::vector<std::string> errs;
  bool ok = !value.empty() && !isDigit(value.front()) &&
            std::all_of(value.begin(), value.end(), isEnvOrKeyChar);
  if (!ok) {
    errs.push_back(regexError(kEnvVarNameErrMsg, kEnvVarNameFmt,
                              {"my.env-name", "MY_ENV.NAME", "MyEnvName1"}));
  }
  addChDirPrefixErrors(value, errs);
  return errs;
}

std::vector<std::string> isConfigMapKey(std::string_view value) {
  std::vector<std::string> errs;
  if (value.size() > 253) errs.push_back(maxLenError(253));
  if (value.empty() || !std::all_of(value.begin(), value.end(), isEnvOrKeyChar)) {
    errs.push_back(
        regexError("a valid config key must consist of alphanumeric characters, '-', "
                   "'_' or '.'",
                   "[-._a-zA-Z0-9]+", {"key.name", "KEY_NAME", "key-name"}));
  }
  addChDirPrefixErrors(value, errs);
  return errs;
}

std::vector<std::string> isHttpHeaderName(std::string_view value) {
  bool ok = !value.empty() &&
            std::all_of(value.begin(), value.end(), [](char c) { return isAlnum(c) || c == '-'; });
  if (ok) return {};
  return {regexError("a valid HTTP header must consist of alphanumeric characters or '-'",
                     "[-A-Za-z0-9]+", {"X-Header-Name"})};
}

FieldError required(std::string field, std::string_view detail) {
  std::string msg = "Required value";
  if (!detail.empty()) {
    msg += ": ";
    msg += detail;
  }
  return {std::move(field), std::move(msg)};
}

namespace {
FieldError invalidRendered(std::string field, std::string_view rendered, std::string_view detail) {
  std::string msg = "Invalid value: ";
  msg += rendered;
  if (!detail.empty()) {
    msg += ": ";
    msg += detail;
  }
  return {std::move(field), std::move(msg)};
}
}  // namespace

FieldError invalid(std::string field, std::string_view value, std::string_view detail) {
  return invalidRendered(std::move(field), goQuote(value), detail);
}

FieldError invalid(std::string field, int64_t value, std::string_view detail) {
  return invalidRendered(std::move(field), std::to_string(value), detail);
}

FieldError duplicate(std::string field, std::string_view value) {
  return {std::move(field), "Duplicate value: " + goQuote(value)};
}

FieldError notFound(std::string field, std::string_view value) {
  return {std::move(field), "Not found: " + goQuote(value)};
}

FieldError forbidden(std::string field, std::string_view detail) {
  return {std::move(field), "Forbidden: " + std::string(detail)};
}

FieldError tooLong(std::string field, int64_t max_bytes) {
  return {std::move(field),
          "Too long: may not be more than " + std::to_string(max_bytes) + " bytes"};
}

FieldError notSupported(std::string field, std::string_view value,
                        const std::vector<std::string_view>& supported) {
  std::string msg = "Unsupported value: " + goQuote(value);
  if (!supported.empty()) {
    msg += ": supported values: ";
    for (size_t i = 0; i < supported.size(); ++i) {
      if (i > 0) msg += ", ";
      msg += goQuote(supported[i]);
    }
  }
  return {std::move(field), std::move(msg)};
}

}  // namespace validation
}  // namespace nodeagent::config
