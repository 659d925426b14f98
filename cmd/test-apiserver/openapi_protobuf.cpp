// /openapi/v2 in the gnostic protobuf form (openapi_v2.Document of
// github.com/google/gnostic-models/openapiv2/OpenAPIv2.proto) client-go's OpenAPISchema() reads:
// the swagger version, the info and the definitions, made of the JSON document's. Paths are left
// out: their readers (kubectl's query parameter check) read OpenAPI v3 when it is served.
#include <cstdint>

#include <nlohmann/json.hpp>

#include "cmd/test-apiserver/openapi.h"

namespace nodeagent::testapiserver {
namespace {

using nlohmann::json;

// Field numbers of the messages written (OpenAPIv2.proto).
constexpr int kDocumentSwagger = 1, kDocumentInfo = 2, kDocumentDefinitions = 9;
constexpr int kInfoTitle = 1, kInfoVersion = 2;
constexpr int kNamedName = 1, kNamedValue = 2;  // NamedSchema, NamedAny
constexpr int kAnyYaml = 2;
constexpr int kListItem =
    1;  // Definitions, Properties, ItemsItem, TypeItem, AdditionalPropertiesItem
constexpr int kSchemaRef = 1, kSchemaFormat = 2, kSchemaDescription = 4, kSchemaRequired = 19,
              kSchemaAdditionalProperties = 21, kSchemaType = 22, kSchemaItems = 23,
              kSchemaAllOf = 24, kSchemaProperties = 25, kSchemaVendorExtension = 31;

void putVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

// A length-delimited field: a string, bytes or an embedded message.
void putBytes(std::string& out, int field, std::string_view bytes) {
  putVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  putVarint(out, bytes.size());
  out.append(bytes);
}

std::string namedValue(const std::string& name, const std::string& value) {
  std::string out;
  putBytes(out, kNamedName, name);
  putBytes(out, kNamedValue, value);
  return out;
}

std::string schemaMessage(const json& schema);

// Properties, Definitions: a list of NamedSchema.
std::string namedSchemas(const json& schemas) {
  std::string out;
  for (const auto& [name, schema] : schemas.items()) {
    putBytes(out, kListItem, namedValue(name, schemaMessage(schema)));
  }
  return out;
}

// A vendor extension's value, as YAML (JSON is YAML).
std::string vendorExtension(const std::string& name, const json& value) {
  std::string any;
  putBytes(any, kAnyYaml, value.dump());
  return namedValue(name, any);
}

std::string schemaMessage(const json& schema) {
  std::string out;
  auto text = [&](const char* key, int field) {
    if (schema.contains(key)) putBytes(out, field, schema[key].get<std::string>());
  };
  text("$ref", kSchemaRef);
  text("format", kSchemaFormat);
  text("description", kSchemaDescription);
  for (const auto& r : schema.value("required", json::array())) {
    putBytes(out, kSchemaRequired, r.get<std::string>());
  }
  if (schema.contains("additionalProperties")) {
    std::string item;
    putBytes(item, kListItem, schemaMessage(schema["additionalProperties"]));
    putBytes(out, kSchemaAdditionalProperties, item);
  }
  if (schema.contains("type")) {
    std::string item;
    putBytes(item, kListItem, schema["type"].get<std::string>());
    putBytes(out, kSchemaType, item);
  }
  if (schema.contains("items")) {
    std::string item;
    putBytes(item, kListItem, schemaMessage(schema["items"]));
    putBytes(out, kSchemaItems, item);
  }
  for (const auto& s : schema.value("allOf", json::array())) {
    putBytes(out, kSchemaAllOf, schemaMessage(s));
  }
  if (schema.contains("properties")) {
    putBytes(out, kSchemaProperties, namedSchemas(schema["properties"]));
  }
  for (const auto& [key, value] : schema.items()) {
    if (key.starts_with("x-")) putBytes(out, kSchemaVendorExtension, vendorExtension(key, value));
  }
  return out;
}

}  // namespace

const std::string& openApiV2Protobuf() {
  static const std::string kDocument = [] {
    const json& doc = openApiV2Document();
    std::string info;
    putBytes(info, kInfoTitle, doc["info"]["title"].get<std::string>());
    putBytes(info, kInfoVersion, doc["info"]["version"].get<std::string>());
    std::string out;
    putBytes(out, kDocumentSwagger, doc["swagger"].get<std::string>());
    putBytes(out, kDocumentInfo, info);
    putBytes(out, kDocumentDefinitions, namedSchemas(doc["definitions"]));
    return out;
  }();
  return kDocument;
}

}  // namespace nodeagent::testapiserver
