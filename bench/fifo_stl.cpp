// fifo_stl — seed 2's original benchmark, docs/lab.md experiment 2 (STL variant): std::queue,
// std::list and std::deque of std::function holding a lambda that captures two or three
// 40-character std::strings; push all, pop all, R rounds in one process, each round timed.
// Every entry costs the allocator one node (or deque chunk share), one std::function target
// and one heap buffer per string: the "tons of tiny objects" the seed suspected.
#include <getopt.h>

#include <deque>
#include <functional>
#include <list>
#include <queue>
#include <string>
#include <utility>

#include "lab.h"

namespace {

using task_t = std::function<size_t()>;

// A 40-character string whose content depends on i, so no two captures are alike.
std::string make_string(uint64_t i, char tag) {
  std::string s(40, tag);
  for (int k = 0; k < 16 && i; k++, i /= 10) s[k] = static_cast<char>('0' + i % 10);
  return s;
}

task_t make_task(uint64_t i, int nstrings) {
  std::string a = make_string(i, 'a'), b = make_string(i, 'b');
  if (nstrings == 2)
    return [a = std::move(a), b = std::move(b)]() { return a.size() + b.size() + (a[0] ^ b[1]); };
  std::string c = make_string(i, 'c');
  return [a = std::move(a), b = std::move(b), c = std::move(c)]() {
    return a.size() + b.size() + c.size() + (a[0] ^ c[1]);
  };
}

// Push `entries` tasks, then pop and run them all; returns the push and pop times.
template <typename Queue, typename Push, typename Pop>
void round_trip(Queue &q, uint64_t entries, int nstrings, Push push, Pop pop, uint64_t *push_ns,
                uint64_t *pop_ns, uint64_t *sum) {
  uint64_t t0 = lab_now_ns();
  for (uint64_t i = 0; i < entries; i++) push(q, make_task(i, nstrings));
  uint64_t t1 = lab_now_ns();
  while (!q.empty()) *sum += pop(q);
  uint64_t t2 = lab_now_ns();
  *push_ns = t1 - t0;
  *pop_ns = t2 - t1;
}

template <typename Queue, typename Push, typename Pop>
void run(const char *name, uint64_t entries, uint64_t rounds, int nstrings, Push push, Pop pop) {
  Queue q;
  uint64_t rss_start = lab_rss_bytes(), sum = 0;
  for (uint64_t r = 0; r < rounds; r++) {
    uint64_t push_ns, pop_ns;
    round_trip(q, entries, nstrings, push, pop, &push_ns, &pop_ns, &sum);
    printf("{\"round\":%llu,\"container\":\"%s\",\"strings\":%d,\"entries\":%llu,"
           "\"push_ns\":%llu,\"pop_ns\":%llu,\"ns_per_entry\":%.3f}\n",
           (unsigned long long)r, name, nstrings, (unsigned long long)entries,
           (unsigned long long)push_ns, (unsigned long long)pop_ns,
           static_cast<double>(push_ns + pop_ns) / static_cast<double>(entries));
    fflush(stdout);
  }
  uint64_t rss_after_pop = lab_rss_bytes();
  char trim[128];
  lab_trim(trim, sizeof trim);
  printf("{\"final\":true,\"container\":\"%s\",\"checksum\":%llu,\"rss_start\":%llu,"
         "\"rss_after_pop\":%llu,\"rss_after_trim\":%llu,\"trim\":\"%s\"}\n",
         name, (unsigned long long)sum, (unsigned long long)rss_start,
         (unsigned long long)rss_after_pop, (unsigned long long)lab_rss_bytes(), trim);
}

[[noreturn]] void usage() {
  fprintf(stderr, "usage: fifo_stl --container queue|list|deque [--strings 2|3] [--entries N] "
                  "[--rounds R]\n");
  exit(2);
}

} // namespace

int main(int argc, char **argv) {
  std::string container = "queue";
  uint64_t entries = 500000, rounds = 4, nstrings = 2;
  static const struct option opts[] = {{"container", required_argument, 0, 'c'},
                                       {"strings", required_argument, 0, 's'},
                                       {"entries", required_argument, 0, 'n'},
                                       {"rounds", required_argument, 0, 'r'},
                                       {0, 0, 0, 0}};
  int ch;
  while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (ch) {
    case 'c': container = optarg; break;
    case 's': nstrings = lab_parse_size("--strings", optarg); break;
    case 'n': entries = lab_parse_size("--entries", optarg); break;
    case 'r': rounds = lab_parse_size("--rounds", optarg); break;
    default: usage();
    }
  }
  if ((nstrings != 2 && nstrings != 3) || rounds == 0) usage();
  const int ns = static_cast<int>(nstrings);
  if (container == "queue") {
    run<std::queue<task_t>>(
        "queue", entries, rounds, ns, [](std::queue<task_t> &q, task_t &&t) { q.push(std::move(t)); },
        [](std::queue<task_t> &q) {
          size_t v = q.front()();
          q.pop();
          return v;
        });
  } else if (container == "list") {
    run<std::list<task_t>>(
        "list", entries, rounds, ns,
        [](std::list<task_t> &q, task_t &&t) { q.push_back(std::move(t)); },
        [](std::list<task_t> &q) {
          size_t v = q.front()();
          q.pop_front();
          return v;
        });
  } else if (container == "deque") {
    run<std::deque<task_t>>(
        "deque", entries, rounds, ns,
        [](std::deque<task_t> &q, task_t &&t) { q.push_back(std::move(t)); },
        [](std::deque<task_t> &q) {
          size_t v = q.front()();
          q.pop_front();
          return v;
        });
  } else {
    usage();
  }
  return 0;
}
