#include "api/async_rest_client.h"

namespace nodeagent::api {

asio::awaitable<base::StatusOr<std::string>> AsyncRestClient::request(
    std::string method, std::string path, Query query, std::string body,
    std::string content_type) const {
  return run([method = std::move(method), path = std::move(path), query = std::move(query),
              body = std::move(body), content_type = std::move(content_type)](RestClient& c) {
    return c.request(method, path, query, body, content_type);
  });
}

void AsyncRestClient::request(std::string method, std::string path, Query query, std::string body,
                              std::string content_type, asio::any_io_executor ex,
                              std::function<void(base::StatusOr<std::string>)> done) const {
  run([method = std::move(method), path = std::move(path), query = std::move(query),
       body = std::move(body), content_type = std::move(content_type)](
          RestClient& c) { return c.request(method, path, query, body, content_type); },
      std::move(ex), std::move(done));
}

}  // namespace nodeagent::api
