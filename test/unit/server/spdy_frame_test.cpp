// SPDY/3.1 framing: round trips of every frame type, header compression with SPDY/3's
// dictionary (against blocks another zlib made), and malformed input refused.
#include "agent/server/spdy_frame.h"

#include <zlib.h>

#include <catch2/catch.hpp>

#include <string>

using namespace nodeagent::agent;
using namespace nodeagent::agent::spdy;

namespace {

Frame decodeOne(FrameDecoder& decoder, const std::string& bytes) {
  decoder.feed(bytes);
  auto next = decoder.next();
  REQUIRE(next.ok());
  REQUIRE(next->has_value());
  return std::move(**next);
}

std::string bytes(std::initializer_list<int> values) {
  std::string out;
  for (int v : values) out.push_back(static_cast<char>(v));
  return out;
}

// Blocks that Python's zlib compressed (level 9, 32 KiB window) with the SPDY/3 dictionary in
// one context: {port 8080, requestid 0, streamtype error}, then the same with streamtype data.
const std::string kFirstBlock(
    "\x78\xf9\xe3\xc6\xa7\xc2\x02\x25\x3a\x48\xf9\x5b\x04\x4e\xea\x16\x06\x16\x06\x40\x9a\xb3"
    "\x08\x12\x5f\x99\xa0\x74\xcc\x68\x00\x4e\x89\x25\x45\xa9\x89\xb9\xd0\xc2\x86\x35\x15\x14"
    "\x15\x00\x00\x00\x00\xff\xff",
    51);
const std::string kSecondBlock("\x22\x53\x33\xa8\xa4\x4a\x04\x00\x00\x00\xff\xff", 12);

}  // namespace

TEST_CASE("SPDY/3's dictionary is the spec's 1423 bytes", "[spdy]") {
  const std::string& d = headerDictionary();
  REQUIRE(d.size() == 1423);
  CHECK(d.substr(0, 11) == bytes({0, 0, 0, 7, 'o', 'p', 't', 'i', 'o', 'n', 's'}));
  CHECK(d.substr(d.size() - 6) == "enq=0.");
  // The id a compressed stream names in its zlib header (FDICT).
  CHECK(adler32(1, reinterpret_cast<const Bytef*>(d.data()), static_cast<uInt>(d.size())) ==
        0xe3c6a7c2u);
}

TEST_CASE("Header blocks compressed by another zlib decode, in one context", "[spdy]") {
  HeaderDecompressor d(64 * 1024);
  auto first = d.decompress(kFirstBlock);
  REQUIRE(first.ok());
  CHECK(*first == Headers{{"port", "8080"}, {"requestid", "0"}, {"streamtype", "error"}});
  auto second = d.decompress(kSecondBlock);
  REQUIRE(second.ok());
  CHECK(headerValue(*second, "streamType") == "data");
  CHECK(headerValue(*second, "missing").empty());
}

TEST_CASE("Our compressed header blocks decode with a plain zlib stream and the dictionary",
          "[spdy]") {
  HeaderCompressor c;
  const Headers headers{{"Port", "8080"}, {"streamtype", "data"}};
  const std::string block = c.compress(headers);
  const std::string again = c.compress(headers);
  CHECK(again.size() < block.size());  // the second block refers back to the first
  HeaderDecompressor d(64 * 1024);
  auto decoded = d.decompress(block);
  REQUIRE(decoded.ok());
  CHECK(*decoded == Headers{{"port", "8080"}, {"streamtype", "data"}});  // names lowercased
  auto decoded_again = d.decompress(again);
  REQUIRE(decoded_again.ok());
  CHECK(*decoded_again == *decoded);
  // The zlib header names the dictionary (FDICT and its id).
  REQUIRE(block.size() > 6);
  CHECK((static_cast<unsigned char>(block[1]) & 0x20) != 0);
  CHECK(block.substr(2, 4) == bytes({0xe3, 0xc6, 0xa7, 0xc2}));
}

