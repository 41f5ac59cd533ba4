/* bootstrap.c — allocation at the edges of a process under LD_PRELOAD (RELIABILITY.md,
 * "Faults"): from a constructor that runs before most others, through dlsym/dlopen/dlerror
 * (which allocate inside the dynamic loader), and from a TLS destructor at thread exit.
 * Built without frugal; ctest runs it with LD_PRELOAD=libfrugal.so and it checks that the
 * malloc it gets is frugal's. */
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "testutil.h"

static int early_ok;

/* Priority 101 runs before default-priority constructors of this program. */
__attribute__((constructor(101))) static void early(void) {
  char *p = (char *)malloc(100);
  char *q = (char *)calloc(10, 10);
  if (p && q && tu_is_zero(q, 100)) {
    memset(p, 1, 100);
    p = (char *)realloc(p, 5000);
    early_ok = p && p[99] == 1;
  }
  free(p);
  free(q);
}

static pthread_key_t key;
static int destructor_ok;
static void tls_free(void *v) {
  free(v);
  void *late = malloc(64);
  destructor_ok = late != NULL;
  free(late);
}
static void *thread_main(void *arg) {
  (void)arg;
  pthread_setspecific(key, malloc(128));
  return NULL;
}

int main(void) {
  CHECK("malloc/calloc/realloc/free work in an early (priority 101) constructor", early_ok);

  Dl_info info;
  void *sym = dlsym(RTLD_DEFAULT, "malloc");
  int found = sym && dladdr(sym, &info) && info.dli_fname && strstr(info.dli_fname, "frugal");
  CHECK("dlsym(RTLD_DEFAULT, \"malloc\") resolves into libfrugal (the preload is in effect)",
        found);
  void *next = dlsym(RTLD_NEXT, "malloc");
  CHECK("dlsym(RTLD_NEXT, \"malloc\") works under the preload", next != NULL);
  CHECK("dlsym of a missing symbol returns NULL", dlsym(RTLD_DEFAULT, "no_such_symbol_fg") == NULL);
  const char *err = dlerror();
  CHECK("dlerror (which allocates its message) reports the missing symbol",
        err != NULL && strstr(err, "no_such_symbol_fg") != NULL);
  int opened = 0;
  for (int i = 0; i < 20; i++) {
    void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
    if (h && dlsym(h, "cos"))
      opened++;
    if (h)
      dlclose(h);
  }
  CHECK("dlopen/dlsym/dlclose of libm.so.6, 20 times", opened == 20);

  pthread_key_create(&key, tls_free);
  pthread_t t;
  pthread_create(&t, NULL, thread_main, NULL);
  pthread_join(t, NULL);
  CHECK("a TLS destructor frees and allocates at thread exit", destructor_ok);
  return check_finish("bootstrap");
}
