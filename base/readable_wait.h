// Waiting for a descriptor to become readable without trusting a bare wake-up.
//
// Boost.Asio 1.74's epoll reactor keeps one state object per registered descriptor and recycles
// freed ones. When a descriptor is closed while an event for it is already collected but not yet
// processed (another thread ran epoll_wait, or the event is queued behind the handler that
// closes it), and a new descriptor takes over the recycled state before that event runs, the
// stale event is applied to the new descriptor. A read or write then finds nothing to do and
// waits again, but an async_wait completes: the new descriptor "became readable" though it is
// not. For a pidfd that means "the process ended" while it still runs. These helpers check every
// wake-up with poll(2) and wait again when the descriptor is not readable after all.
#pragma once

#include <functional>
#include <memory>

#include "base/asio.h"

namespace nodeagent::base {

// True when `fd` polls readable now (or reports an error or hang-up).
bool pollsReadable(int fd);

// Calls `handler` once `sd` is readable (no error), or with the error that ended the wait
// (operation_aborted when cancelled or closed). `sd` is held until then.
void asyncWaitReadable(std::shared_ptr<asio::posix::stream_descriptor> sd,
                       std::function<void(const boost::system::error_code&)> handler);

// The same as a coroutine: returns once `sd` is readable, or with the error that ended the wait.
asio::awaitable<boost::system::error_code> waitReadable(asio::posix::stream_descriptor& sd);

}  // namespace nodeagent::base
