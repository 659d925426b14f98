// SPDY/3.1 frames and header blocks (see spdy_frame.h).
#include "agent/server/spdy_frame.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <limits>

#include "base/strings.h"

namespace nodeagent::agent::spdy {
namespace {

// The dictionary's words (each preceded on the wire by its length, 4 bytes big-endian), then
// its tail of status lines, dates and media types, in the spec's order.
constexpr std::array kDictionaryWords = {
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
};
constexpr std::string_view kDictionaryTail =
    "1001012012022052063003023033043053063074024054064074084094104114124134144154164175025045"
    "05203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401"
    " Unauthorized403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 S"
    "ervice UnavailableJan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, We"
    "d, Thu, Fri, Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/gif,application/xm"
    "l,application/xhtml+xml,text/plain,text/javascript,publicprivatemax-age=gzip,deflate,sdc"
    "hcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.";

void put32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

uint32_t get32(std::string_view in, size_t at) {
  return static_cast<uint32_t>(static_cast<unsigned char>(in[at])) << 24 |
         static_cast<uint32_t>(static_cast<unsigned char>(in[at + 1])) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(in[at + 2])) << 8 |
         static_cast<uint32_t>(static_cast<unsigned char>(in[at + 3]));
}

std::string controlFrame(FrameType type, uint8_t flags, std::string_view body) {
  std::string out;
  out.reserve(8 + body.size());
  put32(out, 0x80000000u | static_cast<uint32_t>(kVersion) << 16 | static_cast<uint16_t>(type));
  put32(out, static_cast<uint32_t>(flags) << 24 | static_cast<uint32_t>(body.size()));
  out.append(body);
  return out;
}

// SYN_REPLY and HEADERS: the stream id, then the header block.
std::string streamHeadersFrame(FrameType type, HeaderCompressor& c, uint32_t stream_id,
                               uint8_t flags, const Headers& headers) {
  std::string body;
  put32(body, stream_id & 0x7fffffffu);
  body += c.compress(headers);
  return controlFrame(type, flags, body);
}

// zlib's memory for the sending side: a 4 KiB window holds the whole dictionary, and blocks
// are small (the peer's side uses whatever window it announces; the receiver needs 32 KiB).
constexpr int kDeflateWindowBits = 12;
constexpr int kDeflateMemLevel = 4;

}  // namespace

std::string_view headerValue(const Headers& headers, std::string_view name) {
  for (const auto& [n, v] : headers) {
    if (base::iequals(n, name)) return v;
  }
  return {};
}

const std::string& headerDictionary() {
  static const std::string dictionary = [] {
    std::string d;
    for (std::string_view word : kDictionaryWords) {
      put32(d, static_cast<uint32_t>(word.size()));
      d.append(word);
    }
    d.append(kDictionaryTail);
    return d;
  }();
  return dictionary;
}

std::string encodeHeaderBlock(const Headers& headers) {
  std::string out;
  put32(out, static_cast<uint32_t>(headers.size()));
  for (const auto& [name, value] : headers) {
    put32(out, static_cast<uint32_t>(name.size()));
    out.append(base::asciiLower(name));
    put32(out, static_cast<uint32_t>(value.size()));
    out.append(value);
  }
  return out;
}

base::StatusOr<Headers> parseHeaderBlock(std::string_view block, size_t max_headers) {
  if (block.size() < 4) return base::invalidArgumentError("header block shorter than its count");
  const uint32_t count = get32(block, 0);
  if (count > max_headers) {
    return base::invalidArgumentError("header block with " + std::to_string(count) +
                                      " entries (at most " + std::to_string(max_headers) + ")");
  }
  Headers headers;
  size_t at = 4;
  auto field = [&](std::string& out) {
    if (block.size() - at < 4) return false;
    const uint32_t n = get32(block, at);
    at += 4;
    if (block.size() - at < n) return false;
    out.assign(block.substr(at, n));
    at += n;
    return true;
  };
  for (uint32_t i = 0; i < count; ++i) {
    std::string name, value;
    if (!field(name) || !field(value)) return base::invalidArgumentError("truncated header block");
    if (name.empty()) return base::invalidArgumentError("empty header name");
    headers.emplace_back(std::move(name), std::move(value));
  }
  if (at != block.size()) return base::invalidArgumentError("bytes after the header block");
  return headers;
}

HeaderCompressor::HeaderCompressor() {
  const std::string& dict = headerDictionary();
  if (deflateInit2(&z_, Z_DEFAULT_COMPRESSION, Z_DEFLATED, kDeflateWindowBits, kDeflateMemLevel,
                   Z_DEFAULT_STRATEGY) != Z_OK ||
      deflateSetDictionary(&z_, reinterpret_cast<const Bytef*>(dict.data()),
                           static_cast<uInt>(dict.size())) != Z_OK) {
    std::abort();  // only out of memory gets here
  }
}

HeaderCompressor::~HeaderCompressor() { deflateEnd(&z_); }

