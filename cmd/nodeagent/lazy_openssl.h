// See lazy_openssl.cpp: OpenSSL initialisation deferred from load time to first use.
#pragma once

namespace nodeagent::cmd {

// Called first thing in main(): from now on OpenSSL initialises when it is first used.
void allowOpenSslInit();

}  // namespace nodeagent::cmd
