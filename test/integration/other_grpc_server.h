// A gRPC server on a Unix socket that serves another API than the one a test's client expects
// (CRI's ImageService, every method of it UNIMPLEMENTED): for "not the runtime you meant" errors.
#pragma once

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <memory>
#include <string>

#include "agent/runtime/cri/api.grpc.pb.h"

namespace nodeagent::testing {

class OtherGrpcServer {
 public:
  // Listens on `endpoint` ("unix:///path"); fails the test when it cannot.
  explicit OtherGrpcServer(const std::string& endpoint) {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    builder.AddListeningPort(endpoint, grpc::InsecureServerCredentials());
    server_ = builder.BuildAndStart();
    REQUIRE(server_ != nullptr);
  }
  ~OtherGrpcServer() { shutdown(); }
  OtherGrpcServer(const OtherGrpcServer&) = delete;
  OtherGrpcServer& operator=(const OtherGrpcServer&) = delete;

  void shutdown() {
    if (server_) server_->Shutdown();
  }

 private:
  ::runtime::v1::ImageService::Service service_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace nodeagent::testing
