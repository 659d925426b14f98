// A decoded pod's whole object as canonical JSON (sorted keys, compact), kept in three pieces so
// that pods with the same spec share its text: the text before the spec's value, the spec's value
// (one copy among the pods alive with that spec, api/pod_json.cpp), and the text after it. The
// pieces joined are the object's text; a pod without a spec keeps the whole text as its last piece.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace nodeagent::api {

class PodText {
 public:
  PodText() = default;
  // The whole text as the last piece.
  explicit PodText(std::string whole);
  // `whole` with its [spec_begin, spec_end) kept as `spec`, whose text equals that range.
  PodText(std::string_view whole, size_t spec_begin, size_t spec_end,
          std::shared_ptr<const std::string> spec);

  // Whether the text was split at a spec (else it is all in the last piece).
  bool hasSpec() const { return spec_ != nullptr; }
  std::string_view head() const { return std::string_view(own_).substr(0, split_); }
  std::string_view spec() const { return spec_ ? std::string_view(*spec_) : std::string_view(); }
  std::string_view tail() const { return std::string_view(own_).substr(split_); }
  // head, spec, tail: the text in order (some may be empty).
  std::array<std::string_view, 3> pieces() const { return {head(), spec(), tail()}; }

  size_t size() const { return own_.size() + spec().size(); }
  bool empty() const { return size() == 0; }
  // The text joined (a copy).
  std::string str() const;
  void appendTo(std::string& out) const;
  // Whether `needle` occurs in the text, across pieces too.
  bool contains(std::string_view needle) const;
  // Whether this text and `o` hold the very same spec piece (not merely an equal one).
  bool sharesSpecWith(const PodText& o) const { return spec_ != nullptr && spec_ == o.spec_; }

  bool operator==(const PodText& o) const;
  bool operator==(std::string_view text) const;

 private:
  std::string own_;     // head then tail
  uint32_t split_ = 0;  // own_[0, split_) is the head
  std::shared_ptr<const std::string> spec_;
};

}  // namespace nodeagent::api
