/* libdthrottle.c: the whole library as one translation unit, in the manner
 * of SQLite's amalgamation, for the programs that compile libdthrottle in
 * rather than link it: Apache's module (apxs, contrib/apache), nginx's
 * (its config, contrib/nginx/module), HAProxy's Lua module
 * (contrib/haproxy/Makefile) and the tests name this one file, and the
 * Makefile builds libdthrottle.a and libdthrottle.so from it. It is the
 * one list of the library's sources: a file added or split is #included
 * here, and nowhere else changes.
 *
 * The library's files are named dthrottle_*.c and dthrottle_*.h; the
 * builds that compile this file rebuild when any file of that pattern
 * changes, so a source named otherwise would be compiled in but not
 * watched.
 *
 * As one translation unit the files share one scope: a static function,
 * variable or macro of one must not take a name another uses (the
 * compiler says so). A feature macro counts only before the first system
 * header, whichever file includes it: _GNU_SOURCE is defined here, before
 * them all.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "dthrottle_table.c"
#include "dthrottle_policy.c"
#include "dthrottle_view.c"
#include "dthrottle_hash.c"
#include "dthrottle_socket.c"
#include "dthrottle_attach.c"
#include "dthrottle_headers.c"
#include "dthrottle_quota.c"
