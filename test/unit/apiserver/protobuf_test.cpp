#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/protobuf.h"

using nlohmann::json;
using nodeagent::testapiserver::decodeProtobufObject;

namespace {

std::string field(int number, const std::string& bytes) {
  std::string out;
  out += static_cast<char>((number << 3) | 2);
  out += static_cast<char>(bytes.size());  // every test message is shorter than 128 bytes
  return out + bytes;
}

std::string envelope(const std::string& kind, const std::string& raw) {
  return std::string("k8s\0", 4) + field(1, field(1, "v1") + field(2, kind)) + field(2, raw) +
         field(4, "application/vnd.kubernetes.protobuf");
}

}  // namespace

TEST_CASE("protobuf: a Namespace from kubectl create namespace decodes to JSON metadata",
          "[unit][apiserver]") {
  std::string meta =
      field(1, "team-a") + field(2, "") + field(11, field(1, "env") + field(2, "dev"));
  std::string raw = field(1, meta) + field(2, "") + field(3, "");
  auto decoded = decodeProtobufObject(envelope("Namespace", raw));
  REQUIRE(decoded.ok());
  CHECK(*decoded == json({{"apiVersion", "v1"},
                          {"kind", "Namespace"},
                          {"metadata", {{"name", "team-a"}, {"labels", {{"env", "dev"}}}}}}));
}

TEST_CASE("protobuf: other kinds and malformed bodies are errors", "[unit][apiserver]") {
  auto pod = decodeProtobufObject(envelope("Pod", ""));
  REQUIRE_FALSE(pod.ok());
  CHECK(pod.status().code() == nodeagent::base::StatusCode::kUnimplemented);
  CHECK_FALSE(decodeProtobufObject("{\"kind\":\"Namespace\"}").ok());
  std::string truncated = envelope("Namespace", field(1, field(1, "x")));
  truncated.resize(truncated.size() - 40);
  CHECK_FALSE(decodeProtobufObject(truncated).ok());
}
