// leak_cxx.cpp — a C++ program that leaks through operator new from a named function (and a
// method), for the leak report's test: `frugal run --leaks` must name Registry::remember and
// leak_widgets. Built with -g -O0; exits 0. The containers that are freed must not show up.
#include <map>
#include <memory>
#include <string>
#include <vector>

struct Widget {
  std::string name;
  double weight[12];
};

struct Registry {
  std::vector<Widget *> items;
  __attribute__((noinline)) void remember(int i) { items.push_back(new Widget{"widget " + std::to_string(i), {}}); }
};

static Registry *registry;

__attribute__((noinline)) void leak_widgets(int n) {
  registry = new Registry;
  for (int i = 0; i < n; i++) registry->remember(i);
}

int main() {
  {
    std::map<int, std::string> scratch; // freed before exit: not a leak
    for (int i = 0; i < 500; i++) scratch[i] = std::string(40, 'x');
  }
  leak_widgets(100);
  return 0;
}
