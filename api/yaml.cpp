#include "api/yaml.h"

#include <yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/yaml_scalar.h"

namespace nodeagent::api {
namespace {

using nlohmann::json;
using yaml_internal::Resolved;
using yaml_internal::resolvePlain;
using yaml_internal::staysString;

// Converted scalar bytes allowed per document; only alias expansion can get past 2x the input.
constexpr size_t kMaxYamlOutputBytes = 2 * kMaxConfigLength;

std::string lineColumn(size_t line, size_t column) {
  return "line " + std::to_string(line) + " column " + std::to_string(column);
}

// 1-based line and column of a byte offset.
std::string positionOf(std::string_view text, size_t offset) {
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return lineColumn(line, offset - line_start + 1);
}

// Strict UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF) and no C0 control
// characters other than tab, LF and CR (neither YAML nor JSON allows them raw). Returns the
// offset of the first bad byte, or npos.
size_t findBadByte(std::string_view s, bool* is_control) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    // Eight bytes at a time while they are all printable ASCII.
    if (i + 8 <= n) {
      constexpr uint64_t kOnes = 0x0101010101010101ULL;
      constexpr uint64_t kHigh = 0x8080808080808080ULL;
      uint64_t w;
      std::memcpy(&w, p + i, 8);
      // A high bit set: some byte >= 0x80, or (through the borrow) some byte < 0x20.
      if (((((w - 0x20 * kOnes) & ~w) | w) & kHigh) == 0) {
        i += 8;
        continue;
      }
    }
    unsigned char c = p[i];
    if (c < 0x80) {
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
        *is_control = true;
        return i;
      }
      ++i;
      continue;
    }
    *is_control = false;
    size_t len;
    uint32_t min;
    uint32_t cp;
    if ((c & 0xe0) == 0xc0) {
      len = 2, min = 0x80, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, min = 0x800, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, min = 0x10000, cp = c & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return std::string_view::npos;
}

base::Status checkText(std::string_view text) {
  if (text.size() > kMaxConfigLength) {
    return base::invalidArgumentError("input is " + std::to_string(text.size()) +
                                      " bytes, more than the limit of " +
                                      std::to_string(kMaxConfigLength));
  }
  bool is_control = false;
  size_t bad = findBadByte(text, &is_control);
  if (bad != std::string_view::npos) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "0x%02x", static_cast<unsigned char>(text[bad]));
    return base::invalidArgumentError(
        positionOf(text, bad) + ": " +
        (is_control ? std::string("control character ") + hex + " is not allowed"
                    : std::string("invalid UTF-8 (byte ") + hex + ")"));
  }
  return base::okStatus();
}

std::string_view stripBom(std::string_view text) {
  if (text.size() >= 3 && text.substr(0, 3) == "\xef\xbb\xbf") text.remove_prefix(3);
  return text;
}

// ---------------------------------------------------------------------------------------------
// JSON: a SAX handler that builds the value and rejects what nlohmann's DOM parser would accept
// silently (duplicate keys keep the last value there; 1e999 becomes infinity).

class StrictJsonBuilder {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  json& result() { return root_; }
  const std::string& error() const { return error_; }

  bool null() { return add(json(nullptr)); }
  bool boolean(bool v) { return add(json(v)); }
  bool number_integer(number_integer_t v) { return add(json(v)); }
  bool number_unsigned(number_unsigned_t v) { return add(json(v)); }
  bool number_float(number_float_t v, const string_t& text) {
    if (!std::isfinite(v)) return fail("number " + text + " is out of range");
    return add(json(v));
  }
  bool string(string_t& v) { return add(json(std::move(v))); }
  bool binary(binary_t&) { return fail("binary values are not supported"); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(string_t& k) {
    json* obj = stack_.back().value;
    if (obj->contains(k)) {
      stack_.back().key = k;
      return fail("duplicate key \"" + k + "\" at " + path());
    }
    stack_.back().key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    if (error_.empty()) {
      // "[json.exception.parse_error.101] parse error at line 1, column 5: ..." -> the part after
      // the bracketed id.
      std::string what = ex.what();
      auto pos = what.find("] ");
      error_ = pos == std::string::npos ? what : what.substr(pos + 2);
      // "parse error at line 1, column 5: x" -> "line 1 column 5: x", the YAML path's form.
      unsigned line = 0;
      unsigned column = 0;
      int consumed = 0;
      if (std::sscanf(error_.c_str(), "parse error at line %u, column %u: %n", &line, &column,
                      &consumed) == 2 &&
          consumed > 0) {
        error_ = lineColumn(line, column) + ": " + error_.substr(static_cast<size_t>(consumed));
      }
    }
    return false;
  }

 private:
  struct Level {
    json* value;
    std::string key;  // the pending key (objects only)
  };

  bool add(json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return true;
    }
    Level& top = stack_.back();
    if (top.value->is_array()) {
      top.value->push_back(std::move(v));
    } else {
      (*top.value)[top.key] = std::move(v);
    }
    return true;
  }

