// OpenSSL is initialised when the agent first uses TLS, not when it loads.
//
// The HTTP library and Asio's SSL support each initialise OpenSSL from a static constructor,
// loading every error string of libssl and libcrypto: about 2 MiB of resident memory in a
// process that may never speak TLS (static pods from a directory, no apiserver). This
// definition of OPENSSL_init_ssl takes the place of libssl's for the whole process (the
// executable comes first in symbol lookup): before main() it does nothing, afterwards it
// forwards to libssl. OpenSSL initialises itself with its defaults (error strings included) on
// first use, so TLS clients, servers and their error messages work as before.
#include <dlfcn.h>

#include <atomic>
#include <cstdint>

#include "cmd/nodeagent/lazy_openssl.h"

namespace {

std::atomic<bool> g_started{false};

using InitFn = int (*)(uint64_t, const void*);

InitFn realInit() {
  static InitFn fn = [] {
    void* sym = ::dlvsym(RTLD_NEXT, "OPENSSL_init_ssl", "OPENSSL_3.0.0");
    if (sym == nullptr) sym = ::dlsym(RTLD_NEXT, "OPENSSL_init_ssl");
    return reinterpret_cast<InitFn>(sym);
  }();
  return fn;
}

}  // namespace

extern "C" int OPENSSL_init_ssl(uint64_t opts, const void* settings) {
  if (!g_started.load(std::memory_order_acquire)) return 1;  // static initialisation: later
  InitFn fn = realInit();
  return fn != nullptr ? fn(opts, settings) : 0;
}

namespace nodeagent::cmd {

void allowOpenSslInit() { g_started.store(true, std::memory_order_release); }

}  // namespace nodeagent::cmd
