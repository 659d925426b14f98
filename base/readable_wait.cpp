#include "base/readable_wait.h"

#include <poll.h>

#include <cerrno>

namespace nodeagent::base {

bool pollsReadable(int fd) {
  pollfd p{fd, POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, 0);
  } while (n < 0 && errno == EINTR);
  // An error from poll itself is reported as readable: the caller's read or waitid then sees
  // the real problem instead of waiting for ever.
  return n != 0;
}

void asyncWaitReadable(std::shared_ptr<asio::posix::stream_descriptor> sd,
                       std::function<void(const boost::system::error_code&)> handler) {
  auto& descriptor = *sd;
  descriptor.async_wait(asio::posix::stream_descriptor::wait_read,
                        [sd = std::move(sd), handler = std::move(handler)](
                            const boost::system::error_code& ec) mutable {
                          if (!ec && !pollsReadable(sd->native_handle())) {
                            asyncWaitReadable(std::move(sd), std::move(handler));
                            return;
                          }
                          handler(ec);
                        });
}

asio::awaitable<boost::system::error_code> waitReadable(asio::posix::stream_descriptor& sd) {
  while (true) {
    boost::system::error_code ec;
    co_await sd.async_wait(asio::posix::stream_descriptor::wait_read,
                           asio::redirect_error(asio::use_awaitable, ec));
    if (ec || pollsReadable(sd.native_handle())) co_return ec;
  }
}

}  // namespace nodeagent::base
