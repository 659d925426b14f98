#include "api/pod_text.h"

#include <algorithm>
#include <stdexcept>

namespace nodeagent::api {

PodText::PodText(std::string whole) : own_(std::move(whole)) {
  own_.shrink_to_fit();  // kept for the pod's life
}

PodText::PodText(std::string_view whole, size_t spec_begin, size_t spec_end,
                 std::shared_ptr<const std::string> spec)
    : spec_(std::move(spec)) {
  if (spec_begin == 0 || spec_begin > spec_end || spec_end > whole.size() || spec_ == nullptr ||
      whole.substr(spec_begin, spec_end - spec_begin) != *spec_ || spec_begin > UINT32_MAX) {
    throw std::invalid_argument("PodText: the spec piece does not match the text");
  }
  own_.reserve(whole.size() - (spec_end - spec_begin));
  own_.append(whole.substr(0, spec_begin));
  own_.append(whole.substr(spec_end));
  split_ = static_cast<uint32_t>(spec_begin);
}

std::string PodText::str() const {
  std::string out;
  appendTo(out);
  return out;
}

void PodText::appendTo(std::string& out) const {
  out.reserve(out.size() + size());
  for (std::string_view piece : pieces()) out.append(piece);
}

bool PodText::contains(std::string_view needle) const {
  if (needle.empty()) return true;
  const auto parts = pieces();
  for (std::string_view piece : parts) {
    if (piece.find(needle) != std::string_view::npos) return true;
  }
  // An occurrence across a boundary starts within needle.size() - 1 bytes before it.
  const auto charAt = [&parts](size_t pos) {
    for (std::string_view piece : parts) {
      if (pos < piece.size()) return piece[pos];
      pos -= piece.size();
    }
    return '\0';  // not reached: callers stay within size()
  };
  const size_t total = size();
  size_t boundary = 0;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    if (parts[i].empty()) continue;  // the same boundary as the one before
    boundary += parts[i].size();
    const size_t from = boundary >= needle.size() ? boundary - needle.size() + 1 : 0;
    for (size_t start = from; start < boundary && start + needle.size() <= total; ++start) {
      size_t k = 0;
      while (k < needle.size() && charAt(start + k) == needle[k]) ++k;
      if (k == needle.size()) return true;
    }
  }
  return false;
}

bool PodText::operator==(std::string_view text) const {
  if (text.size() != size()) return false;
  for (std::string_view piece : pieces()) {
    if (text.substr(0, piece.size()) != piece) return false;
    text.remove_prefix(piece.size());
  }
  return true;
}

bool PodText::operator==(const PodText& o) const {
  if (sharesSpecWith(o) || (!spec_ && !o.spec_)) {
    return split_ == o.split_ && own_ == o.own_;
  }
  return size() == o.size() && o == std::string_view(str());
}

}  // namespace nodeagent::api
