/* hooks.c — where a hooked call goes: the one place that sends a call to the layers that watch
 * it (secure.c, the ledger in stats.c), so that a mode is added here and not in the fast paths.
 * The mode word (init.c) decides who takes the hooks:
 *
 *   mode (FG_MODE_*)        fg_malloc, fg_free              every other entry point    samples
 *   none                    fast paths                      plain                      guards
 *   LEDGER + LEDGER_FAST    fast paths, counted inline      a block popped from a      profile
 *                                                           page counted inline (the
 *                                                           aligned calls, calloc,
 *                                                           realloc's new block); the
 *                                                           rest the hooks: ledger
 *   LEDGER (leak stacks)    the hooks: ledger               the hooks: ledger          none
 *   SECURE + SECURE_FAST    malloc: fast path, the block    the hooks: secure          none
 *                           armed out of line; free: hooked
 *   SECURE + LEDGER         the hooks: secure + ledger      the hooks: secure + ledger none
 *
 * The hooked paths are alloc.c's malloc_hooked, realloc_hooked and the hooked halves of
 * fg_calloc and malloc_aligned, free.c's free_unusual (reached through FG_SEGMAP_HOOKED) and
 * usable_slow, and sample.c's sampled blocks (counted by the ledger like any other). Secure mode
 * alone (_fg_secure_alone) is the one mode meant to stay on in production, so it runs where it
 * can with the page in hand and no lookup repeated. malloc's fast path pops its pages, which
 * sit in the direct table a class up (page.c's _fg_direct_words: every request leaves 8 bytes
 * of canary room) and whose FG_USED_SECURE flag sends the block to _fg_secure_popped; the
 * plain fast path pays nothing for it. Its frees skip _fg_hook_free: free_unusual sends them to
 * secure.c's _fg_secure_free_small, which checks and pushes a small block of the thread's own
 * pages and leaves the rest to free.c's checked path, which calls secure.c where it pushes a
 * small block (_fg_secure_freeing) and before a large block's free (_fg_secure_free). Its
 * other small allocations are armed by malloc_hooked (_fg_secure_arm), which popped them, or
 * by the hooks. */
#include "internal.h"

fg_rare void _fg_hook_alloc(void *p, size_t size) {
  if (_fg_secure_on()) _fg_secure_alloc(p, size);
  if (_fg_ledger_active()) _fg_ledger_alloc(p, size);
}

/* The ledger reads the request secure mode stored, and clears it. */
fg_rare size_t _fg_hook_free(void *p) {
  if (!_fg_ledger_active()) return _fg_secure_on() ? _fg_secure_free(p) : 0;
  if (_fg_secure_on()) _fg_secure_free_keep(p);
  return _fg_ledger_free(p);
}

/* Only secure mode knows a block's request apart from its usable size. */
size_t _fg_hook_requested(const void *p) { return _fg_secure_on() ? _fg_secure_requested(p) : SIZE_MAX; }
