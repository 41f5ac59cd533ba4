// cxxmix — a C++ program that allocates the way C++ programs do: std::string,
// std::function, std::map and std::queue, each object made with operator new and destroyed
// with gcc's sized delete, about 6 of each per round and little other work, so the
// allocator's C++ entry points are a fifth of its instructions. Single-threaded; prints a
// checksum that depends only on the work. `cxxmix [ROUNDS [KEYS [QUEUE]]]`: KEYS distinct map
// keys (a bigger map makes frees colder), at most QUEUE pending std::functions.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <queue>
#include <string>

namespace {

uint64_t next_random(uint64_t &s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

}  // namespace

int main(int argc, char **argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 3500000; // about 21 M news
  uint32_t keys = argc > 2 ? static_cast<uint32_t>(atol(argv[2])) : 4096;
  size_t queue_max = argc > 3 ? static_cast<size_t>(atol(argv[3])) : 256;
  if (rounds < 0 || keys == 0) {
    fprintf(stderr, "usage: cxxmix [ROUNDS [KEYS [QUEUE]]]\n");
    return 2;
  }
  std::map<uint32_t, std::string> map;
  std::queue<std::function<uint64_t()>> queue;
  uint64_t state = 88172645463325252ULL, sum = 0;
  for (long i = 0; i < rounds; i++) {
    uint64_t r = next_random(state);
    std::string value(16 + r % 200, 'v');
    uint32_t key = static_cast<uint32_t>(r >> 20) % keys;
    auto it = map.find(key);
    if (it == map.end())
      map.emplace(key, std::move(value)); // a node
    else if (r & 1)
      map.erase(it); // a node and its string
    else
      it->second = value + "tail-of-the-string"; // a string, the old one freed
    std::string payload = "payload-string-" + std::to_string(r);
    uint64_t a = r, b = r >> 3, c = r * 7;
    // Captures of 56 bytes: std::function puts its target on the heap, with a string copy.
    queue.push([a, b, c, payload]() { return a + b + c + payload.size(); });
    if (queue.size() > queue_max || (r & 3) == 0) {
      sum += queue.front()();
      queue.pop();
    }
  }
  while (!queue.empty()) {
    sum += queue.front()();
    queue.pop();
  }
  printf("%llu %zu\n", static_cast<unsigned long long>(sum), map.size());
  return 0;
}
