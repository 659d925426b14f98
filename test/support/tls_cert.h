// Test TLS material made on the fly (OpenSSL), for HTTPS servers in integration tests.
#pragma once

#include <filesystem>

namespace nodeagent::testing {

// A self-signed certificate for 127.0.0.1 (also its own CA), written as `dir`/cert.pem and
// `dir`/key.pem. Fails the current test when OpenSSL cannot make it.
void writeSelfSignedCert(const std::filesystem::path& dir);

}  // namespace nodeagent::testing