TEST_CASE("Every frame type survives a round trip", "[spdy]") {
  HeaderCompressor c;
  FrameDecoder decoder;
  const Headers h{{"streamtype", "error"}, {"port", "80"}};

  Frame syn = decodeOne(decoder, encodeSynStream(c, 5, 0, 3, kFlagFin, h));
  CHECK(syn.type == FrameType::kSynStream);
  CHECK(syn.stream_id == 5);
  CHECK(syn.priority == 3);
  CHECK(syn.fin());
  CHECK(syn.headers == h);

  Frame reply = decodeOne(decoder, encodeSynReply(c, 5, 0, {}));
  CHECK(reply.type == FrameType::kSynReply);
  CHECK(reply.headers.empty());
  Frame headers = decodeOne(decoder, encodeHeaders(c, 7, kFlagFin, h));
  CHECK(headers.type == FrameType::kHeaders);
  CHECK(headers.headers == h);

  Frame data = decodeOne(decoder, encodeData(9, kFlagFin, "hello"));
  CHECK(data.type == FrameType::kData);
  CHECK(data.stream_id == 9);
  CHECK(data.data == "hello");
  CHECK(data.fin());

  Frame rst = decodeOne(decoder, encodeRstStream(9, kCancel));
  CHECK((rst.type == FrameType::kRstStream && rst.stream_id == 9 && rst.status == kCancel));
  Frame settings = decodeOne(decoder, encodeSettings({{kSettingsInitialWindowSize, 1234}}));
  CHECK(settings.settings == std::vector<std::pair<uint32_t, uint32_t>>{{7, 1234}});
  Frame ping = decodeOne(decoder, encodePing(77));
  CHECK((ping.type == FrameType::kPing && ping.ping_id == 77));
  Frame goaway = decodeOne(decoder, encodeGoAway(11, kGoAwayProtocolError));
  CHECK((goaway.last_good_id == 11 && goaway.status == kGoAwayProtocolError));
  Frame window = decodeOne(decoder, encodeWindowUpdate(0, 65536));
  CHECK((window.type == FrameType::kWindowUpdate && window.delta == 65536));
  CHECK(decoder.buffered() == 0);
}

TEST_CASE("The decoder waits for whole frames fed a byte at a time and skips unknown types",
          "[spdy]") {
  HeaderCompressor c;
  FrameDecoder decoder;
  // Type 10 (unknown): skipped; the data frame after it decodes.
  const std::string unknown = bytes({0x80, 0x03, 0x00, 0x0a, 0, 0, 0, 2, 'x', 'y'});
  const std::string wire =
      unknown + encodeSynStream(c, 1, 0, 0, 0, {{"a", "b"}}) + encodeData(1, 0, "abc");
  std::vector<Frame> frames;
  for (char ch : wire) {
    decoder.feed(std::string(1, ch));
    auto next = decoder.next();
    REQUIRE(next.ok());
    if (next->has_value()) frames.push_back(std::move(**next));
  }
  REQUIRE(frames.size() == 2);
  CHECK(frames[0].headers == Headers{{"a", "b"}});
  CHECK(frames[1].data == "abc");
}

TEST_CASE("Malformed frames are protocol errors", "[spdy]") {
  auto error = [](const std::string& wire, DecoderLimits limits = {}) {
    FrameDecoder decoder(limits);
    decoder.feed(wire);
    auto next = decoder.next();
    return !next.ok();
  };
  HeaderCompressor c;
  // Another version.
  CHECK(error(bytes({0x80, 0x02, 0x00, 0x06, 0, 0, 0, 4, 0, 0, 0, 1})));
  // PING and RST_STREAM of the wrong length, RST_STREAM on stream 0, data on stream 0.
  CHECK(error(bytes({0x80, 0x03, 0x00, 0x06, 0, 0, 0, 3, 0, 0, 1})));
  CHECK(error(bytes({0x80, 0x03, 0x00, 0x03, 0, 0, 0, 4, 0, 0, 0, 1})));
  CHECK(error(encodeRstStream(0, kCancel)));
  CHECK(error(encodeData(0, 0, "x")));
  // A WINDOW_UPDATE of 0, SETTINGS whose count disagrees with its length.
  CHECK(error(encodeWindowUpdate(1, 0)));
  CHECK(error(bytes({0x80, 0x03, 0x00, 0x04, 0, 0, 0, 4, 0, 0, 0, 2})));
  // A frame over the limit is refused from its header alone.
  CHECK(error(bytes({0x00, 0x00, 0x00, 0x01, 0, 0x10, 0, 0}), DecoderLimits{1024, 1024, 16}));
  // A header block that is not zlib.
  std::string syn = encodeSynStream(c, 1, 0, 0, 0, {{"a", "b"}});
  syn[18] = static_cast<char>(syn[18] ^ 0xff);
  CHECK(error(syn));
}

TEST_CASE("Header blocks are bounded and checked", "[spdy]") {
  // Truncated, a count beyond the limit, bytes after the last header, an empty name.
  CHECK_FALSE(parseHeaderBlock(bytes({0, 0, 0, 1, 0, 0, 0, 5, 'a'}), 10).ok());
  CHECK_FALSE(parseHeaderBlock(bytes({0, 0, 0, 20}), 10).ok());
  CHECK_FALSE(parseHeaderBlock(encodeHeaderBlock({{"a", "b"}}) + "x", 10).ok());
  CHECK_FALSE(parseHeaderBlock(encodeHeaderBlock({{"", "b"}}), 10).ok());
  CHECK(parseHeaderBlock(encodeHeaderBlock({}), 10).ok());
  // A block that inflates past the limit (a zip bomb) stops at the limit.
  HeaderCompressor c;
  const std::string big = c.compress({{"x", std::string(100000, 'a')}});
  HeaderDecompressor d(4096);
  CHECK_FALSE(d.decompress(big).ok());
  CHECK_FALSE(d.decompress(kFirstBlock).ok());  // the context is gone after an error
}