  bool open(json&& v) {
    if (stack_.size() + 1 > static_cast<size_t>(kMaxNestingDepth)) {
      return fail("nesting deeper than " + std::to_string(kMaxNestingDepth) + " levels at " +
                  path());
    }
    json* slot;
    if (stack_.empty()) {
      root_ = std::move(v);
      slot = &root_;
    } else if (Level& top = stack_.back(); top.value->is_array()) {
      top.value->push_back(std::move(v));
      slot = &top.value->back();
    } else {
      slot = &((*top.value)[top.key] = std::move(v));
    }
    stack_.push_back(Level{slot, {}});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }

  // The path of the value being parsed ("metadata.labels.app", "items[3]"), "<root>" at the top.
  std::string path() const {
    std::string out;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const Level& level = stack_[i];
      if (level.value->is_array()) {
        // Below the top, the element being built is already in the array.
        size_t index = level.value->size() - (i + 1 < stack_.size() ? 1 : 0);
        out += "[" + std::to_string(index) + "]";
      } else {
        if (!out.empty()) out += '.';
        out += level.key;
      }
    }
    return out.empty() ? "<root>" : out;
  }

  json root_;
  std::vector<Level> stack_;
  std::string error_;
};

base::StatusOr<json> parseJsonChecked(std::string_view text) {
  StrictJsonBuilder builder;
  bool ok = false;
  try {
    ok = json::sax_parse(text.begin(), text.end(), &builder, json::input_format_t::json,
                         /*strict=*/true);
  } catch (const std::exception& e) {
    return base::invalidArgumentError(std::string("JSON: ") + e.what());
  }
  if (!ok) {
    return base::invalidArgumentError(builder.error().empty() ? std::string("invalid JSON")
                                                              : builder.error());
  }
  return std::move(builder.result());
}

// ---------------------------------------------------------------------------------------------
// YAML

constexpr std::string_view kTagPrefix = "tag:yaml.org,2002:";

// Builds JSON straight from libyaml's event stream. libyaml is the C parser gopkg.in/yaml.v2 was
// ported from, so scanning and errors match what kubelet sees; it keeps explicit stacks instead of
// recursing and is fuzzed continuously. (yaml-cpp 0.7 was dropped: some short inputs made it
// allocate without bound.) Aliases are expanded by copying the anchored value, after charging
// its node and byte counts to the document's budget, so an alias bomb stops before it grows.
class YamlEventBuilder {
 public:
  YamlEventBuilder() { stack_.reserve(16); }  // manifests nest about 8 deep

  // Feeds one event; an error rejects the whole input.
  base::Status onEvent(const yaml_event_t& e) {
    switch (e.type) {
      case YAML_STREAM_START_EVENT:
      case YAML_STREAM_END_EVENT:
      case YAML_NO_EVENT:
        return base::okStatus();
      case YAML_DOCUMENT_START_EVENT:
        nodes_ = 0;
        bytes_ = 0;
        anchored_nodes_ = 0;
        anchored_bytes_ = 0;
        anchors_.clear();
        return base::okStatus();
      case YAML_DOCUMENT_END_EVENT:
        return base::okStatus();
      case YAML_SCALAR_EVENT:
        return onScalar(e);
      case YAML_ALIAS_EVENT:
        return onAlias(e);
      case YAML_SEQUENCE_START_EVENT:
        return onStart(e, false, anchorOf(e.data.sequence_start.anchor));
      case YAML_MAPPING_START_EVENT:
        return onStart(e, true, anchorOf(e.data.mapping_start.anchor));
      case YAML_SEQUENCE_END_EVENT:
      case YAML_MAPPING_END_EVENT:
        return onEnd(e);
    }
    return error(e.start_mark, "unexpected YAML event");
  }

  // The single non-empty document, or null when there was none.
  json take() { return has_root_ ? std::move(root_) : json(nullptr); }

