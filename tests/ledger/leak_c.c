/* leak_c.c — a C program that leaks from named functions, for the leak report's test: run
 * under `frugal run --leaks`, the report must name leak_config_table (48 blocks of 256 B, the
 * biggest site) and leak_one_name (one block of 24 B). Built with -g -O0 so addr2line finds
 * each function, file and line; exits with 3 so `frugal run` can show it passes the code on. */
#include <stdlib.h>
#include <string.h>

/* Kept in a global so the compiler cannot prove the blocks dead; never freed. */
void *volatile sink[64];

__attribute__((noinline)) void leak_config_table(void) {
  for (int i = 0; i < 48; i++) {
    char *row = malloc(256);
    memset(row, i, 256);
    sink[i] = row;
  }
}

__attribute__((noinline)) void leak_one_name(void) {
  char *name = malloc(24);
  strcpy(name, "never freed");
  sink[60] = name;
}

int main(void) {
  for (int i = 0; i < 1000; i++) free(malloc(64 + (size_t)i)); /* churn that is not a leak */
  leak_config_table();
  leak_one_name();
  return 3;
}
