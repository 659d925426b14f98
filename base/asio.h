// The one include of Boost.Asio in nodeagent. Boost 1.74 with GCC 12 needs <utility> first, and
// everyone gets the same coroutine support and namespace alias from here.
#pragma once

#include <utility>

#include <boost/asio.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace nodeagent {
namespace asio = boost::asio;
}  // namespace nodeagent