 private:
  struct Frame {
    json value;  // an array or an object
    bool is_map = false;
    bool have_key = false;   // maps: the next value belongs to `key`
    bool merge_key = false;  // maps: the pending key is "<<"
    std::string key;
    json::object_t::iterator key_slot;  // maps: where `key` goes (the map is unchanged until then)
    yaml_mark_t key_mark{};
    std::vector<json> merges;
    std::string anchor;
    size_t nodes_at_start = 0;
    size_t bytes_at_start = 0;
  };
  struct Anchored {
    json value;
    size_t nodes = 0;
    size_t bytes = 0;
  };

  static std::string anchorOf(const yaml_char_t* anchor) {
    return anchor == nullptr ? std::string() : std::string(reinterpret_cast<const char*>(anchor));
  }

  static base::Status error(const yaml_mark_t& mark, const std::string& message) {
    return base::invalidArgumentError(lineColumn(mark.line + 1, mark.column + 1) + ": " + message);
  }

  base::Status charge(const yaml_mark_t& mark, size_t nodes, size_t bytes) {
    nodes_ += nodes;
    bytes_ += bytes;
    if (nodes_ > kMaxYamlNodes) {
      return error(mark, "document too large after alias expansion (more than " +
                             std::to_string(kMaxYamlNodes) + " nodes)");
    }
    if (bytes_ > kMaxYamlOutputBytes) {
      return error(mark, "document too large after alias expansion (more than " +
                             std::to_string(kMaxYamlOutputBytes) + " bytes)");
    }
    return base::okStatus();
  }

  base::Status onScalar(const yaml_event_t& e) {
    const auto& sc = e.data.scalar;
    std::string text(reinterpret_cast<const char*>(sc.value), sc.length);
    const bool plain = sc.style == YAML_PLAIN_SCALAR_STYLE;
    const std::string_view tag =
        sc.tag == nullptr ? std::string_view() : reinterpret_cast<const char*>(sc.tag);
    const bool empty_root = stack_.empty() && plain && tag.empty() && text.empty();
    if (stack_.empty() && has_root_) {
      if (empty_root) return base::okStatus();
      return error(e.start_mark, "multi-document YAML is not supported: one pod per file");
    }
    if (stack_.empty() && empty_root) return base::okStatus();  // an empty document
    RETURN_IF_ERROR(charge(e.start_mark, 1, text.size()));
    // Escapes in double-quoted scalars can produce bytes the input check never saw (\uD800).
    // Other scalars hold input bytes (line breaks folded to '\n' or ' '), checked already.
    bool is_control = false;
    if (size_t bad = sc.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ? findBadByte(text, &is_control)
                                                                 : std::string_view::npos;
        bad != std::string_view::npos && !is_control) {
      return error(e.start_mark, "scalar is not valid UTF-8");
    }
    // The merge key is a plain "<<" in key position.
    if (plain && tag.empty() && text == "<<" && !stack_.empty() && stack_.back().is_map &&
        !stack_.back().have_key) {
      Frame& f = stack_.back();
      f.have_key = true;
      f.merge_key = true;
      f.key_mark = e.start_mark;
      return base::okStatus();
    }
    // A key that is a string either way (quoted, or plain but neither a word like "yes" nor a
    // number) goes into place without a JSON value in between.
    if (!stack_.empty() && stack_.back().is_map && !stack_.back().have_key && tag.empty() &&
        sc.anchor == nullptr && (!plain || staysString(text))) {
      return acceptKey(std::move(text), e.start_mark);
    }
    ASSIGN_OR_RETURN(json value, scalarValue(e, std::move(text), plain, tag));
    std::string anchor = anchorOf(sc.anchor);
    if (!anchor.empty()) RETURN_IF_ERROR(remember(anchor, value, 1, sc.length, e.start_mark));
    return deliver(std::move(value), e.start_mark);
  }

  // The JSON value of a scalar: a string when quoted or tagged !, !!str, !!binary or
  // !!timestamp; resolved like yaml.v2 when plain; checked against !!int, !!float, !!bool and
  // !!null.
  base::StatusOr<json> scalarValue(const yaml_event_t& e, std::string text, bool plain,
                                   std::string_view tag) {
    if (tag == "!" || (tag.empty() && !plain)) return json(std::move(text));
    if (tag.size() > kTagPrefix.size() && tag.compare(0, kTagPrefix.size(), kTagPrefix) == 0) {
      return taggedValue(e, std::move(text), tag.substr(kTagPrefix.size()));
    }
    if (plain) {
      Resolved r = resolvePlain(std::move(text));
      if (!r.error.empty()) return error(e.start_mark, r.error);
      return std::move(r.value);
    }
    return json(std::move(text));
  }