std::string HeaderCompressor::compress(const Headers& headers) {
  std::string in = encodeHeaderBlock(headers);
  std::string out;
  z_.next_in = reinterpret_cast<Bytef*>(in.data());
  z_.avail_in = static_cast<uInt>(in.size());
  do {
    const size_t had = out.size();
    out.resize(had + in.size() + 64);
    z_.next_out = reinterpret_cast<Bytef*>(out.data() + had);
    z_.avail_out = static_cast<uInt>(out.size() - had);
    deflate(&z_, Z_SYNC_FLUSH);
    out.resize(out.size() - z_.avail_out);
  } while (z_.avail_out == 0);
  return out;
}

HeaderDecompressor::HeaderDecompressor(size_t max_block) : max_block_(max_block) {
  if (inflateInit(&z_) != Z_OK) std::abort();  // only out of memory gets here
}

HeaderDecompressor::~HeaderDecompressor() { inflateEnd(&z_); }

base::StatusOr<Headers> HeaderDecompressor::decompress(std::string_view block) {
  if (!ok_) return base::failedPreconditionError("header decompression failed before");
  ok_ = false;
  std::string out;
  z_.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(block.data()));
  z_.avail_in = static_cast<uInt>(block.size());
  while (true) {
    const size_t had = out.size();
    if (had >= max_block_) return base::resourceExhaustedError("header block too large");
    out.resize(std::min(max_block_, had + 4096));
    z_.next_out = reinterpret_cast<Bytef*>(out.data() + had);
    z_.avail_out = static_cast<uInt>(out.size() - had);
    int rc = inflate(&z_, Z_SYNC_FLUSH);
    if (rc == Z_NEED_DICT) {
      const std::string& dict = headerDictionary();
      if (inflateSetDictionary(&z_, reinterpret_cast<const Bytef*>(dict.data()),
                               static_cast<uInt>(dict.size())) != Z_OK) {
        return base::invalidArgumentError("header block compressed with another dictionary");
      }
      rc = inflate(&z_, Z_SYNC_FLUSH);
    }
    out.resize(out.size() - z_.avail_out);
    // Z_BUF_ERROR: no progress was possible (all input used, nothing more to give).
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      return base::invalidArgumentError(std::string("bad compressed header block: ") +
                                        (z_.msg != nullptr ? z_.msg : "zlib error"));
    }
    if (z_.avail_in == 0 && z_.avail_out > 0) break;
  }
  auto headers = parseHeaderBlock(out, std::numeric_limits<size_t>::max());
  if (headers.ok()) ok_ = true;
  return headers;
}

std::string encodeData(uint32_t stream_id, uint8_t flags, std::string_view data) {
  std::string out;
  out.reserve(8 + data.size());
  put32(out, stream_id & 0x7fffffffu);
  put32(out, static_cast<uint32_t>(flags) << 24 | static_cast<uint32_t>(data.size()));
  out.append(data);
  return out;
}

std::string encodeSynStream(HeaderCompressor& c, uint32_t stream_id, uint32_t associated_id,
                            uint8_t priority, uint8_t flags, const Headers& headers) {
  std::string body;
  put32(body, stream_id & 0x7fffffffu);
  put32(body, associated_id & 0x7fffffffu);
  body.push_back(static_cast<char>((priority & 0x7) << 5));
  body.push_back('\0');  // slot
  body += c.compress(headers);
  return controlFrame(FrameType::kSynStream, flags, body);
}

std::string encodeSynReply(HeaderCompressor& c, uint32_t stream_id, uint8_t flags,
                           const Headers& headers) {
  return streamHeadersFrame(FrameType::kSynReply, c, stream_id, flags, headers);
}

std::string encodeHeaders(HeaderCompressor& c, uint32_t stream_id, uint8_t flags,
                          const Headers& headers) {
  return streamHeadersFrame(FrameType::kHeaders, c, stream_id, flags, headers);
}

std::string encodeRstStream(uint32_t stream_id, uint32_t status) {
  std::string body;
  put32(body, stream_id & 0x7fffffffu);
  put32(body, status);
  return controlFrame(FrameType::kRstStream, 0, body);
}

std::string encodeSettings(const std::vector<std::pair<uint32_t, uint32_t>>& settings) {
  std::string body;
  put32(body, static_cast<uint32_t>(settings.size()));
  for (const auto& [id, value] : settings) {
    put32(body, id);
    put32(body, value);
  }
  return controlFrame(FrameType::kSettings, 0, body);
}

std::string encodePing(uint32_t id) {
  std::string body;
  put32(body, id);
  return controlFrame(FrameType::kPing, 0, body);
}

std::string encodeGoAway(uint32_t last_good_id, uint32_t status) {
  std::string body;
  put32(body, last_good_id & 0x7fffffffu);
  put32(body, status);
  return controlFrame(FrameType::kGoAway, 0, body);
}

std::string encodeWindowUpdate(uint32_t stream_id, uint32_t delta) {
  std::string body;
  put32(body, stream_id & 0x7fffffffu);
  put32(body, delta & 0x7fffffffu);
  return controlFrame(FrameType::kWindowUpdate, 0, body);
}

