/* pair.c — the fast path's workloads for the instruction budget, after a warm-up, so that
 * the difference between two N is the N operations alone:
 *   pair N SIZE  N malloc/free pairs of one small size;
 *   list N SIZE  a linked list of N blocks built, then freed from its head: each freed
 *                block's first word points at a live neighbour in its own segment, which
 *                free()'s double-free test must not mistake for a free-list link (a page
 *                walk each time would cost thousands of instructions per free). */
#include <stdlib.h>
#include <string.h>

typedef struct node_s {
  struct node_s *next;
} node_t;

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 100000;
  size_t size = argc > 2 ? (size_t)atol(argv[2]) : 32;
  const char *mode = argc > 3 ? argv[3] : "pair";
  void *volatile sink;
  for (int i = 0; i < 1000; i++) {
    sink = malloc(size);
    free(sink);
  }
  if (strcmp(mode, "list") == 0) {
    node_t *head = NULL;
    for (long i = 0; i < n; i++) {
      node_t *node = malloc(size);
      node->next = head;
      head = node;
    }
    while (head != NULL) {
      node_t *next = head->next;
      free(head);
      head = next;
    }
    return 0;
  }
  for (long i = 0; i < n; i++) {
    sink = malloc(size);
    free(sink);
  }
  (void)sink;
  return 0;
}
