#include <cstdio>

int main() {
  std::fprintf(stderr, "test-apiserver: not built yet\n");
  return 2;
}
