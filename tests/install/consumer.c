/* consumer.c — a program built against an installed frugal (pkg-config or find_package). */
#include <frugal.h>
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  void *p = malloc(100);
  int ok = fg_is_owned(p) && fg_usable_size(p) >= 100;
  free(p);
  printf("%s: malloc is frugal's\n", ok ? "ok" : "FAIL");
  return ok ? 0 : 1;
}
