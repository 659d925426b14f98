// SPDY/3.1 framing, without sockets: the frames kubectl's port-forward (and exec/attach over
// SPDY) exchange with a kubelet, their encoding, an incremental decoder with limits, and the
// header blocks' compression (zlib with SPDY/3's dictionary, one compression context per
// direction for the whole session, as the protocol requires). Pure and single-threaded; the
// session (spdy_session.h) puts it on a connection.
//
// Wire format: a control frame is `1 | version(15) | type(16) | flags(8) | length(24) | data`,
// a data frame `0 | stream id(31) | flags(8) | length(24) | data`, all big-endian. Header blocks
// are `count(32)` then `name length(32) name value length(32) value` per header, compressed.
#pragma once

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace nodeagent::agent::spdy {

constexpr uint16_t kVersion = 3;

enum class FrameType : uint16_t {
  kData = 0,  // not a control frame
  kSynStream = 1,
  kSynReply = 2,
  kRstStream = 3,
  kSettings = 4,
  kPing = 6,
  kGoAway = 7,
  kHeaders = 8,
  kWindowUpdate = 9,
};

constexpr uint8_t kFlagFin = 0x01;
constexpr uint8_t kFlagUnidirectional = 0x02;  // SYN_STREAM only

// RST_STREAM status codes.
constexpr uint32_t kProtocolError = 1;
constexpr uint32_t kInvalidStream = 2;
constexpr uint32_t kRefusedStream = 3;
constexpr uint32_t kCancel = 5;
constexpr uint32_t kInternalError = 6;
constexpr uint32_t kStreamInUse = 8;
constexpr uint32_t kFrameTooLarge = 11;
// GOAWAY status codes.
constexpr uint32_t kGoAwayOk = 0;
constexpr uint32_t kGoAwayProtocolError = 1;
constexpr uint32_t kGoAwayInternalError = 2;

// SETTINGS_INITIAL_WINDOW_SIZE, and SPDY/3.1's default stream and session windows.
constexpr uint32_t kSettingsInitialWindowSize = 7;
constexpr uint32_t kDefaultWindow = 64 * 1024;

// Names are lowercase on the wire; a value holding several values separates them with NUL.
using Headers = std::vector<std::pair<std::string, std::string>>;

// The value of the first header named `name` (ASCII case-insensitive), or "".
std::string_view headerValue(const Headers& headers, std::string_view name);

// One decoded frame; the fields its type does not carry stay zero or empty.
struct Frame {
  FrameType type = FrameType::kData;
  uint8_t flags = 0;
  uint32_t stream_id = 0;      // data, SYN_STREAM, SYN_REPLY, RST_STREAM, HEADERS, WINDOW_UPDATE
  uint32_t associated_id = 0;  // SYN_STREAM
  uint8_t priority = 0;        // SYN_STREAM (0 highest .. 7)
  uint32_t status = 0;         // RST_STREAM, GOAWAY
  uint32_t last_good_id = 0;   // GOAWAY
  uint32_t delta = 0;          // WINDOW_UPDATE
  uint32_t ping_id = 0;        // PING
  std::vector<std::pair<uint32_t, uint32_t>> settings;  // SETTINGS: (flags << 24 | id, value)
  Headers headers;                                      // SYN_STREAM, SYN_REPLY, HEADERS
  std::string data;                                     // data frames

  bool fin() const { return (flags & kFlagFin) != 0; }
};

// SPDY/3's zlib dictionary (the spec, 2.6.10.1): 1423 bytes.
const std::string& headerDictionary();

// Compresses header blocks: one context for every block a side sends.
class HeaderCompressor {
 public:
  HeaderCompressor();
  ~HeaderCompressor();
  HeaderCompressor(const HeaderCompressor&) = delete;
  HeaderCompressor& operator=(const HeaderCompressor&) = delete;

  // The block of `headers`, compressed and flushed (Z_SYNC_FLUSH) so that it decodes alone.
  std::string compress(const Headers& headers);

 private:
  z_stream z_{};
};

// Decompresses the peer's header blocks (the matching context).
class HeaderDecompressor {
 public:
  // `max_block`: the largest decompressed block accepted.
  explicit HeaderDecompressor(size_t max_block);
  ~HeaderDecompressor();
  HeaderDecompressor(const HeaderDecompressor&) = delete;
  HeaderDecompressor& operator=(const HeaderDecompressor&) = delete;

  // The headers of one compressed block; an error (invalid data, wrong dictionary, a block
  // larger than the limit, a malformed block) leaves the context unusable.
  base::StatusOr<Headers> decompress(std::string_view block);

 private:
  z_stream z_{};
  const size_t max_block_;
  bool ok_ = true;
};

// The uncompressed header block of `headers`, and its parse (limits: `max_headers` entries).
std::string encodeHeaderBlock(const Headers& headers);
base::StatusOr<Headers> parseHeaderBlock(std::string_view block, size_t max_headers);

// Encoders (the compressor is the sending side's context).
std::string encodeData(uint32_t stream_id, uint8_t flags, std::string_view data);
std::string encodeSynStream(HeaderCompressor& c, uint32_t stream_id, uint32_t associated_id,
                            uint8_t priority, uint8_t flags, const Headers& headers);
std::string encodeSynReply(HeaderCompressor& c, uint32_t stream_id, uint8_t flags,
                           const Headers& headers);
std::string encodeHeaders(HeaderCompressor& c, uint32_t stream_id, uint8_t flags,
                          const Headers& headers);
std::string encodeRstStream(uint32_t stream_id, uint32_t status);
std::string encodeSettings(const std::vector<std::pair<uint32_t, uint32_t>>& settings);
std::string encodePing(uint32_t id);
std::string encodeGoAway(uint32_t last_good_id, uint32_t status);
std::string encodeWindowUpdate(uint32_t stream_id, uint32_t delta);

struct DecoderLimits {
  size_t max_frame = 1024 * 1024;       // a frame's length field
  size_t max_header_block = 64 * 1024;  // decompressed
  size_t max_headers = 256;             // entries in a block
};

// Splits a byte stream into frames. Errors are the peer's protocol errors and end the session
// (the header context is shared, so nothing after a bad frame can be trusted); unknown control
// frame types are skipped, as SPDY requires.
class FrameDecoder {
 public:
  explicit FrameDecoder(DecoderLimits limits = {});

  void feed(std::string_view bytes) { buffer_.append(bytes); }
  // The next whole frame, nullopt when more bytes are needed, or the protocol error.
  base::StatusOr<std::optional<Frame>> next();
  // Bytes fed and not yet decoded.
  size_t buffered() const { return buffer_.size() - offset_; }

 private:
  base::StatusOr<Frame> decodeControl(uint16_t type, uint8_t flags, std::string_view body);

  DecoderLimits limits_;
  HeaderDecompressor decompressor_;
  std::string buffer_;
  size_t offset_ = 0;
};

}  // namespace nodeagent::agent::spdy
