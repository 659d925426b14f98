#include "base/printable.h"

#include <cstdint>

namespace nodeagent::base {
namespace {

constexpr char kHex[] = "0123456789abcdef";
constexpr std::string_view kReplacement = "\xef\xbf\xbd";  // U+FFFD

// The length of the well-formed UTF-8 sequence starting at value[i] (a lead byte >= 0x80), with
// its code point in *cp; 0 when the bytes there are not one (stray continuation, truncated,
// overlong, surrogate or out of range).
size_t utf8SequenceAt(std::string_view value, size_t i, uint32_t* cp) {
  auto c = static_cast<unsigned char>(value[i]);
  size_t len = (c & 0xe0) == 0xc0 ? 2 : (c & 0xf0) == 0xe0 ? 3 : (c & 0xf8) == 0xf0 ? 4 : 0;
  if (len == 0 || i + len > value.size()) return 0;
  uint32_t code = len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < len; ++k) {
    auto cc = static_cast<unsigned char>(value[i + k]);
    if ((cc & 0xc0) != 0x80) return 0;
    code = (code << 6) | (cc & 0x3f);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (code < kMin[len] || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff)) return 0;
  *cp = code;
  return len;
}

void appendHexByte(std::string& out, const char* prefix, unsigned char c) {
  out += prefix;
  out += kHex[c >> 4];
  out += kHex[c & 0xf];
}

// An ASCII byte as Go's %q writes it: escaped when it is '"', '\\' or a control character.
void appendQuotedAscii(std::string& out, unsigned char c) {
  switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\a':
      out += "\\a";
      break;
    case '\b':
      out += "\\b";
      break;
    case '\f':
      out += "\\f";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\r':
      out += "\\r";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\v':
      out += "\\v";
      break;
    default:
      if (c < 0x20 || c == 0x7f) {
        appendHexByte(out, "\\x", c);
      } else {
        out += static_cast<char>(c);
      }
  }
}

}  // namespace

std::string goQuote(std::string_view value) {
  std::string out;
  out.reserve(value.size() + 2);
  out += '"';
  size_t i = 0;
  while (i < value.size()) {
    auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x80) {
      appendQuotedAscii(out, c);
      ++i;
      continue;
    }
    uint32_t cp = 0;
    const size_t len = utf8SequenceAt(value, i, &cp);
    if (len == 0) {  // a stray byte prints as \xNN, as Go does
      appendHexByte(out, "\\x", c);
      ++i;
      continue;
    }
    if (cp <= 0x9f) {  // C1 controls are not printable: Go writes \u0080.
      appendHexByte(out, "\\u00", static_cast<unsigned char>(cp));
    } else {
      out.append(value.substr(i, len));
    }
    i += len;
  }
  out += '"';
  return out;
}

std::string validUtf8(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  size_t i = 0;
  while (i < value.size()) {
    if (static_cast<unsigned char>(value[i]) < 0x80) {
      out += value[i++];
      continue;
    }
    uint32_t cp = 0;
    const size_t len = utf8SequenceAt(value, i, &cp);
    if (len == 0) {
      out += kReplacement;
      ++i;
    } else {
      out.append(value.substr(i, len));
      i += len;
    }
  }
  return out;
}

std::string prometheusLabelValue(std::string_view value) {
  std::string out;
  for (char c : validUtf8(value)) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace nodeagent::base
