// Placeholder so the library exists before the server code lands.
namespace nodeagent::testapiserver {
int placeholder() { return 0; }
}  // namespace nodeagent::testapiserver
