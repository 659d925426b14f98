#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("nodeagent %s\n", NODEAGENT_VERSION);
    return 0;
  }
  std::fprintf(stderr, "usage: nodeagent [validate|pod-updates] [flags]\n");
  return 2;
}
