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

TEST_CASE("protobuf: kubectl create configmap, secret and serviceaccount bodies decode",
          "[unit][apiserver]") {
  auto varint_field = [](int number, char value) {
    return std::string{static_cast<char>(number << 3), value};
  };
  const std::string meta = field(1, field(1, "cfg") + field(3, "team-a"));
  auto cm = decodeProtobufObject(
      envelope("ConfigMap", meta + field(2, field(1, "a") + field(2, "b")) +
                                field(3, field(1, "bin") + field(2, std::string("\0\1", 2))) +
                                varint_field(4, 1)));
  REQUIRE(cm.ok());
  CHECK(*cm == json({{"apiVersion", "v1"},
                     {"kind", "ConfigMap"},
                     {"metadata", {{"name", "cfg"}, {"namespace", "team-a"}}},
                     {"data", {{"a", "b"}}},
                     {"binaryData", {{"bin", "AAE="}}},
                     {"immutable", true}}));

  auto secret = decodeProtobufObject(
      envelope("Secret", meta + field(2, field(1, "k") + field(2, "v")) +
                             field(3, "kubernetes.io/basic-auth") +
                             field(4, field(1, "s") + field(2, "t")) + varint_field(5, 0)));
  REQUIRE(secret.ok());
  CHECK((*secret)["data"] == json({{"k", "dg=="}}));
  CHECK((*secret)["type"] == "kubernetes.io/basic-auth");
  CHECK((*secret)["stringData"] == json({{"s", "t"}}));
  CHECK((*secret)["immutable"] == false);

  auto sa = decodeProtobufObject(
      envelope("ServiceAccount", meta + field(2, field(1, "Secret") + field(3, "tok")) +
                                     field(3, field(1, "reg")) + varint_field(4, 0)));
  REQUIRE(sa.ok());
  CHECK((*sa)["secrets"] == json::array({{{"kind", "Secret"}, {"name", "tok"}}}));
  CHECK((*sa)["imagePullSecrets"] == json::array({{{"name", "reg"}}}));
  CHECK((*sa)["automountServiceAccountToken"] == false);
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

TEST_CASE("protobuf: kubectl create token's TokenRequest decodes with its spec",
          "[unit][apiserver]") {
  // As kubectl v1.32 sends `create token default --audience=a1 --audience=a2 --duration=20m
  // --bound-object-kind=Pod --bound-object-name=p1 --bound-object-uid=u1`.
  const std::string body(
      "k8s\x00\n(\n\x18"
      "authentication.k8s.io/v1\x12\x0cTokenRequest\x12"
      ""
      "8\n\x10\n\x00\x12\x00\x1a\x00\"\x00*\x00"
      "2\x00"
      "8\x00"
      "B"
      "\x00\x12\x1e\n\x02"
      "a1\n\x02"
      "a2\x1a\x11\n\x03Pod\x12\x02v1\x1a\x02p"
      "1\"\x02u1 \xb0\t\x1a\x04\n\x00\x12\x00\x1a\x00\"\x00",
      108);
  auto decoded = decodeProtobufObject(body);
  REQUIRE(decoded.ok());
  CHECK(*decoded ==
        json({{"apiVersion", "authentication.k8s.io/v1"},
              {"kind", "TokenRequest"},
              {"metadata", json::object()},
              {"spec",
               {{"audiences", {"a1", "a2"}},
                {"expirationSeconds", 1200},
                {"boundObjectRef",
                 {{"kind", "Pod"}, {"apiVersion", "v1"}, {"name", "p1"}, {"uid", "u1"}}}}}}));
}
