/* hooks.c — where a hooked call goes: the one place that sends a call to the layers that watch
 * it (secure.c, the ledger in stats.c), so that a mode is added here and not in the fast paths.
 * The mode word (init.c) decides who takes the hooks:
 *
 *   mode (FG_MODE_*)        fg_malloc, fg_free              every other entry point    samples
 *   none                    fast paths                      plain                      guards
 *   LEDGER + LEDGER_FAST    fast paths, counted inline      the hooks: ledger          profile
 *   LEDGER (leak stacks)    the hooks: ledger               the hooks: ledger          none
 *   SECURE (+ LEDGER)       the hooks: secure (+ ledger)    the hooks: secure (+ ...)  none
 *
 * The hooked paths are alloc.c's malloc_hooked, realloc_hooked and the hooked halves of
 * fg_calloc and malloc_aligned, free.c's free_unusual (reached through FG_SEGMAP_HOOKED) and
 * usable_slow, and sample.c's sampled blocks (counted by the ledger like any other). Secure mode
 * alone (_fg_secure_alone) is the one mode meant to stay on in production, so its frees skip
 * _fg_hook_free, which would find the block's page again and check what free checks next:
 * free.c calls secure.c where it pushes a small block on a free list (_fg_secure_freeing),
 * free's checks passed and the page in hand, and before a large block's free (_fg_secure_free).
 * Its small allocations are armed by malloc_hooked (_fg_secure_arm), which popped them. */
#include "internal.h"

void _fg_hook_alloc(void *p, size_t size) {
  if (_fg_secure_on()) _fg_secure_alloc(p, size);
  if (_fg_ledger_active()) _fg_ledger_alloc(p, size);
}

/* The ledger reads the request secure mode stored, and clears it. */
size_t _fg_hook_free(void *p) {
  if (!_fg_ledger_active()) return _fg_secure_on() ? _fg_secure_free(p) : 0;
  if (_fg_secure_on()) _fg_secure_free_keep(p);
  return _fg_ledger_free(p);
}

/* Only secure mode knows a block's request apart from its usable size. */
size_t _fg_hook_requested(const void *p) { return _fg_secure_on() ? _fg_secure_requested(p) : SIZE_MAX; }
