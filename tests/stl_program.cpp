// stl_program.cpp — an ordinary C++ program for the LD_PRELOAD comparison (built without
// frugal): std::map, std::string, std::function, std::queue, std::vector, std::unordered_map
// and std::shared_ptr, with producer threads handing work to consumer threads so objects are
// freed on threads other than the ones that made them. Prints a checksum that depends only on
// the work, never on timing or addresses.
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <queue>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 33)) * 0xff51afd7ed558ccdULL;
  x = (x ^ (x >> 33)) * 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

uint64_t hash_string(const std::string &s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s)
    h = (h ^ c) * 1099511628211ULL;
  return h;
}

// A queue of tasks between threads; a task is a std::function owning heap data.
class TaskQueue {
public:
  void push(std::function<uint64_t()> task) {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push(std::move(task));
    ready_.notify_one();
  }
  bool pop(std::function<uint64_t()> &task) {
    std::unique_lock<std::mutex> lock(mutex_);
    ready_.wait(lock, [this] { return !tasks_.empty() || closed_; });
    if (tasks_.empty())
      return false;
    task = std::move(tasks_.front());
    tasks_.pop();
    return true;
  }
  void close() {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    ready_.notify_all();
  }

private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::queue<std::function<uint64_t()>> tasks_;
  bool closed_ = false;
};

// One unit of work: build a map of strings to vectors, return an order-independent digest.
uint64_t build(uint64_t seed) {
  std::map<std::string, std::vector<uint64_t>> index;
  std::unordered_map<uint64_t, std::string> names;
  uint64_t x = seed;
  for (int i = 0; i < 400; i++) {
    x = mix(x + i);
    std::string key = "k" + std::to_string(x % 257) + std::string(x % 37, 'a' + (char)(x % 26));
    index[key].push_back(x);
    names.emplace(x % 1000, key + key);
  }
  uint64_t h = 0;
  for (const auto &[key, values] : index) {
    h = mix(h ^ hash_string(key));
    for (uint64_t v : values)
      h = mix(h + v);
  }
  uint64_t names_sum = 0;
  for (const auto &[k, v] : names)
    names_sum += mix(k) ^ hash_string(v);
  std::vector<std::string> big(50, std::string(x % 20000, 'z'));
  return h ^ names_sum ^ big.size() * big[0].size();
}

} // namespace

int main() {
  const int producers = 3, consumers = 3, tasks_each = 3000;
  TaskQueue queue;
  std::vector<uint64_t> partial(consumers, 0);
  std::vector<std::thread> threads;
  for (int c = 0; c < consumers; c++) {
    threads.emplace_back([&queue, &partial, c] {
      std::function<uint64_t()> task;
      while (queue.pop(task))
        partial[c] += task(); // sum: independent of which consumer ran which task
    });
  }
  std::vector<std::thread> makers;
  for (int p = 0; p < producers; p++) {
    makers.emplace_back([&queue, p] {
      for (int t = 0; t < tasks_each; t++) {
        auto payload = std::make_shared<std::vector<std::string>>();
        for (int k = 0; k < 8; k++)
          payload->push_back(std::to_string(p * 100000 + t) + "/" + std::to_string(k));
        uint64_t seed = mix((uint64_t)p << 32 | (uint64_t)t);
        queue.push([payload, seed] {
          uint64_t h = build(seed);
          for (const auto &s : *payload)
            h += hash_string(s);
          return h;
        });
      }
    });
  }
  for (auto &t : makers)
    t.join();
  queue.close();
  for (auto &t : threads)
    t.join();
  uint64_t total = 0;
  for (uint64_t v : partial)
    total += v;
  std::printf("tasks: %d\nchecksum: %016llx\n", producers * tasks_each,
              (unsigned long long)total);
  return 0;
}
