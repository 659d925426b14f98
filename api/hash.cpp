#include "api/hash.h"

#include <bit>
#include <cstring>

namespace nodeagent::api {
namespace {

// MurmurHash3_x64_128 (Austin Appleby, public domain) with seed 0. Blocks are read
// little-endian, as the reference implementation does on x86-64, so the value is the same on
// every host.

inline uint64_t rotl64(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

inline uint64_t fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

inline uint64_t load64le(const unsigned char* p) {
  if constexpr (std::endian::native == std::endian::little) {
    uint64_t v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  } else {
    uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
}

constexpr uint64_t kC1 = 0x87c37b91114253d5ULL;
constexpr uint64_t kC2 = 0x4cf5ad432745937fULL;

inline uint64_t mixK1(uint64_t k1) {
  k1 *= kC1;
  k1 = rotl64(k1, 31);
  return k1 * kC2;
}

inline uint64_t mixK2(uint64_t k2) {
  k2 *= kC2;
  k2 = rotl64(k2, 33);
  return k2 * kC1;
}

// One 16-byte block.
inline void bodyRound(const unsigned char* block, uint64_t& h1, uint64_t& h2) {
  h1 ^= mixK1(load64le(block));
  h1 = rotl64(h1, 27);
  h1 += h2;
  h1 = h1 * 5 + 0x52dce729;
  h2 ^= mixK2(load64le(block + 8));
  h2 = rotl64(h2, 31);
  h2 += h1;
  h2 = h2 * 5 + 0x38495ab5;
}

// The last n < 16 bytes: bytes 8 and up form k2 and bytes 0-7 form k1, little-endian (the
// reference's fall-through switch).
inline void tailRound(const unsigned char* tail, size_t n, uint64_t& h1, uint64_t& h2) {
  uint64_t k1 = 0;
  uint64_t k2 = 0;
  for (size_t i = n; i > 8; --i) k2 ^= uint64_t{tail[i - 1]} << (8 * (i - 9));
  if (n > 8) h2 ^= mixK2(k2);
  for (size_t i = n < 8 ? n : 8; i > 0; --i) k1 ^= uint64_t{tail[i - 1]} << (8 * (i - 1));
  if (n > 0) h1 ^= mixK1(k1);
}

}  // namespace

Hash128 hash128(std::string_view bytes) {
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t len = bytes.size();
  const size_t nblocks = len / 16;
  uint64_t h1 = 0;
  uint64_t h2 = 0;
  for (size_t i = 0; i < nblocks; ++i) bodyRound(data + i * 16, h1, h2);
  tailRound(data + nblocks * 16, len & 15, h1, h2);

  // Finalization.
  h1 ^= len;
  h2 ^= len;
  h1 += h2;
  h2 += h1;
  h1 = fmix64(h1);
  h2 = fmix64(h2);
  h1 += h2;
  h2 += h1;
  return Hash128{h1, h2};
}

std::string Hash128::toHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[15 - i] = kDigits[(high >> (4 * i)) & 0xf];
    out[31 - i] = kDigits[(low >> (4 * i)) & 0xf];
  }
  return out;
}

}  // namespace nodeagent::api