FrameDecoder::FrameDecoder(DecoderLimits limits)
    : limits_(limits), decompressor_(limits.max_header_block) {}

base::StatusOr<std::optional<Frame>> FrameDecoder::next() {
  while (true) {
    const std::string_view in = std::string_view(buffer_).substr(offset_);
    if (in.size() < 8) break;
    const uint32_t first = get32(in, 0);
    const uint32_t second = get32(in, 4);
    const uint8_t flags = static_cast<uint8_t>(second >> 24);
    const size_t length = second & 0xffffffu;
    if (length > limits_.max_frame) {
      return base::resourceExhaustedError("frame of " + std::to_string(length) +
                                          " bytes (at most " + std::to_string(limits_.max_frame) +
                                          ")");
    }
    if (in.size() < 8 + length) break;
    const std::string_view body = in.substr(8, length);
    offset_ += 8 + length;
    if ((first & 0x80000000u) == 0) {
      Frame frame;
      frame.flags = flags;
      frame.stream_id = first & 0x7fffffffu;
      if (frame.stream_id == 0) return base::invalidArgumentError("data frame on stream 0");
      frame.data.assign(body);
      return std::optional<Frame>(std::move(frame));
    }
    const uint16_t version = static_cast<uint16_t>((first >> 16) & 0x7fff);
    if (version != kVersion) {
      return base::invalidArgumentError("unsupported SPDY version " + std::to_string(version));
    }
    const uint16_t type = static_cast<uint16_t>(first & 0xffff);
    if (type == 5 || type == 0 || type > 9) continue;  // unknown (or SPDY/2's NOOP): skipped
    auto frame = decodeControl(type, flags, body);
    if (!frame.ok()) return frame.status();
    return std::optional<Frame>(std::move(*frame));
  }
  if (offset_ > 0 && offset_ >= buffer_.size() / 2) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return std::optional<Frame>();
}

namespace {

// The fields of a control frame's body; `block` is set to its compressed header block, if any.
base::Status parseControlBody(Frame& f, std::string_view body, std::string_view& block) {
  auto size = [&](size_t n, bool exact) { return exact ? body.size() == n : body.size() >= n; };
  const base::Status bad = base::invalidArgumentError("malformed control frame of type " +
                                                      std::to_string(static_cast<int>(f.type)));
  switch (f.type) {
    case FrameType::kSynStream:
      if (!size(10, false)) return bad;
      f.stream_id = get32(body, 0) & 0x7fffffffu;
      f.associated_id = get32(body, 4) & 0x7fffffffu;
      f.priority = static_cast<uint8_t>(static_cast<unsigned char>(body[8]) >> 5);
      block = body.substr(10);
      return f.stream_id == 0 ? bad : base::Status();
    case FrameType::kSynReply:
    case FrameType::kHeaders:
      if (!size(4, false)) return bad;
      f.stream_id = get32(body, 0) & 0x7fffffffu;
      block = body.substr(4);
      return f.stream_id == 0 ? bad : base::Status();
    case FrameType::kRstStream:
      if (!size(8, true)) return bad;
      f.stream_id = get32(body, 0) & 0x7fffffffu;
      f.status = get32(body, 4);
      return f.stream_id == 0 ? bad : base::Status();
    case FrameType::kSettings: {
      if (!size(4, false) || (body.size() - 4) / 8 != get32(body, 0) || body.size() % 8 != 4) {
        return bad;
      }
      for (size_t at = 4; at < body.size(); at += 8) {
        f.settings.emplace_back(get32(body, at), get32(body, at + 4));
      }
      return base::Status();
    }
    case FrameType::kPing:
      if (!size(4, true)) return bad;
      f.ping_id = get32(body, 0);
      return base::Status();
    case FrameType::kGoAway:
      if (!size(8, true)) return bad;
      f.last_good_id = get32(body, 0) & 0x7fffffffu;
      f.status = get32(body, 4);
      return base::Status();
    case FrameType::kWindowUpdate:
      if (!size(8, true)) return bad;
      f.stream_id = get32(body, 0) & 0x7fffffffu;
      f.delta = get32(body, 4) & 0x7fffffffu;
      return f.delta == 0 ? bad : base::Status();
    default:
      return bad;
  }
}

}  // namespace

base::StatusOr<Frame> FrameDecoder::decodeControl(uint16_t type, uint8_t flags,
                                                  std::string_view body) {
  Frame f;
  f.type = static_cast<FrameType>(type);
  f.flags = flags;
  std::string_view block;
  const bool has_block = f.type == FrameType::kSynStream || f.type == FrameType::kSynReply ||
                         f.type == FrameType::kHeaders;
  base::Status parsed = parseControlBody(f, body, block);
  if (!parsed.ok()) return parsed;
  if (has_block) {
    auto headers = decompressor_.decompress(block);
    if (!headers.ok()) return headers.status();
    if (headers->size() > limits_.max_headers) {
      return base::invalidArgumentError("header block with too many headers");
    }
    f.headers = std::move(*headers);
  }
  return f;
}

}  // namespace nodeagent::agent::spdy
