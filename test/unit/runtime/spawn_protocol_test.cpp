// The spawn helper's wire format (agent/runtime/spawn.h) over a real SOCK_SEQPACKET pair.
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "agent/runtime/spawn.h"

using namespace nodeagent::runtime;

namespace {

struct Pair {
  int a = -1;
  int b = -1;
  Pair() {
    int fds[2];
    REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) == 0);
    a = fds[0];
    b = fds[1];
  }
  ~Pair() {
    if (a >= 0) ::close(a);
    if (b >= 0) ::close(b);
  }
};

// The inode of `fd` (two descriptors of one open file share it).
ino_t inodeOf(int fd) {
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  return st.st_ino;
}

bool isCloseOnExec(int fd) { return (::fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0; }

void sendRaw(int sock, const std::string& bytes, int fd = -1) {
  iovec iov{const_cast<char*>(bytes.data()), bytes.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  REQUIRE(::sendmsg(sock, &msg, 0) == static_cast<ssize_t>(bytes.size()));
}

}  // namespace

TEST_CASE("spawn protocol: a request carries the arguments and the descriptors by slot") {
  Pair pair;
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  const std::vector<std::string> args{"/usr/bin/shim", "run", "/var/lib/x y", ""};
  const int fds[] = {-1, pipe_fds[0], -1, pipe_fds[1]};
  REQUIRE(sendSpawnRequest(pair.a, args, fds) == 0);

  std::vector<std::string> got_args;
  std::vector<int> got_fds;
  REQUIRE(receiveSpawnRequest(pair.b, got_args, got_fds) == 0);
  CHECK(got_args == args);
  REQUIRE(got_fds.size() == 4);
  CHECK(got_fds[0] == -1);
  CHECK(got_fds[2] == -1);
  REQUIRE(got_fds[1] >= 0);
  REQUIRE(got_fds[3] >= 0);
  CHECK(inodeOf(got_fds[1]) == inodeOf(pipe_fds[0]));
  CHECK(inodeOf(got_fds[3]) == inodeOf(pipe_fds[1]));
  CHECK(isCloseOnExec(got_fds[1]));
  CHECK(isCloseOnExec(got_fds[3]));
  for (int fd : {got_fds[1], got_fds[3], pipe_fds[0], pipe_fds[1]}) ::close(fd);
}

TEST_CASE("spawn protocol: a reply carries the pid and a descriptor only on success") {
  Pair pair;
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  REQUIRE(sendSpawnReply(pair.b, SpawnReply{0, 4242}, pipe_fds[0]) == 0);
  SpawnReply reply;
  int fd = -1;
  REQUIRE(receiveSpawnReply(pair.a, reply, fd) == 0);
  CHECK(reply.error == 0);
  CHECK(reply.pid == 4242);
  REQUIRE(fd >= 0);
  CHECK(inodeOf(fd) == inodeOf(pipe_fds[0]));
  CHECK(isCloseOnExec(fd));
  ::close(fd);

  REQUIRE(sendSpawnReply(pair.b, SpawnReply{ENOENT, 0}, -1) == 0);
  REQUIRE(receiveSpawnReply(pair.a, reply, fd) == 0);
  CHECK(reply.error == ENOENT);
  CHECK(fd == -1);

  // A success without its descriptor is not a reply.
  const SpawnReply started{0, 4243};
  sendRaw(pair.b, std::string(reinterpret_cast<const char*>(&started), sizeof started));
  CHECK(receiveSpawnReply(pair.a, reply, fd) == EPROTO);
  CHECK(fd == -1);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST_CASE("spawn protocol: malformed requests are refused and their descriptors closed") {
  Pair pair;
  std::vector<std::string> args;
  std::vector<int> fds;
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);

  SECTION("a slot that names a descriptor the message does not carry") {
    sendRaw(pair.a, std::string("nf\0/bin/true\0", 13));
    CHECK(receiveSpawnRequest(pair.b, args, fds) == EPROTO);
  }
  SECTION("a descriptor no slot names") {
    sendRaw(pair.a, std::string("n\0/bin/true\0", 12), pipe_fds[1]);
    CHECK(receiveSpawnRequest(pair.b, args, fds) == EPROTO);
    // The refused descriptor was closed: with ours closed too, the pipe reads as ended (a copy
    // left open would make the read fail with EAGAIN instead).
    ::close(pipe_fds[1]);
    pipe_fds[1] = -1;
    REQUIRE(::fcntl(pipe_fds[0], F_SETFL, O_NONBLOCK) == 0);
    char c;
    CHECK(::read(pipe_fds[0], &c, 1) == 0);
  }
  SECTION("more slots than a child gets") {
    sendRaw(pair.a, std::string("nnnnn\0/bin/true\0", 16));
    CHECK(receiveSpawnRequest(pair.b, args, fds) == EPROTO);
  }
  SECTION("no arguments") {
    sendRaw(pair.a, std::string("n\0", 2));
    CHECK(receiveSpawnRequest(pair.b, args, fds) == EPROTO);
  }
  SECTION("arguments not NUL-terminated") {
    sendRaw(pair.a, std::string("n\0/bin/true", 11));
    CHECK(receiveSpawnRequest(pair.b, args, fds) == EPROTO);
  }
  SECTION("an unknown slot letter") {
    sendRaw(pair.a, std::string("x\0/bin/true\0", 12));
    CHECK(receiveSpawnRequest(pair.b, args, fds) == EPROTO);
  }
  CHECK(fds.empty());
  for (int fd : pipe_fds) {
    if (fd >= 0) ::close(fd);
  }
}

TEST_CASE("spawn protocol: too many descriptors or too long a request is the caller's error") {
  Pair pair;
  const int five[] = {-1, -1, -1, -1, -1};
  CHECK(sendSpawnRequest(pair.a, {"/bin/true"}, five) == EINVAL);
  CHECK(sendSpawnRequest(pair.a, {std::string(kMaxSpawnRequest, 'a')}, {}) == E2BIG);
}

TEST_CASE("spawn protocol: the other end closing is ECONNRESET and a send to it EPIPE") {
  Pair pair;
  ::close(pair.b);
  pair.b = -1;
  std::vector<std::string> args;
  std::vector<int> fds;
  CHECK(receiveSpawnRequest(pair.a, args, fds) == ECONNRESET);
  SpawnReply reply;
  int fd = -1;
  CHECK(receiveSpawnReply(pair.a, reply, fd) == ECONNRESET);
  CHECK(sendSpawnRequest(pair.a, {"/bin/true"}, {}) == EPIPE);
}

TEST_CASE("spawn protocol: the greeting is checked") {
  Pair pair;
  REQUIRE(sendSpawnGreeting(pair.b) == 0);
  CHECK(receiveSpawnGreeting(pair.a) == 0);
  // A program that says anything else (say, the usage text of another shim version).
  sendRaw(pair.b, "usage: nodeagent-shim run <state-dir>");
  CHECK(receiveSpawnGreeting(pair.a) != 0);
  sendRaw(pair.b, "nodeagent-spawner 2");
  CHECK(receiveSpawnGreeting(pair.a) == EPROTO);
}