  // A scalar with a !!`kind` tag.
  base::StatusOr<json> taggedValue(const yaml_event_t& e, std::string text, std::string_view kind) {
    if (kind == "str" || kind == "binary" || kind == "timestamp") return json(std::move(text));
    Resolved r = resolvePlain(text);
    if (!r.error.empty()) return error(e.start_mark, r.error);
    bool fits = (kind == "int" && r.value.is_number_integer()) ||
                (kind == "float" && r.value.is_number()) ||
                (kind == "bool" && r.value.is_boolean()) || (kind == "null" && r.value.is_null());
    if (kind == "int" || kind == "float" || kind == "bool" || kind == "null") {
      if (!fits) {
        return error(e.start_mark, "cannot decode \"" + text + "\" as !!" + std::string(kind));
      }
      if (kind == "float") r.value = json(r.value.get<double>());
    }
    return std::move(r.value);
  }

  base::Status onAlias(const yaml_event_t& e) {
    std::string name = anchorOf(e.data.alias.anchor);
    auto it = anchors_.find(name);
    if (it == anchors_.end()) {
      // Includes an alias to an anchor still being read (a recursive structure).
      return error(e.start_mark, "unknown anchor \"" + name + "\" referenced");
    }
    if (stack_.empty() && has_root_) {
      return error(e.start_mark, "multi-document YAML is not supported: one pod per file");
    }
    RETURN_IF_ERROR(charge(e.start_mark, it->second.nodes, it->second.bytes));
    return deliver(json(it->second.value), e.start_mark);
  }

  base::Status onStart(const yaml_event_t& e, bool is_map, std::string anchor) {
    if (stack_.empty() && has_root_) {
      return error(e.start_mark, "multi-document YAML is not supported: one pod per file");
    }
    if (!stack_.empty() && stack_.back().is_map && !stack_.back().have_key) {
      return error(e.start_mark, "mapping keys must be scalars");
    }
    if (stack_.size() + 1 > static_cast<size_t>(kMaxNestingDepth)) {
      return error(e.start_mark,
                   "nesting deeper than " + std::to_string(kMaxNestingDepth) + " levels");
    }
    RETURN_IF_ERROR(charge(e.start_mark, 1, 0));
    Frame& f = stack_.emplace_back();
    f.value = is_map ? json::object() : json::array();
    f.is_map = is_map;
    f.anchor = std::move(anchor);
    f.nodes_at_start = nodes_ - 1;
    f.bytes_at_start = bytes_;
    return base::okStatus();
  }

  base::Status onEnd(const yaml_event_t& e) {
    if (stack_.empty()) return error(e.start_mark, "unbalanced end of collection");
    Frame f = std::move(stack_.back());
    stack_.pop_back();
    if (f.is_map) {
      // Explicit keys win over merged ones; among merged mappings the first one listed wins.
      for (auto& m : f.merges) {
        for (auto& [k, v] : m.items()) {
          if (!f.value.contains(k)) f.value.emplace(k, std::move(v));
        }
      }
    }
    if (!f.anchor.empty()) {
      RETURN_IF_ERROR(remember(f.anchor, f.value, nodes_ - f.nodes_at_start,
                               bytes_ - f.bytes_at_start, e.start_mark));
    }
    return deliver(std::move(f.value), e.start_mark);
  }

  // Anchored values are copies, so nested anchors could multiply memory: they share the budget.
  base::Status remember(const std::string& name, const json& value, size_t nodes, size_t bytes,
                        const yaml_mark_t& mark) {
    anchored_nodes_ += nodes;
    anchored_bytes_ += bytes;
    if (anchored_nodes_ > kMaxYamlNodes || anchored_bytes_ > kMaxYamlOutputBytes) {
      return error(mark, "too much anchored content");
    }
    anchors_[name] = Anchored{value, nodes, bytes};
    return base::okStatus();
  }

  // A mapping key as sigs.k8s.io/yaml writes it into JSON.
  static base::StatusOr<std::string> keyString(json& k, const yaml_mark_t& mark) {
    if (k.is_string()) return std::move(k.get_ref<std::string&>());
    if (k.is_null()) return std::string("null");
    if (k.is_boolean()) return std::string(k.get<bool>() ? "true" : "false");
    if (k.is_number_integer() || k.is_number_unsigned()) return k.dump();
    if (k.is_number_float()) {
      char buf[64];
      auto res = std::to_chars(buf, buf + sizeof(buf), k.get<double>());
      return std::string(buf, res.ptr);
    }
    return error(mark, "mapping keys must be scalars");
  }

