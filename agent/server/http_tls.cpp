// HttpServer's TLS: the server context (certificate, key, client CA) and the verified client
// certificate of a connection.
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <string>

#include "agent/server/http_transport.h"

namespace nodeagent::agent {
namespace {

std::string sslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "unknown error";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// The handshake never fails on a client certificate: the verdict is read afterwards
// (SSL_get_verify_result), so a request with a bad certificate gets a 401 rather than a reset.
int acceptAnyCertificate(int, X509_STORE_CTX*) { return 1; }

std::string entryText(X509_NAME_ENTRY* entry) {
  unsigned char* utf8 = nullptr;
  const int n = ASN1_STRING_to_UTF8(&utf8, X509_NAME_ENTRY_get_data(entry));
  if (n < 0) return "";
  std::string text(reinterpret_cast<char*>(utf8), static_cast<size_t>(n));
  OPENSSL_free(utf8);
  return text;
}

}  // namespace

base::StatusOr<std::unique_ptr<asio::ssl::context>> makeTlsServerContext(
    const HttpTlsServerOptions& options) {
  auto ctx = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_server);
  SSL_CTX* native = ctx->native_handle();
  SSL_CTX_set_min_proto_version(native, TLS1_2_VERSION);
  SSL_CTX_set_options(native, SSL_OP_NO_RENEGOTIATION);
  if (SSL_CTX_use_certificate_chain_file(native, options.cert_file.c_str()) != 1) {
    return base::invalidArgumentError("cannot load the TLS certificate " + options.cert_file +
                                      ": " + sslError());
  }
  if (SSL_CTX_use_PrivateKey_file(native, options.key_file.c_str(), SSL_FILETYPE_PEM) != 1) {
    return base::invalidArgumentError("cannot load the TLS private key " + options.key_file + ": " +
                                      sslError());
  }
  if (SSL_CTX_check_private_key(native) != 1) {
    return base::invalidArgumentError("the TLS private key " + options.key_file +
                                      " does not match the certificate " + options.cert_file);
  }
  if (!options.client_ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(native, options.client_ca_file.c_str(), nullptr) != 1) {
      return base::invalidArgumentError("cannot load the client CA file " + options.client_ca_file +
                                        ": " + sslError());
    }
    STACK_OF(X509_NAME)* names = SSL_load_client_CA_file(options.client_ca_file.c_str());
    if (names == nullptr) {
      return base::invalidArgumentError("the client CA file " + options.client_ca_file +
                                        " holds no certificate");
    }
    SSL_CTX_set_client_CA_list(native, names);
    SSL_CTX_set_verify(native, SSL_VERIFY_PEER, acceptAnyCertificate);
    static const unsigned char kSessionContext[] = "nodeagent";
    SSL_CTX_set_session_id_context(native, kSessionContext, sizeof kSessionContext - 1);
  }
  return ctx;
}

bool presentedCertificate(TlsTransport& tls) {
  X509* cert = SSL_get1_peer_certificate(tls.stream.native_handle());
  if (cert == nullptr) return false;
  X509_free(cert);
  return true;
}

std::optional<TlsPeer> verifiedPeer(TlsTransport& tls) {
  SSL* ssl = tls.stream.native_handle();
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return std::nullopt;
  std::optional<TlsPeer> peer;
  if (SSL_get_verify_result(ssl) == X509_V_OK &&
      X509_check_purpose(cert, X509_PURPOSE_SSL_CLIENT, 0) == 1) {
    peer.emplace();
    X509_NAME* subject = X509_get_subject_name(cert);
    const int cn = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
    if (cn >= 0) peer->common_name = entryText(X509_NAME_get_entry(subject, cn));
    for (int i = X509_NAME_get_index_by_NID(subject, NID_organizationName, -1); i >= 0;
         i = X509_NAME_get_index_by_NID(subject, NID_organizationName, i)) {
      peer->organizations.push_back(entryText(X509_NAME_get_entry(subject, i)));
    }
  }
  X509_free(cert);
  return peer;
}

}  // namespace nodeagent::agent