  // The key of the next member of the mapping being read.
  base::Status acceptKey(std::string key, const yaml_mark_t& mark) {
    Frame& f = stack_.back();
    auto& members = f.value.get_ref<json::object_t&>();
    auto slot = members.lower_bound(key);
    if (slot != members.end() && slot->first == key) {
      return error(mark, "duplicate key \"" + key + "\"");
    }
    f.key_slot = slot;
    f.key = std::move(key);
    f.key_mark = mark;
    f.have_key = true;
    return base::okStatus();
  }

  base::Status deliver(json value, const yaml_mark_t& mark) {
    if (stack_.empty()) {
      root_ = std::move(value);
      has_root_ = true;
      return base::okStatus();
    }
    Frame& f = stack_.back();
    if (!f.is_map) {
      f.value.push_back(std::move(value));
      return base::okStatus();
    }
    if (!f.have_key) {
      ASSIGN_OR_RETURN(std::string key, keyString(value, mark));
      return acceptKey(std::move(key), mark);
    }
    f.have_key = false;
    if (f.merge_key) {
      f.merge_key = false;
      if (value.is_object()) {
        f.merges.push_back(std::move(value));
      } else if (value.is_array() && std::all_of(value.begin(), value.end(),
                                                 [](const json& m) { return m.is_object(); })) {
        for (auto& m : value) f.merges.push_back(std::move(m));
      } else {
        return error(f.key_mark, "merge key \"<<\" needs a mapping or a sequence of mappings");
      }
      return base::okStatus();
    }
    f.value.get_ref<json::object_t&>().emplace_hint(f.key_slot, std::move(f.key), std::move(value));
    return base::okStatus();
  }

  std::vector<Frame> stack_;
  std::map<std::string, Anchored> anchors_;
  json root_;
  bool has_root_ = false;
  size_t nodes_ = 0;
  size_t bytes_ = 0;
  size_t anchored_nodes_ = 0;
  size_t anchored_bytes_ = 0;
};

// Owns a libyaml parser.
class YamlParser {
 public:
  YamlParser() { ok_ = yaml_parser_initialize(&parser_) != 0; }
  ~YamlParser() {
    if (ok_) yaml_parser_delete(&parser_);
  }
  YamlParser(const YamlParser&) = delete;
  YamlParser& operator=(const YamlParser&) = delete;
  bool ok() const { return ok_; }
  yaml_parser_t* get() { return &parser_; }

 private:
  yaml_parser_t parser_{};
  bool ok_ = false;
};

// Owns one event.
struct YamlEvent {
  yaml_event_t event{};
  bool set = false;
  ~YamlEvent() {
    if (set) yaml_event_delete(&event);
  }
};

base::StatusOr<json> yamlDocumentsToJson(std::string_view text) {
  YamlParser parser;
  if (!parser.ok()) return base::internalError("cannot initialize the YAML parser");
  yaml_parser_set_input_string(parser.get(), reinterpret_cast<const unsigned char*>(text.data()),
                               text.size());
  yaml_parser_set_encoding(parser.get(), YAML_UTF8_ENCODING);
  YamlEventBuilder builder;
  for (;;) {
    YamlEvent ev;
    if (!yaml_parser_parse(parser.get(), &ev.event)) {
      const yaml_parser_t* p = parser.get();
      std::string msg = p->problem != nullptr ? p->problem : "invalid YAML";
      if (p->context != nullptr) msg = std::string(p->context) + ": " + msg;
      return base::invalidArgumentError(
          lineColumn(p->problem_mark.line + 1, p->problem_mark.column + 1) + ": " + msg);
    }
    ev.set = true;
    RETURN_IF_ERROR(builder.onEvent(ev.event));
    if (ev.event.type == YAML_STREAM_END_EVENT) break;
  }
  return builder.take();
}

}  // namespace

base::StatusOr<json> parseJson(std::string_view text) {
  try {
    RETURN_IF_ERROR(checkText(text));
    return parseJsonChecked(stripBom(text));
  } catch (const std::exception& e) {
    return base::invalidArgumentError(std::string("JSON: ") + e.what());
  }
}

base::StatusOr<json> yamlToJson(std::string_view bytes) {
  try {
    RETURN_IF_ERROR(checkText(bytes));
    std::string_view text = stripBom(bytes);
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string_view::npos && text[first] == '{') return parseJsonChecked(text);
    return yamlDocumentsToJson(text);
  } catch (const std::exception& e) {
    return base::invalidArgumentError(std::string("YAML: ") + e.what());
  } catch (...) {
    return base::invalidArgumentError("YAML: unknown parser error");
  }
}

}  // namespace nodeagent::api
